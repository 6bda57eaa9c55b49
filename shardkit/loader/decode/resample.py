"""Decoded pixels into batch rows: the DCT scale to decode at, how decoded pixels map to stored ones, and the
antialiased resize into a (channels-last) batch row. Shared by the worker's crops, the multi-crop views and the
detection presets' windows.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from shardkit.private_apis import upsample_bilinear_aa_kernel

if TYPE_CHECKING:
    import torch


def channels_last_empty(shape: tuple[int, ...]) -> "torch.Tensor":
    """An uninitialised uint8 ``[..., 3, H, W]`` tensor whose bytes are laid out ``[..., H, W, 3]``."""
    import torch

    *lead, c, h, w = shape
    t = torch.empty((*lead, h, w, c), dtype=torch.uint8)
    return t.movedim(-1, -3)


def resize_into(chw: "torch.Tensor", out: "torch.Tensor") -> None:
    """Antialiased bilinear resize of a uint8 ``3 x h x w`` view into ``out`` (``3 x H x W``).

    torch's vectorised uint8 kernel writes its result straight into ``out``; it is
    fastest when ``out`` is channels-last (NHWC bytes), its native layout.
    """
    if chw.shape[1:] == out.shape[1:]:
        out.copy_(chw)
        return
    kernel = upsample_bilinear_aa_kernel()
    if kernel is not None:
        kernel(chw[None], tuple(out.shape[1:]), False, None, None, out=out[None])
        return
    import torch
    import torch.nn.functional as F

    x = chw[None].contiguous(memory_format=torch.channels_last)
    out.copy_(F.interpolate(x, size=tuple(out.shape[1:]), mode="bilinear", antialias=True, align_corners=False)[0])


def decoded_scale(width: int, height: int, dw: int, dh: int) -> tuple[float, float]:
    """Decoded pixels per stored pixel ``(x, y)`` of a ``width x height`` image decoded to ``dw x dh``.

    A JPEG decoded at DCT scale ``1/r`` has ``ceil(width / r)`` columns, decoded column ``i`` covering stored
    columns ``[r i, r i + r)`` (the last one partly): the factor is ``1/r``, not ``dw / width`` (which puts a
    stored edge up to ``(r - 1) / r`` of a decoded pixel off when ``width`` is not a multiple of ``r``).
    """
    if (dw, dh) != (width, height):
        for r in (2, 4, 8):
            if (dw, dh) == (-(-width // r), -(-height // r)):
                return 1.0 / r, 1.0 / r
    return dw / width, dh / height


def dct_size(width: int, height: int, reduce: float) -> tuple[int, int]:
    """The smallest decode size to ask for: the image scaled by 1/2, 1/4 or 1/8, as far as ``reduce``
    (how much smaller than the image the result may be) allows, else full size.

    libjpeg-turbo also scales by 3/8, 5/8, 6/8 and 7/8, but those IDCTs have no SIMD code and
    cost more than decoding at full size (at 160 px the train preset decoded 12 % slower
    than at 224 px, because more crops allowed a 6/8 or 7/8 decode)."""
    r = 1
    while r < 8 and 2 * r <= reduce:
        r *= 2
    return max(1, math.ceil(width / r)), max(1, math.ceil(height / r))
