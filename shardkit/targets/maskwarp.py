"""A fast exact path of :func:`~shardkit.targets.geometry.warp_masks` for axis-aligned maps (crops, resizes, flips).

The loader's crops (``train``, ``eval``, ``detect``, ``letterbox``: a box resized to the output, then maybe a flip)
are axis-aligned: output column ``j`` reads one source column whatever the row, and row ``i`` one source row.
Nearest sampling is then two index selections, ``O(H' + W')`` index arithmetic instead of ``O(H' W')``, and
gives exactly :func:`~shardkit.targets.geometry.warp_masks`'s pixels (the same float32 arithmetic per index:
``floor(a * x + c + 0.5)``, 255 where the point lies outside the source). Rotations, shears and affines keep
:func:`~shardkit.targets.geometry.warp_masks`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardkit.format.fields import IGNORE
from shardkit.targets.geometry import Size


def axis_aligned(inv: Tensor) -> bool:
    """Whether the inverse map(s) ``[..., 3, 3]`` neither rotate nor shear (a host read: CPU maps only)."""
    return bool((inv[..., 0, 1] == 0).all() and (inv[..., 1, 0] == 0).all())


def _indices(scale: Tensor, offset: Tensor, n_out: int, n_in: int) -> tuple[Tensor, Tensor]:
    """Source index of each output index (``floor(scale * k + offset + 0.5)``, float32) and whether it is inside."""
    k = torch.arange(n_out, dtype=torch.float32, device=scale.device)
    src = torch.floor(scale * k + offset + 0.5)
    inside = (src >= 0) & (src <= n_in - 1)
    return src.clamp(0, n_in - 1).long(), inside


def warp_mask_axis_aligned(mask: Tensor, inv: Tensor, out_size: Size, fill: int = IGNORE) -> Tensor:
    """One mask ``[H, W]`` (uint8) resampled nearest through an axis-aligned inverse map ``inv`` ``[3, 3]`` to
    ``out_size``: exactly ``warp_masks(mask[None], inv[None], out_size, fill)[0]``, from two index selections.

    Raises:
        ValueError: the map rotates or shears (use :func:`~shardkit.targets.geometry.warp_masks`).
    """
    m = inv.to(torch.float32)
    if not axis_aligned(m):
        raise ValueError("warp_mask_axis_aligned: the map rotates or shears; use shardkit.targets.warp_masks")
    h, w = mask.shape
    oh, ow = out_size
    # warp_masks computes a*x + b*y + c + 0.5 with b == 0: the same float32 sums in the same order
    ix, okx = _indices(m[0, 0], m[0, 2], ow, w)
    iy, oky = _indices(m[1, 1], m[1, 2], oh, h)
    rows = mask.index_select(0, iy)  # [oh, w], contiguous
    out = torch.gather(rows, 1, ix[None, :].expand(oh, ow))  # (index_select along dim 1 is ~4x slower)
    if not bool(oky.all()):  # rows and columns no source pixel maps to (padding windows, crops past the edge)
        out[~oky] = fill
    if not bool(okx.all()):
        out[:, ~okx] = fill
    return out


__all__ = ["axis_aligned", "warp_mask_axis_aligned"]
