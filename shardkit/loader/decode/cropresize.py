"""Crop and resize a batch of differently sized images in one pass: torch's antialiased bilinear filter as matrices.

For each sample and axis, output pixel ``o`` is a weighted sum of source pixels around
``start + (o + 0.5) * scale``: the triangle filter of torch's
``interpolate(mode="bilinear", antialias=True)`` (support ``max(scale, 1)``, weights
normalised), with taps clamped to ``[lo, hi)``. Written as a dense ``[S, window]`` matrix
per sample and axis, a batch of crops is ``Wy @ image @ Wx^T``: two batched matmuls over a
zero-padded canvas of the samples' windows (the part of each image the filter reads). A
horizontal flip reverses ``Wx``'s rows. Cost: ``2 * S * window`` multiply-adds per source
row, fine on a GPU for images of a few hundred pixels (shards converted at 256-512 px).

The matmuls run in float64: float32 matmuls follow the process-wide precision setting
(``torch.set_float32_matmul_precision("high")``, as Lightning suggests on Ampere and later,
rounds their inputs to TF32 on a GPU, and ``"medium"`` to bfloat16 on a CPU too), which shifts
results by a level or two; float64 is never rounded that way, so the resize is the same
whatever the training script set. (Fast on data-centre GPUs; on consumer GPUs float64 runs
at 1/64 of float32, still above what their JPEG decoders deliver at these sizes.)

Host-to-device copies of the per-batch parameters come from pinned memory with
``non_blocking=True``, so queueing a batch never waits for the device.
"""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch
from torch import Tensor


def axis_params(
    size: int, lengths: np.ndarray, decoded: np.ndarray, b0: np.ndarray, b1: np.ndarray, clamp_box: np.ndarray
) -> np.ndarray:
    """Per-sample resampling parameters of one axis, ``[n, 8]`` float64: start, scale, lo, hi, window start, window
    end, and the output pixels ``[o0, o1)`` the image covers (here all of them; :func:`letterbox_params`: the rest is
    padding, 0).

    Output pixel ``o`` samples the decoded image around ``start + (o + 0.5) * scale``
    with taps clamped to ``[lo, hi)``: with ``clamp_box``, the integer crop the worker
    path cuts (``shardkit.loader.decode.worker.resized_crop``: the box rounded in decoded
    pixels), else the whole image (``resize_center_crop``: the image resized, then the
    box cut from it). The window is the part of the axis the filter reads.

    Args:
        size: output pixels.
        lengths: ``[n]`` stored lengths (the header's; boxes are in these units).
        decoded: ``[n]`` decoded lengths.
        b0, b1: ``[n]`` box start and end in stored pixels.
        clamp_box: ``[n]`` bool, see above.
    """
    s = decoded / lengths
    # the worker's crops take a DCT-scaled axis as 1/r (worker.decoded_scale: ceil(L / r) decoded pixels)
    s = np.where(clamp_box, _decoded_scale(lengths, decoded), s)
    x0 = np.minimum(decoded - 1, np.round(b0 * s))
    x1 = np.maximum(x0 + 1, np.minimum(decoded, np.round(b1 * s)))
    start = np.where(clamp_box, x0, b0 * s)
    scale = np.where(clamp_box, (x1 - x0) / size, (b1 - b0) * s / size)
    lo = np.where(clamp_box, x0, 0.0)
    hi = np.where(clamp_box, x1, decoded)
    return _with_window(size, start, scale, lo, hi, np.zeros_like(start), np.full_like(start, size))


