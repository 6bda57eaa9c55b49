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
from torch import Tensor

from shardkit.format.fields import IGNORE
from shardkit.targets.geometry import warp_masks


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


def warp_crop_mask(mask: Tensor, inv: Tensor, out_size: "tuple[int, int]", fill: int = IGNORE) -> Tensor:
    """One mask ``[H, W]`` (uint8) resampled through one axis-aligned inverse map ``inv`` ``[3, 3]`` to ``out_size``,
    nearest, ``fill`` outside: exactly :func:`~shardkit.targets.geometry.warp_masks` of it (tested equal).

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
    xs = torch.arange(ow, dtype=torch.float32)
    ys = torch.arange(oh, dtype=torch.float32)
    sx = torch.floor(m[0, 0] * xs + m[0, 2] + 0.5)  # warp_masks' row[0] * x + row[1] * y + row[2], row[1] = 0
    sy = torch.floor(m[1, 1] * ys + m[1, 2] + 0.5)
    in_x, in_y = (sx >= 0) & (sx <= w - 1), (sy >= 0) & (sy <= h - 1)
    rows, cols = sy.clamp(0, h - 1).long(), sx.clamp(0, w - 1).long()
    # numpy's take: ~10x faster than torch's advanced indexing for uint8 rows and columns
    out = torch.from_numpy(mask.numpy().take(rows.numpy(), 0).take(cols.numpy(), 1))
    out[~in_y] = fill
    out[:, ~in_x] = fill
    return out


__all__ = ["crop_maps", "warp_crop_mask"]
