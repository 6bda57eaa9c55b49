"""The inverse maps of the loader's crops: a box in stored pixels resized to the output, then a flip.

The worker cuts each sample's crop box (``(x0, y0, x1, y1)`` in stored-image pixels, edges at
integers; it may reach past the image, where the ``detect`` and ``letterbox`` presets pad), resizes it
to the ``out_h x out_w`` output (torch's ``interpolate``: output pixel centre ``o`` samples the box at
``x0 + (o + 0.5) * (x1 - x0) / out_w``, the half-pixel convention of ``F.resized_crop``) and mirrors
the result where the sample is flipped. :func:`crop_maps` is that step as one inverse map per sample
(``[N, 3, 3]``, output pixel centre -> stored pixel centre, centres at integers), the same matrices
as :func:`shardkit.augment.geometry.resized_crop_matrix` times
:func:`shardkit.augment.geometry.flip_matrix` (written here in closed form: this layer sits below
:mod:`shardkit.augment`), so :func:`shardkit.targets.geometry.move` moves a batch's boxes, keypoints
and masks exactly as the pixels moved.

:func:`warp_crop_mask` is :func:`shardkit.targets.geometry.warp_masks` for one such map (axis-aligned: no
rotation or shear), the same arithmetic per axis (each output column's source column, each output row's source
row, in float32, nearest with ties up), so it gives the same mask bit for bit while indexing ``S + S`` positions
instead of ``S * S`` (a mask per sample of another size cannot be batched); on CPU (the workers), else it is
``warp_masks`` itself.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.format.fields import IGNORE
from shardkit.targets.geometry import sampling_grid, warp_masks


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
    ix, in_x = _nearest(sampling_grid(m[None], (h, w), (1, ow)), w, along_x=True)
    iy, in_y = _nearest(sampling_grid(m[None], (h, w), (oh, 1)), h, along_x=False)
    # numpy's take: ~10x faster than torch's advanced indexing for uint8 rows and columns
    out = torch.from_numpy(mask.numpy().take(iy.numpy(), 0).take(ix.numpy(), 1))
    out[~in_y] = fill
    out[:, ~in_x] = fill
    return out


__all__ = ["crop_maps", "warp_crop_mask"]
