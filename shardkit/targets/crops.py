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
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


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


__all__ = ["crop_maps"]
