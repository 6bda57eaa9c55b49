"""A fast exact path of :func:`~shardkit.targets.geometry.warp_masks` for axis-aligned maps (crops, resizes, flips).

The loader's crops (``train``, ``eval``, ``detect``, ``letterbox``: a box resized to the output, then maybe a flip)
are axis-aligned: output column ``j`` reads one source column whatever the row, and row ``i`` one source row.
Nearest sampling is then two index selections, ``O(H' + W')`` index arithmetic instead of ``O(H' W')``. The
indices come from :func:`~shardkit.targets.geometry.warp_masks`'s own sampling grid
(:func:`~shardkit.targets.geometry.sampling_grid`) and its own nearest ``grid_sample``, run on one row and one
column: the pixels are exactly ``warp_masks``'s (255 where no source pixel maps). Rotations, shears and affines
keep :func:`~shardkit.targets.geometry.warp_masks`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.format.fields import IGNORE
from shardkit.targets.geometry import Size, sampling_grid


def axis_aligned(inv: Tensor) -> bool:
    """Whether the inverse map(s) ``[..., 3, 3]`` neither rotate nor shear (a host read: CPU maps only)."""
    return bool((inv[..., 0, 1] == 0).all() and (inv[..., 1, 0] == 0).all())


def _nearest(grid: Tensor, n_in: int, along_x: bool) -> tuple[Tensor, Tensor]:
    """The source index ``[K]`` each point of ``grid`` ``[1, *, *, 2]`` takes along one axis (``warp_masks``'s
    nearest ``grid_sample`` on a one-row or one-column canvas of indices + 1), and whether it is inside."""
    values = torch.arange(1, n_in + 1, dtype=torch.float32, device=grid.device)
    canvas = values.reshape(1, 1, 1, n_in) if along_x else values.reshape(1, 1, n_in, 1)
    pts = grid.reshape(1, 1, -1, 2)
    # the other coordinate is 0: the middle of a canvas one pixel wide (pixel 0)
    pts = (
        torch.stack([pts[..., 0], torch.zeros_like(pts[..., 1])], -1)
        if along_x
        else torch.stack([torch.zeros_like(pts[..., 0]), pts[..., 1]], -1)
    )
    got = F.grid_sample(canvas, pts, mode="nearest", padding_mode="zeros", align_corners=False).reshape(-1)
    inside = got > 0
    return (got.long() - 1).clamp_(min=0), inside


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
    # warp_masks's grid, one output row and one output column of it: with no rotation or shear, x depends on
    # the output column only and y on the output row only (the other term is an exact 0)
    ix, okx = _nearest(sampling_grid(m[None], (h, w), (1, ow)), w, along_x=True)
    iy, oky = _nearest(sampling_grid(m[None], (h, w), (oh, 1)), h, along_x=False)
    rows = mask.index_select(0, iy)  # [oh, w], contiguous
    out = torch.gather(rows, 1, ix[None, :].expand(oh, ow))  # (index_select along dim 1 is ~4x slower)
    if not bool(oky.all()):  # rows and columns no source pixel maps to (padding windows, crops past the edge)
        out[~oky] = fill
    if not bool(okx.all()):
        out[:, ~okx] = fill
    return out


__all__ = ["axis_aligned", "warp_mask_axis_aligned"]
