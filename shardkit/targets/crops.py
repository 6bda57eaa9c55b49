"""The inverse maps of the loader's crops: a box in stored pixels resized to the output, then a flip.

The worker cuts each sample's crop box (``(x0, y0, x1, y1)`` in stored-image pixels, edges at
integers; it may reach past the image, where the ``detect`` and ``letterbox`` presets pad), resizes it
to the ``out_h x out_w`` output (torch's ``interpolate``: output pixel centre ``o`` samples the box at
``x0 + (o + 0.5) * (x1 - x0) / out_w``, the half-pixel convention of ``F.resized_crop``) and mirrors
the result where the sample is flipped. :func:`crop_maps` is that step as one inverse map per sample
(``[N, 3, 3]``, output pixel centre -> stored pixel centre, centres at integers), the same matrices
as :func:`shardkit.augment.affine.resized_crop_matrix` times
:func:`shardkit.augment.affine.flip_matrix` (written here in closed form: this layer sits below
:mod:`shardkit.augment`), so :func:`shardkit.targets.geometry.move` moves a batch's boxes, keypoints
and masks exactly as the pixels moved.

:func:`warp_crop_mask` is :func:`shardkit.targets.geometry.warp_masks` for one such map (axis-aligned: no
rotation or shear), the same arithmetic per axis (each output column's source column, each output row's source
row, in float32, nearest with ties up), so it gives the same mask bit for bit while indexing ``S + S`` positions
instead of ``S * S`` (a mask per sample of another size cannot be batched); on CPU (the workers), else it is
``warp_masks`` itself.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.format.fields import IGNORE
from shardkit.targets.geometry import TIE, warp_masks


def crop_maps(boxes: np.ndarray, flips: np.ndarray, out_size: "tuple[int, int] | int") -> Tensor:
    """Inverse maps ``[N, 3, 3]`` (float64) of crop boxes resized to ``out_size``, then mirrored where ``flips``.

    Args:
        boxes: ``[N, 4]`` ``(x0, y0, x1, y1)`` in stored pixels (edges at integers), the boxes the
            pixels really used.
        flips: ``[N]`` bool: the output is mirrored left-right after the resize.
        out_size: ``(height, width)`` of the output (an int: square).
    """
    oh, ow = (out_size, out_size) if isinstance(out_size, int) else out_size
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    f = np.asarray(flips, bool).reshape(-1)
    sx = (b[:, 2] - b[:, 0]) / ow
    sy = (b[:, 3] - b[:, 1]) / oh
    # resized crop: x_in = x0 + (x_out + 0.5) * sx - 0.5; the flip first sends x_out to (ow - 1) - x_out
    tx = b[:, 0] + 0.5 * sx - 0.5
    a = np.where(f, -sx, sx)
    c = np.where(f, tx + (ow - 1) * sx, tx)
    n = len(b)
    m = np.zeros((n, 3, 3), np.float64)
    m[:, 0, 0], m[:, 0, 2] = a, c
    m[:, 1, 1], m[:, 1, 2] = sy, b[:, 1] + 0.5 * sy - 0.5
    m[:, 2, 2] = 1.0
    return torch.from_numpy(m)


@functools.lru_cache(maxsize=64)
def _positions(n: int) -> Tensor:
    """``0 .. n-1`` as float32 ``[1, 1, n]`` (output pixel indices; cached: built once per size)."""
    return torch.arange(n, dtype=torch.float32).reshape(1, 1, n)


@functools.lru_cache(maxsize=64)
def _canvas(n: int, along_x: bool) -> Tensor:
    """``1 .. n`` as a one-row (``along_x``) or one-column float32 canvas (cached)."""
    values = torch.arange(1, n + 1, dtype=torch.float32)
    return values.reshape(1, 1, 1, n) if along_x else values.reshape(1, 1, n, 1)


_ZERO = torch.zeros((1, 1, 1))


def _nearest(m: Tensor, n_in: int, n_out: int, along_x: bool) -> tuple[Tensor, Tensor]:
    """The source index ``[n_out]`` each output column (``along_x``) or row takes under the axis-aligned float32
    map ``m`` ``[3, 3]``, and whether it is inside: one plane of :func:`~shardkit.targets.geometry.sampling_grid`
    (the same float32 operations in the same order, on the one output row or column that matters) sampled
    nearest on a canvas of indices + 1 (``grid_sample``'s zero padding marks the outside), as ``warp_masks`` does."""
    r = 0 if along_x else 1
    k = 2.0 / n_in
    scale, shear, shift = (m[r, c].reshape(1, 1, 1) * k for c in (r, 1 - r, 2))
    pos = _positions(n_out)
    # sampling_grid: g = addcmul(shift + (y-coefficient) * ys + c / n - 1, (x-coefficient), xs), rounded step by step
    if along_x:
        g = torch.addcmul(shift + shear * _ZERO + (2.0 * TIE + 1.0) / n_in - 1.0, scale, pos)
    else:
        g = torch.addcmul(shift + scale * pos + (2.0 * TIE + 1.0) / n_in - 1.0, shear, _ZERO)
    pts = torch.zeros((1, 1, n_out, 2))
    pts[0, 0, :, r] = g.reshape(-1)
    got = F.grid_sample(_canvas(n_in, along_x), pts, mode="nearest", padding_mode="zeros", align_corners=False)
    got = got.reshape(-1)
    return (got.long() - 1).clamp_(min=0), got > 0


def warp_crop_mask(mask: Tensor, inv: Tensor, out_size: "tuple[int, int]", fill: int = IGNORE) -> Tensor:
    """One mask ``[H, W]`` (uint8) resampled through one axis-aligned inverse map ``inv`` ``[3, 3]`` to ``out_size``,
    nearest, ``fill`` outside: exactly :func:`~shardkit.targets.geometry.warp_masks` of it (tested equal), from
    two index selections (its sampling grid's one output row and one output column: with no rotation or shear,
    x depends on the output column only and y on the output row only).

    Raises:
        ValueError: ``inv`` rotates or shears (then call :func:`~shardkit.targets.geometry.warp_masks`).
    """
    m = inv.to(torch.float32)
    if float(m[0, 1]) != 0.0 or float(m[1, 0]) != 0.0:
        raise ValueError("warp_crop_mask takes axis-aligned maps only; use shardkit.targets.geometry.warp_masks")
    if mask.device.type != "cpu":
        return warp_masks(mask[None], inv[None].to(mask.device), out_size, fill)[0]
    h, w = mask.shape
    oh, ow = out_size
    ix, in_x = _nearest(m, w, ow, along_x=True)
    iy, in_y = _nearest(m, h, oh, along_x=False)
    # the source with one more row and column of ``fill``, where the outside points go: two numpy takes (~10x
    # faster than torch's advanced indexing for uint8 rows and columns; a boolean fill after them cost 3x the takes)
    src = np.empty((h + 1, w + 1), mask.numpy().dtype)
    src[:h, :w] = mask.numpy()
    src[h, :] = fill
    src[:, w] = fill
    rows = np.where(in_y.numpy(), iy.numpy(), h)
    cols = np.where(in_x.numpy(), ix.numpy(), w)
    return torch.from_numpy(src.take(rows, 0).take(cols, 1))


__all__ = ["crop_maps", "warp_crop_mask"]
