"""The aspect-preserving presets: ``detect`` (scale jitter, crop or pad, flip) and ``letterbox`` (fit and pad).

Both scale the image so that its longer side is ``s * size`` (``letterbox``: ``s = 1``; ``detect``: ``s``
uniform in ``scale``, default (0.5, 1.5)), rounded to whole pixels ``W' x H'`` like a resize, and cut a
``size x size`` window out of the scaled image: ``detect`` places it uniformly at random, a crop where the
scaled image is larger and padding where it is smaller; ``letterbox`` centres it. Then ``detect`` mirrors
the output with p = 0.5. Window offsets are whole scaled pixels, so the image covers whole output pixels and
padding (0 in the image, 255 in a mask) is exactly the rest.

As everywhere in the loader the geometry is a box in stored pixels (it may reach past the image) and a
flip (:class:`~shardkit.loader.decode.worker.Crops`), computed for a whole batch before any pixel is decoded
from uniforms keyed by ``(seed, epoch, gid)`` (:func:`~shardkit.loader.decode.worker.sample_uniforms`).
:func:`letterboxed_crop` decodes at the DCT scale that suffices, resizes the whole image to ``W' x H'`` (at
most ``max(scale) * size`` on its longer side: bounded memory) and copies the window's image part into
place, so output pixel edge ``u`` shows stored point ``x0 + u * (x1 - x0) / size``: exactly the box.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    import torch

    from shardkit.loader.decode.decoders import JpegDecoder

#: uniforms per sample the ``detect`` preset consumes: scale, left, top, flip
DETECT_UNIFORMS = 4


def scaled_sizes(widths: np.ndarray, heights: np.ndarray, longer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(W', H')``: the images scaled so that their longer side is ``longer``, rounded to whole pixels (>= 1)."""
    w, h = np.asarray(widths, np.float64), np.asarray(heights, np.float64)
    f = np.asarray(longer, np.float64) / np.maximum(w, h)
    return np.maximum(1, np.round(w * f)), np.maximum(1, np.round(h * f))


def window_boxes(
    widths: np.ndarray,
    heights: np.ndarray,
    sw: np.ndarray,
    sh: np.ndarray,
    left: np.ndarray,
    top: np.ndarray,
    size: int,
) -> np.ndarray:
    """``[n, 4]`` boxes in stored pixels of the ``size`` x ``size`` windows at ``(left, top)`` (whole pixels, negative:
    padding) of the images scaled to ``sw`` x ``sh``."""
    fx, fy = sw / np.asarray(widths, np.float64), sh / np.asarray(heights, np.float64)
    return np.stack([left / fx, top / fy, (left + size) / fx, (top + size) / fy], axis=1).reshape(-1, 4)


def detect_boxes(
    widths: np.ndarray, heights: np.ndarray, u: np.ndarray, size: int, scale: tuple[float, float]
) -> np.ndarray:
    """The ``detect`` preset's boxes (``u``: ``[n, >= 3]`` uniforms: scale, left, top)."""
    s = scale[0] + (scale[1] - scale[0]) * u[:, 0]
    sw, sh = scaled_sizes(widths, heights, s * size)
    # one formula for crop (W' > size: left in [0, W' - size]) and pad (W' < size: left in [W' - size, 0])
    left = np.where(sw >= size, np.floor(u[:, 1] * (sw - size + 1)), -np.floor(u[:, 1] * (size - sw + 1)))
    top = np.where(sh >= size, np.floor(u[:, 2] * (sh - size + 1)), -np.floor(u[:, 2] * (size - sh + 1)))
    return window_boxes(widths, heights, sw, sh, left, top, size)


def letterbox_boxes(widths: np.ndarray, heights: np.ndarray, size: int) -> np.ndarray:
    """The ``letterbox`` preset's boxes: the whole image, longer side ``size``, centred."""
    sw, sh = scaled_sizes(widths, heights, np.full(len(np.asarray(widths)), float(size)))
    return window_boxes(widths, heights, sw, sh, -np.floor((size - sw) / 2), -np.floor((size - sh) / 2), size)


def letterboxed_crop(
    decoder: "JpegDecoder",
    data: bytes,
    width: int,
    height: int,
    box: tuple[float, float, float, float],
    size: int,
    flip: bool,
    out: "torch.Tensor",
    times: Optional[list[float]] = None,
    fast: bool = False,
) -> tuple[float, float, float, float]:
    """Decode ``data`` into ``out`` (``3 x size x size`` uint8) as the window ``box`` (:func:`detect_boxes`,
    :func:`letterbox_boxes`) of the image scaled to whole pixels, padding with 0; mirrored where ``flip``.

    Returns:
        ``box`` (the pixels follow it exactly).
    """
    import torch

    from shardkit.loader.decode.worker import _dct_size, _resize_into, channels_last_empty

    t0 = time.perf_counter()
    fx, fy = size / (box[2] - box[0]), size / (box[3] - box[1])
    sw, sh = max(1, int(round(width * fx))), max(1, int(round(height * fy)))
    left, top = int(round(box[0] * fx)), int(round(box[1] * fy))
    arr = decoder.decode(data, *_dct_size(width, height, min(width / sw, height / sh)), fast)
    t1 = time.perf_counter()
    full = channels_last_empty((3, sh, sw))
    _resize_into(torch.from_numpy(arr).permute(2, 0, 1), full)
    # the window's part inside the scaled image, in scaled and in output pixels
    sx0, sy0 = max(0, left), max(0, top)
    sx1, sy1 = min(sw, left + size), min(sh, top + size)
    hwc = out.permute(1, 2, 0)  # the row's own bytes, [H, W, 3]: zeroing them is a memset
    if sx1 <= sx0 or sy1 <= sy0:
        hwc.zero_()
    else:
        y0, y1, x0, x1 = sy0 - top, sy1 - top, sx0 - left, sx1 - left
        window = full[:, sy0:sy1, sx0:sx1]
        if flip:  # the mirrored window lands at the mirrored columns
            x0, x1, window = size - x1, size - x0, window.flip(-1)
        for pad in (hwc[:y0], hwc[y1:], hwc[y0:y1, :x0], hwc[y0:y1, x1:]):  # only the padding is zeroed
            if pad.numel():
                pad.zero_()
        out[:, y0:y1, x0:x1] = window
    if times is not None:
        times[0] += t1 - t0
        times[1] += time.perf_counter() - t1
    return box


__all__ = ["DETECT_UNIFORMS", "detect_boxes", "letterbox_boxes", "letterboxed_crop", "scaled_sizes", "window_boxes"]
