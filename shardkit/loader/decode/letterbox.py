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
:func:`letterboxed_crop` decodes at the DCT scale that suffices and resizes only the decoded region the window
shows, rounded to whole decoded pixels, into the output pixels the scaled image covers (at most ``size x size``:
bounded memory); it returns the box that map really is (under a decoded pixel from the planned one over the
window), which the targets follow, so output pixel edge ``u`` shows stored point ``x0 + u * (x1 - x0) / size``
of the returned box exactly.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

import numpy as np

from shardkit.loader.decode.resample import channels_last_empty, dct_size, decoded_scale, resize_into

if TYPE_CHECKING:
    import torch

    from shardkit.loader.decode.decoders import JpegDecoder

#: uniforms per sample the ``detect`` preset consumes: scale, left, top, flip
DETECT_UNIFORMS = 4


def scaled_sizes(widths: np.ndarray, heights: np.ndarray, longer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(W', H')``: the images scaled so that their longer side is ``longer``, rounded to whole pixels (>= 1)."""
    w, h = np.asarray(widths, np.float64), np.asarray(heights, np.float64)
    longer, m = np.asarray(longer, np.float64), np.maximum(w, h)
    # multiply first: side * longer / m is one correctly rounded division, so an exact half (90 * 119 / 340 = 31.5)
    # stays a half and rounds as Python's round() does; side * (longer / m) can land just below it
    return np.maximum(1, np.round(w * longer / m)), np.maximum(1, np.round(h * longer / m))


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

    Only the window's part of the image is resized: the output pixels the scaled image covers (whole pixels,
    as the box says) show the decoded region those pixels see, rounded to whole decoded pixels, resized straight
    into place through one window-sized buffer (at scale 1.5 a whole-image resize would compute more than twice the pixels kept). The rounding
    moves the scale by under a decoded pixel over the window, so the box returned is the map really used (the
    targets follow it), as :func:`~shardkit.loader.decode.worker.resized_crop` returns its rounded box.

    Returns:
        The box in stored pixels the window's pixels follow exactly.
    """
    import torch

    t0 = time.perf_counter()
    bw, bh = box[2] - box[0], box[3] - box[1]
    fx, fy = size / bw, size / bh
    sw, sh = max(1, int(round(width * fx))), max(1, int(round(height * fy)))
    left, top = int(round(box[0] * fx)), int(round(box[1] * fy))
    # the output pixels the scaled image covers: [ox0, ox1) x [oy0, oy1), whole pixels
    ox0, oy0 = max(0, -left), max(0, -top)
    ox1, oy1 = min(size, sw - left), min(size, sh - top)
    arr = decoder.decode(data, *dct_size(width, height, min(width / sw, height / sh)), fast)  # always: a bad
    t1 = time.perf_counter()  # image is skipped whether or not the window shows it
    hwc = out.permute(1, 2, 0)  # the row's own bytes, [H, W, 3]: zeroing them is a memset
    if ox1 <= ox0 or oy1 <= oy0:
        hwc.zero_()
        return box
    ax, ay = decoded_scale(width, height, arr.shape[1], arr.shape[0])  # decoded pixels per stored pixel
    a, b = _source_span(box[0], bw / size, ox0, ox1, ax, arr.shape[1])
    c, d = _source_span(box[1], bh / size, oy0, oy1, ay, arr.shape[0])
    # torch's kernel writes a whole tensor (a strided window of ``out`` would be written as if it were dense)
    window = channels_last_empty((3, oy1 - oy0, ox1 - ox0))
    resize_into(torch.from_numpy(arr).permute(2, 0, 1)[:, c:d, a:b], window)
    y0, y1, x0, x1 = oy0, oy1, ox0, ox1
    if flip:  # the mirrored window lands at the mirrored columns
        x0, x1, window = size - x1, size - x0, window.flip(-1)
    for pad in (hwc[:y0], hwc[y1:], hwc[y0:y1, :x0], hwc[y0:y1, x1:]):  # only the padding is zeroed
        if pad.numel():
            pad.zero_()
    out[:, y0:y1, x0:x1] = window
    if times is not None:
        times[0] += t1 - t0
        times[1] += time.perf_counter() - t1
    # the map used: decoded [a, b) -> output [ox0, ox1); in stored pixels, extended to the whole output
    kx, ky = (b - a) / ax / (ox1 - ox0), (d - c) / ay / (oy1 - oy0)
    bx0, by0 = a / ax - ox0 * kx, c / ay - oy0 * ky
    return bx0, by0, bx0 + size * kx, by0 + size * ky


def _source_span(start: float, per_out: float, o0: int, o1: int, per_stored: float, n: int) -> tuple[int, int]:
    """The decoded pixels ``[a, b)`` (whole, inside ``[0, n)``, at least one) that output pixels ``[o0, o1)`` see,
    where output edge ``u`` is stored point ``start + u * per_out`` and a stored pixel is ``per_stored``
    decoded pixels."""
    a = min(n - 1, max(0, int(round((start + o0 * per_out) * per_stored))))
    b = min(n, max(a + 1, int(round((start + o1 * per_out) * per_stored))))
    return a, b


__all__ = ["DETECT_UNIFORMS", "detect_boxes", "letterbox_boxes", "letterboxed_crop", "scaled_sizes", "window_boxes"]