def letterbox_params(size: int, lengths: np.ndarray, decoded: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """:func:`axis_params` rows of the ``detect`` and ``letterbox`` presets' windows (boxes that may reach past the
    image): the output pixels the scaled image covers show the decoded region they see, rounded to whole decoded
    pixels, and the rest is padding, exactly as the worker's
    :func:`~shardkit.loader.decode.letterbox.letterboxed_crop` cuts it (its ``_source_span``, vectorised)."""
    fx, per_out = size / (b1 - b0), (b1 - b0) / size  # output pixels per stored pixel, and back (the worker's floats)
    scaled = np.maximum(1.0, np.round(lengths * fx))
    first = np.round(b0 * fx)
    o0, o1 = np.maximum(0.0, -first), np.minimum(float(size), scaled - first)
    empty = o1 <= o0
    per_stored = _decoded_scale(lengths, decoded)
    a = np.minimum(decoded - 1, np.maximum(0.0, np.round((b0 + o0 * per_out) * per_stored)))
    b = np.minimum(decoded, np.maximum(a + 1, np.round((b0 + o1 * per_out) * per_stored)))
    o0, o1 = np.where(empty, 0.0, o0), np.where(empty, 0.0, o1)
    scale = (b - a) / np.maximum(o1 - o0, 1.0)
    return _with_window(size, a - o0 * scale, scale, a, b, o0, o1)


def _decoded_scale(lengths: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """Decoded pixels per stored pixel along one axis: ``1/r`` for a DCT-scaled decode (``ceil(L / r)`` pixels,
    as :func:`shardkit.loader.decode.worker.decoded_scale`), else the ratio."""
    s = decoded / lengths
    for r in (8, 4, 2):
        s = np.where((decoded != lengths) & (decoded == -(-lengths // r)), 1.0 / r, s)
    return s


def _with_window(
    size: int, start: np.ndarray, scale: np.ndarray, lo: np.ndarray, hi: np.ndarray, o0: np.ndarray, o1: np.ndarray
) -> np.ndarray:
    """The rows ``[start, scale, lo, hi, window start, window end, o0, o1]``: the window is the part of the axis the
    filter reads for output pixels ``[o0, o1)``."""
    support = np.maximum(scale, 1.0)
    w_lo = np.maximum(lo, np.floor(start + (o0 + 0.5) * scale - support + 0.5))
    w_hi = np.minimum(hi, np.floor(start + (np.maximum(o1, o0 + 1) - 0.5) * scale + support + 0.5))
    return np.stack([start, scale, lo, hi, w_lo, np.maximum(w_hi, w_lo + 1), o0, o1], axis=1)


def _weights(p: Tensor, size: int, window: int, flip: Optional[Tensor]) -> Tensor:
    """``[n, size, window]`` float32 rows of torch's antialiased bilinear filter (see :func:`axis_params`);
    ``flip``: positions (int64, on ``p``'s device) whose rows are reversed (a horizontal flip)."""
    start, scale, lo, hi, w_lo, _, o0, o1 = (p[:, k, None, None] for k in range(8))
    o = torch.arange(size, device=p.device, dtype=p.dtype)[None, :, None]
    j = w_lo + torch.arange(window, device=p.device, dtype=p.dtype)[None, None, :]  # absolute source index
    center = start + (o + 0.5) * scale  # [n, size, 1]
    support = scale.clamp(min=1.0)
    w = j + 0.5 - center  # the one [n, size, window] float tensor; the rest is in place
    w.div_(support).abs_().neg_().add_(1).clamp_(min=0)
    w.mul_(
        (j >= torch.maximum(lo, torch.floor(center - support + 0.5)))
        & (j < torch.minimum(hi, torch.floor(center + support + 0.5)))
        & (o >= o0)  # output pixels outside [o0, o1) are padding: no taps, 0
        & (o < o1)
    )
    w.div_(w.sum(-1, keepdim=True).clamp_(min=1e-12))
    if flip is not None and len(flip):
        w[flip] = w[flip].flip(1)
    return w


def to_device(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``array`` as a ``dtype`` tensor on ``device``; to CUDA from pinned memory without blocking the host
    (the pinned block is the caching host allocator's: it is not reused before the copy has run)."""
    t = torch.as_tensor(array, dtype=dtype)
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def padded(images: list[Tensor]) -> Tensor:
    """``[k, C, max H, max W]``: the ``C x H x W`` images zero-padded at the bottom and right, in one list call."""
    try:
        with warnings.catch_warnings():  # strided nested tensors (two ragged dims) warn that they are a prototype
            warnings.simplefilter("ignore", UserWarning)
            return torch.nested.as_nested_tensor(images).to_padded_tensor(0)
    except (RuntimeError, NotImplementedError):  # a device/dtype without nested-tensor support
        return padded_by_copy(images)


def padded_by_copy(images: list[Tensor]) -> Tensor:
    """:func:`padded` with one copy per image."""
    h, w = max(t.shape[1] for t in images), max(t.shape[2] for t in images)
    out = images[0].new_zeros((len(images), images[0].shape[0], h, w))
    for i, t in enumerate(images):
        out[i, :, : t.shape[1], : t.shape[2]] = t
    return out


def canvas_groups(areas: np.ndarray, heights: np.ndarray, widths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Group sample indices (sorted by window area) into canvases of at most ``budget`` pixels (at least one sample each)."""
    order = np.argsort(areas, kind="stable")
    out: list[np.ndarray] = []
    cur: list[int] = []
    mh, mw = 0, 0
    for i in order.tolist():
        h, w = max(mh, int(heights[i])), max(mw, int(widths[i]))
        if cur and (len(cur) + 1) * h * w > budget:
            out.append(np.array(cur, np.int64))
            cur, h, w = [], int(heights[i]), int(widths[i])
        cur.append(i)
        mh, mw = h, w
    if cur:
        out.append(np.array(cur, np.int64))
    return out


def resized_crops(
    images: list[Tensor], px: np.ndarray, py: np.ndarray, flips: np.ndarray, out: Tensor, max_canvas_pixels: int
) -> Tensor:
    """Resample ``images`` (``C x H x W`` uint8 on ``out``'s device) into ``out`` (uint8 ``[n, C, S, S]``, any strides).

    ``px``/``py`` are :func:`axis_params` rows of the samples; ``flips`` ``[n]`` bool mirrors horizontally.
    Samples are grouped (sorted by window size) into canvases of at most ``max_canvas_pixels`` pixels
    (samples x max height x max width), so one large image does not inflate the whole batch's canvas.
    """
    s, device = out.shape[-1], out.device
    exact = torch.float64  # independent of the global float32 matmul precision (module docstring)
    x0, y0 = px[:, 4].astype(np.int64), py[:, 4].astype(np.int64)
    ws, hs = (px[:, 5] - px[:, 4]).astype(np.int64), (py[:, 5] - py[:, 4]).astype(np.int64)
    px_t = to_device(px, torch.float32, device)  # float32: exact for indices below 2**24
    py_t = to_device(py, torch.float32, device)
    for idx in canvas_groups(ws * hs, hs, ws, max_canvas_pixels):
        views = [images[i][:, y0[i] : y0[i] + hs[i], x0[i] : x0[i] + ws[i]] for i in idx.tolist()]
        canvas = padded(views).to(exact)  # [k, C, Hc, Wc]
        sel = to_device(idx, torch.int64, device)
        k, c, hc, wc = canvas.shape
        # positions within the group
        flipped = to_device(np.flatnonzero(np.asarray(flips, bool)[idx]), torch.int64, device)
        wx = _weights(px_t[sel], s, wc, flipped).to(exact)  # [k, S, Wc]
        wy = _weights(py_t[sel], s, hc, None).to(exact)  # [k, S, Hc]
        rows = torch.bmm(canvas.view(k, c * hc, wc), wx.transpose(1, 2))  # [k, C*Hc, S]: every row resized
        del canvas
        res = torch.bmm(wy.repeat_interleave(c, dim=0), rows.view(k * c, hc, s))  # [k*C, S, S]
        out[sel] = res.view(k, c, s, s).round_().clamp_(0, 255).to(torch.uint8)
    return out
