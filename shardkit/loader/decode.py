"""Decode a sample's JPEG straight to its output crop, at the lowest resolution that suffices.

Crop geometry is computed on the stored image size before decoding:

* train: torchvision's ``RandomResizedCrop.get_params`` (10 attempts, then a
  center crop clamped to the ratio range) and a horizontal flip with p=0.5, drawn
  from a numpy generator seeded by ``(seed, epoch, global id)`` so a sample's
  crop does not depend on the number of ranks or workers;
* eval: torchvision's ``Resize(resize_size)`` + ``CenterCrop(size)`` expressed
  as one box in the original image.

Then the JPEG is decoded with DCT scaling (libjpeg-turbo decodes at 1/2, 1/4,
1/8 scale almost for free) as far down as the crop still has ``size`` pixels,
and the box is resized to ``size`` x ``size`` with an antialiased bilinear
filter (torch's vectorised uint8 kernel: 2-3x faster than PIL's ``resize``),
written straight into the batch (``3 x size x size`` view). Decoders (measured in the README): simplejpeg
(libjpeg-turbo, fastest), PIL with ``draft`` (fallback for anything that is not
a baseline RGB/gray JPEG, and when simplejpeg is not installed), and
``torchvision.io.decode_jpeg`` (no DCT scaling; kept for comparison).
"""

from __future__ import annotations

import io
import math
import time
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    import torch

from .config import ImageConfig, Preset

Box = tuple[float, float, float, float]  #: (left, top, right, bottom) in stored-image pixels
#: eval images more elongated than this are cropped before resizing (bounded memory; borders may differ by a level)
_MAX_EVAL_ASPECT = 4


