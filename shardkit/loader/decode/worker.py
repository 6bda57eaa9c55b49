"""Decode a sample's JPEG straight to its output crop, at the lowest resolution that suffices.

Crop geometry is computed on the stored image size before decoding:

* train: torchvision's ``RandomResizedCrop.get_params`` (10 attempts, then a
  center crop clamped to the ratio range) and a horizontal flip with p=0.5, for a
  whole batch at once from uniforms that are a hash of ``(seed, epoch, global id)``
  (:func:`sample_uniforms`), so a sample's crop does not depend on the number of
  ranks or workers, and no Python runs per sample to draw it;
* eval: torchvision's ``Resize(resize_size)`` + ``CenterCrop(size)`` expressed
  as one box in the original image.

Then the JPEG is decoded with DCT scaling (libjpeg-turbo decodes at 1/2, 1/4,
1/8 scale almost for free) as far down as the crop still has ``size`` pixels,
and the box is resized to ``size`` x ``size`` with an antialiased bilinear
filter (torch's vectorised uint8 kernel: 2-3x faster than PIL's ``resize``),
written straight into the batch (``3 x size x size`` view; channels-last batches
are the kernel's native layout, a contiguous one costs a transposing pass). Decoders (:mod:`shardkit.loader.decode.decoders`, measured in docs/benchmarks.md): simplejpeg
(libjpeg-turbo, fastest), PIL with ``draft`` (fallback for anything that is not
a baseline RGB/gray JPEG, and when simplejpeg is not installed), and
``torchvision.io.decode_jpeg`` (no DCT scaling; kept for comparison).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    import torch

from shardkit.loader.config import ImageConfig, Preset
from shardkit.loader.decode.cropgeometry import Box, center_box, center_boxes, rrc_boxes, sample_uniforms
from shardkit.loader.decode.decoders import JpegDecoder, make_decoder
from shardkit.loader.decode.letterbox import DETECT_UNIFORMS, detect_boxes, letterbox_boxes, letterboxed_crop
from shardkit.loader.decode.resample import channels_last_empty, dct_size, decoded_scale, resize_into

#: eval images more elongated than this are cropped before resizing (bounded memory; borders may differ by a level)
MAX_EVAL_ASPECT = 4


class Crops:
    """Crop geometry of a batch: ``boxes`` ``[n, 4]`` (left, top, right, bottom in stored-image
    pixels; ``None`` when the eval preset's were not asked for) and ``flips`` ``[n]`` bool."""

    __slots__ = ("boxes", "flips")

    def __init__(self, boxes: Optional[np.ndarray], flips: np.ndarray):
        self.boxes, self.flips = boxes, flips


class CropDecoder:
    """Turns JPEG bytes into ``3 x size x size`` uint8 images of the configured preset.

    The batch path is three steps: :meth:`header` per sample (no pixels decoded),
    :meth:`geometry` once for the whole batch (vectorised), :meth:`decode_into` per
    sample. ``decoder(data, out, epoch, gid)`` does all three for one sample.

    Args:
        cfg: image options.
        seed: the loader's seed (with ``epoch`` and the sample's global id it keys the crop).
    """

    def __init__(self, cfg: ImageConfig, seed: int):
        self.cfg, self.seed = cfg, seed
        self.decoder = make_decoder(cfg.decoder)
        self.fast = bool(cfg.fast_decode)

    def header(self, data: bytes) -> tuple[int, int]:
        """``(width, height)`` from the header.

        Raises:
            ValueError: the header declares no pixels or more than ``max_pixels`` (nothing is decoded).
        """
        width, height = self.decoder.header(data)
        if width < 1 or height < 1 or width * height > self.cfg.max_pixels:
            raise ValueError(
                f"image declares {width} x {height} pixels (limit {self.cfg.max_pixels} pixels: max_pixels)"
            )
        return width, height

    def geometry(self, sizes: np.ndarray, epoch: int, gids: np.ndarray, *, eval_boxes: bool = True) -> Crops:
        """Crop boxes and flips of a batch; ``sizes`` is ``[n, 2]`` (width, height).

        ``eval_boxes=False``: the eval preset's boxes are not computed (``boxes`` is ``None``),
        for the CPU decode, whose resize + center crop derives them from the image size.
        """
        c = self.cfg
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        n = len(sizes)
        if c.preset is Preset.LETTERBOX:
            return Crops(letterbox_boxes(sizes[:, 0], sizes[:, 1], c.size), np.zeros(n, bool))
        if c.preset is Preset.DETECT:
            u = sample_uniforms(self.seed, epoch, gids, DETECT_UNIFORMS)
            flips = (u[:, 3] < 0.5) if c.flip else np.zeros(n, bool)
            return Crops(detect_boxes(sizes[:, 0], sizes[:, 1], u, c.size, c.scale), flips)  # type: ignore[arg-type]
        if c.preset is Preset.EVAL:
            boxes = center_boxes(sizes[:, 0], sizes[:, 1], c.size, c.resize_size) if eval_boxes else None  # type: ignore[arg-type]
            return Crops(boxes, np.zeros(n, bool))
        u = sample_uniforms(self.seed, epoch, gids)
        top, left, h, w = rrc_boxes(sizes[:, 0], sizes[:, 1], u, c.scale, c.ratio)  # type: ignore[arg-type]
        boxes = np.stack([left, top, left + w, top + h], axis=1).astype(np.float64)
        flips = (u[:, 22] < 0.5) if c.flip else np.zeros(n, bool)
        return Crops(boxes, flips)

    def decode_into(
        self,
        data: bytes,
        width: int,
        height: int,
        box: Optional[Sequence[float]],
        flip: bool,
        out: "torch.Tensor",
        times: Optional[list[float]] = None,
    ) -> Box:
        """Decode ``data`` (header already read) into ``out``, a ``3 x size x size`` uint8 view,
        cropping ``box`` (a row of :attr:`Crops.boxes`; ignored by the eval preset).
        ``times`` (optional) accumulates seconds ``[decoding, crop/resize]``.

        Returns:
            The box the pixels really came from, in stored pixels (``box`` rounded to the decoded grid).
        """
        c = self.cfg
        if c.preset in (Preset.DETECT, Preset.LETTERBOX):
            return letterboxed_crop(self.decoder, data, width, height, tuple(box), c.size, flip, out, times, self.fast)  # type: ignore[arg-type]
        if c.preset is Preset.EVAL:
            return resize_center_crop(self.decoder, data, width, height, c.resize_size, c.size, out, times, self.fast)  # type: ignore[arg-type]
        return resized_crop(self.decoder, data, width, height, tuple(box), c.size, flip, out, times, self.fast)  # type: ignore[arg-type]

    def decode_batch(
        self,
        datas: Sequence[bytes],
        sizes: Sequence[tuple[int, int]],
        crops: Crops,
        images: "torch.Tensor",
        failed: Callable[[int, Exception], None],
        times: Optional[list[float]] = None,
        used: Optional[np.ndarray] = None,
    ) -> list[int]:
        """Decode each of ``datas`` into the next free row of ``images`` (``[n, 3, size, size]``).

        A sample whose decode raises is reported to ``failed(i, exc)`` and leaves no row.
        ``used`` (``[n, 4]``, optional): row ``r`` gets the box row ``r``'s pixels really came from
        (what :meth:`decode_into` returns; the targets follow it).
        Flips are applied per row, as part of the resize: one flip per image costs ~14 us,
        a batched (fancy-indexed) flip of the same rows ~15x more on CPU (64 channels-last 224 px rows, one thread).

        Returns:
            The indices into ``datas`` of the rows written, in order.
        """
        boxes = crops.boxes.tolist() if crops.boxes is not None else [None] * len(datas)
        flips = crops.flips.tolist()
        kept: list[int] = []
        for i, data in enumerate(datas):
            try:
                box = self.decode_into(data, sizes[i][0], sizes[i][1], boxes[i], flips[i], images[len(kept)], times)
            except Exception as exc:  # noqa: BLE001 - reported to the caller, who decides
                failed(i, exc)
                continue
            if used is not None:
                used[len(kept)] = box
            kept.append(i)
        return kept

    def __call__(self, data: bytes, out: "torch.Tensor", epoch: int, gid: int) -> None:
        """Decode one sample into ``out`` (a ``3 x size x size`` uint8 tensor view).

        Raises:
            ValueError: the header declares no pixels or more than ``max_pixels`` (nothing is decoded).
        """
        width, height = self.header(data)
        crops = self.geometry(np.array([[width, height]]), epoch, np.array([gid]))
        box = crops.boxes[0].tolist() if crops.boxes is not None else None
        self.decode_into(data, width, height, box, bool(crops.flips[0]), out)


def resized_crop(
    decoder: JpegDecoder,
    data: bytes,
    width: int,
    height: int,
    box: Box,
    size: int,
    flip: bool,
    out: "torch.Tensor",
    times: Optional[list[float]] = None,
    fast: bool = False,
) -> Box:
    """Decode at the smallest DCT scale that keeps ``box`` >= ``size`` px, resize ``box`` to ``size`` into ``out``.

    ``times`` (optional) accumulates seconds ``[decoding, crop/resize]``.

    Returns:
        The box cut, in stored pixels: ``box`` rounded to the decoded pixel grid (what the targets follow).
    """
    import torch

    t0 = time.perf_counter()
    bw, bh = box[2] - box[0], box[3] - box[1]
    arr = decoder.decode(data, *dct_size(width, height, min(bw / size, bh / size)), fast)
    t1 = time.perf_counter()
    dh, dw = arr.shape[0], arr.shape[1]
    sx, sy = decoded_scale(width, height, dw, dh)
    x0, y0 = min(dw - 1, int(round(box[0] * sx))), min(dh - 1, int(round(box[1] * sy)))
    x1, y1 = max(x0 + 1, min(dw, int(round(box[2] * sx)))), max(y0 + 1, min(dh, int(round(box[3] * sy))))
    resize_into(torch.from_numpy(arr).permute(2, 0, 1)[:, y0:y1, x0:x1], out)
    if flip:
        out.copy_(out.flip(-1))
    if times is not None:
        times[0] += t1 - t0
        times[1] += time.perf_counter() - t1
    return x0 / sx, y0 / sy, x1 / sx, y1 / sy


def resize_center_crop(
    decoder: JpegDecoder,
    data: bytes,
    width: int,
    height: int,
    resize_size: int,
    size: int,
    out: "torch.Tensor",
    times: Optional[list[float]] = None,
    fast: bool = False,
) -> Box:
    """torchvision ``Resize(resize_size)`` + ``CenterCrop(size)``, decoding at a reduced DCT scale when possible.

    Returns:
        The box cut, in stored pixels (the whole image is resized: :func:`center_box`, exactly).
    """
    import torch

    if max(width, height) > MAX_EVAL_ASPECT * min(width, height):
        # A panorama (or a hostile 65000 x 1 header): resizing the whole image first would
        # allocate resize_size^2 x aspect pixels; crop the same box first, then resize it.
        return resized_crop(
            decoder, data, width, height, center_box(width, height, size, resize_size), size, False, out, times, fast
        )
    t0 = time.perf_counter()
    if width <= height:
        new_w, new_h = resize_size, int(resize_size * height / width)
    else:
        new_w, new_h = int(resize_size * width / height), resize_size
    arr = decoder.decode(data, *dct_size(width, height, min(width / new_w, height / new_h)), fast)
    t1 = time.perf_counter()
    full = channels_last_empty((3, new_h, new_w))
    resize_into(torch.from_numpy(arr).permute(2, 0, 1), full)
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    out.copy_(full[:, top : top + size, left : left + size])
    if times is not None:
        times[0] += t1 - t0
        times[1] += time.perf_counter() - t1
    sx, sy = new_w / width, new_h / height
    return left / sx, top / sy, (left + size) / sx, (top + size) / sy