def sample_rng(seed: int, epoch: int, gid: int) -> np.random.Generator:
    """The generator of one sample's random choices (independent of topology)."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, gid & 0xFFFFFFFF, gid >> 32, 0xC409])


def rrc_params(rng: np.random.Generator, width: int, height: int, scale: tuple[float, float], ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` exactly as torchvision's ``RandomResizedCrop.get_params`` draws them."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = int(rng.integers(0, height - h + 1))
            j = int(rng.integers(0, width - w + 1))
            return i, j, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_box(width: int, height: int, size: int, resize_size: int) -> Box:
    """torchvision ``Resize(resize_size)`` + ``CenterCrop(size)`` as a box in the original image."""
    if width <= height:
        new_w, new_h = resize_size, int(resize_size * height / width)
    else:
        new_w, new_h = int(resize_size * width / height), resize_size
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    sx, sy = new_w / width, new_h / height
    return left / sx, top / sy, (left + size) / sx, (top + size) / sy


class JpegDecoder:
    """Decodes ``data`` to an RGB array of at least ``min_w`` x ``min_h`` (DCT-scaled)."""

    name = "base"

    def header(self, data: bytes) -> tuple[int, int]:
        """``(width, height)`` of the stored image without decoding pixels."""
        with Image.open(io.BytesIO(data)) as im:
            return im.size

    def decode(self, data: bytes, min_w: int, min_h: int) -> np.ndarray:
        raise NotImplementedError


class PilDecoder(JpegDecoder):
    """PIL with ``draft`` (libjpeg DCT scaling); handles every format PIL reads."""

    name = "pil"

    def decode(self, data: bytes, min_w: int, min_h: int) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as im:
            if im.format == "JPEG":
                im.draft("RGB", (min_w, min_h))
            return np.array(im.convert("RGB"))  # writable: torch.from_numpy wants it


class SimplejpegDecoder(JpegDecoder):
    """simplejpeg (libjpeg-turbo) with ``min_width``/``min_height`` DCT scaling; PIL for the rest."""

    name = "simplejpeg"

    def __init__(self) -> None:
        import simplejpeg

        self._sj = simplejpeg
        self._pil = PilDecoder()

    def header(self, data: bytes) -> tuple[int, int]:
        try:
            h, w, _, _ = self._sj.decode_jpeg_header(data)
            return w, h
        except ValueError:
            return self._pil.header(data)

    def decode(self, data: bytes, min_w: int, min_h: int) -> np.ndarray:
        try:
            return self._sj.decode_jpeg(data, colorspace="RGB", min_width=min_w, min_height=min_h, min_factor=1.0)
        except ValueError:  # not a JPEG libjpeg-turbo handles as RGB (CMYK, PNG, damaged...)
            return self._pil.decode(data, min_w, min_h)


class TorchvisionDecoder(JpegDecoder):
    """``torchvision.io.decode_jpeg`` at full resolution (no DCT scaling); PIL for the rest."""

    name = "torchvision"

    def __init__(self) -> None:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        self._torch, self._decode, self._mode = torch, decode_jpeg, ImageReadMode.RGB
        self._pil = PilDecoder()

    def decode(self, data: bytes, min_w: int, min_h: int) -> np.ndarray:
        try:
            t = self._decode(self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8), mode=self._mode)
            return t.permute(1, 2, 0).numpy()
        except RuntimeError:
            return self._pil.decode(data, min_w, min_h)


DECODERS: dict[str, Callable[[], JpegDecoder]] = {
    "simplejpeg": SimplejpegDecoder,
    "pil": PilDecoder,
    "torchvision": TorchvisionDecoder,
}


def make_decoder(name: str = "auto") -> JpegDecoder:
    """The named decoder; ``"auto"`` is simplejpeg if installed, else PIL."""
    if name == "auto":
        try:
            return SimplejpegDecoder()
        except ImportError:
            return PilDecoder()
    try:
        return DECODERS[name]()
    except KeyError:
        raise ValueError(f"invalid decoder {name!r}; choose one of {['auto', *DECODERS]}") from None


class CropDecoder:
    """Turns JPEG bytes into one ``3 x size x size`` uint8 image of the configured preset.

    Args:
        cfg: image options.
        seed: the loader's seed (with ``epoch`` and the sample's global id it seeds the crop).
    """

    def __init__(self, cfg: ImageConfig, seed: int):
        self.cfg, self.seed = cfg, seed
        self.decoder = make_decoder(cfg.decoder)
        self.times = np.zeros(2)  #: cumulative seconds (decode, crop/resize)

    def geometry(self, width: int, height: int, epoch: int, gid: int) -> tuple[Box, bool]:
        """The crop box in the stored image and whether to flip."""
        c = self.cfg
        if c.preset is Preset.EVAL:
            return center_box(width, height, c.size, c.resize_size), False  # type: ignore[arg-type]
        rng = sample_rng(self.seed, epoch, gid)
        top, left, h, w = rrc_params(rng, width, height, c.scale, c.ratio)
        flip = bool(c.flip and rng.random() < 0.5)
        return (float(left), float(top), float(left + w), float(top + h)), flip

    def __call__(self, data: bytes, out: "torch.Tensor", epoch: int, gid: int) -> None:
        """Decode ``data`` into ``out`` (a ``3 x size x size`` uint8 tensor view).

        Raises:
            ValueError: the header declares no pixels or more than ``max_pixels`` (nothing is decoded).
        """
        width, height = self.decoder.header(data)
        c = self.cfg
        if width < 1 or height < 1 or width * height > c.max_pixels:
            raise ValueError(f"image declares {width} x {height} pixels (limit {c.max_pixels} pixels: max_pixels)")
        if c.preset is Preset.EVAL:
            resize_center_crop(self.decoder, data, width, height, c.resize_size, c.size, out, self.times)  # type: ignore[arg-type]
        else:
            box, flip = self.geometry(width, height, epoch, gid)
            resized_crop(self.decoder, data, width, height, box, c.size, flip, out, self.times)

    def decode_full(self, data: bytes) -> np.ndarray:
        """The whole image at stored resolution (HxWx3 uint8)."""
        w, h = self.decoder.header(data)
        return self.decoder.decode(data, w, h)


def _resize(chw: "torch.Tensor", h: int, w: int) -> "torch.Tensor":
    """Antialiased bilinear resize of a uint8 ``3 x H x W`` view (torch's vectorised uint8 kernel)."""
    import torch.nn.functional as F

    if chw.shape[1] == h and chw.shape[2] == w:
        return chw
    return F.interpolate(chw[None], size=(h, w), mode="bilinear", antialias=True, align_corners=False)[0]


def resized_crop(
    decoder: JpegDecoder, data: bytes, width: int, height: int, box: Box, size: int, flip: bool, out: "torch.Tensor", times: Optional[np.ndarray] = None
) -> None:
    """Decode at the smallest DCT scale that keeps ``box`` >= ``size`` px, resize ``box`` to ``size`` into ``out``.

    ``times`` (optional) accumulates seconds spent decoding and resizing.
    """
    import torch

    t0 = time.perf_counter()
    bw, bh = box[2] - box[0], box[3] - box[1]
    reduce = max(1.0, min(bw / size, bh / size))  # how much smaller the decode may be
    arr = decoder.decode(data, max(1, math.ceil(width / reduce)), max(1, math.ceil(height / reduce)))
    t1 = time.perf_counter()
    dh, dw = arr.shape[0], arr.shape[1]
    sx, sy = dw / width, dh / height
    x0, y0 = min(dw - 1, int(round(box[0] * sx))), min(dh - 1, int(round(box[1] * sy)))
    x1, y1 = max(x0 + 1, min(dw, int(round(box[2] * sx)))), max(y0 + 1, min(dh, int(round(box[3] * sy))))
    chw = torch.from_numpy(arr).permute(2, 0, 1)[:, y0:y1, x0:x1]
    res = _resize(chw, size, size)
    out.copy_(res.flip(-1) if flip else res)
    if times is not None:
        times += (t1 - t0, time.perf_counter() - t1)


def resize_center_crop(
    decoder: JpegDecoder, data: bytes, width: int, height: int, resize_size: int, size: int, out: "torch.Tensor", times: Optional[np.ndarray] = None
) -> None:
    """torchvision ``Resize(resize_size)`` + ``CenterCrop(size)``, decoding at a reduced DCT scale when possible."""
    import torch

    if max(width, height) > _MAX_EVAL_ASPECT * min(width, height):
        # A panorama (or a hostile 65000 x 1 header): resizing the whole image first would
        # allocate resize_size^2 x aspect pixels; crop the same box first, then resize it.
        return resized_crop(decoder, data, width, height, center_box(width, height, size, resize_size), size, False, out, times)
    t0 = time.perf_counter()
    if width <= height:
        new_w, new_h = resize_size, int(resize_size * height / width)
    else:
        new_w, new_h = int(resize_size * width / height), resize_size
    arr = decoder.decode(data, new_w, new_h)
    t1 = time.perf_counter()
    res = _resize(torch.from_numpy(arr).permute(2, 0, 1), new_h, new_w)
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    out.copy_(res[:, top : top + size, left : left + size])
    if times is not None:
        times += (t1 - t0, time.perf_counter() - t1)


def apply_hook(hook: Optional[Callable], image: "torch.Tensor", sample: object) -> None:
    """Run the user's per-sample hook on ``image`` (3 x S x S uint8) in place, checking its result."""
    if hook is None:
        return
    res = hook(image, sample)
    if res is image:
        return
    if tuple(res.shape) != tuple(image.shape) or str(res.dtype) != str(image.dtype):
        raise ValueError(f"sample hook returned {res.dtype} {tuple(res.shape)}; it must return uint8 {tuple(image.shape)}")
    image.copy_(res)
