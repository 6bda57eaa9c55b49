"""Instance maps (one object row per pixel) that follow their objects when rows are dropped or reordered.

A batch's ``instances`` (int16 ``[N, H, W]``) gives each pixel the row of its object in that sample's
``boxes`` (``0 .. count - 1``), -1 where no object is. The pixels move with the image like a mask
(:func:`shardkit.targets.geometry.warp_masks`, nearest, -1 outside); when a step drops boxes and
keeps the survivors first (:func:`shardkit.targets.geometry.compact`), the rows change, so every pixel
is relabelled through a per-sample lookup table: :func:`kept_rows` (each old row's new row, -1 when dropped)
and :func:`relabel` (one ``gather`` on the map's device, no host synchronisation). A dropped object's
pixels become -1, as do crowd regions' (not yielded as boxes).

:func:`binary_masks` is the other view of the same map: one binary mask per box (``instances == k``),
torchvision's Mask R-CNN ``"masks"``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: the instance-map value of a pixel of no object
NO_OBJECT = -1
_INT16 = 1 << 16  #: int16 values, the width of an instance map's lookup table
_ZERO = 1 << 15  #: the table column of value 0


def kept_rows(keep: Tensor) -> Tensor:
    """int64 ``[N, M]``: the row each object of ``keep`` (bool ``[N, M]``) has once the kept ones are moved first
    in their order (:func:`~shardkit.targets.geometry.compact`'s stable partition), -1 for a dropped one."""
    return torch.where(keep, keep.long().cumsum(1) - 1, torch.full_like(keep, NO_OBJECT, dtype=torch.long))


def relabel(ids: Tensor, table: Tensor) -> Tensor:
    """Object rows ``ids`` ``[N, ...]`` (-1: none) sent through per-sample tables ``table`` ``[N, M]`` (old row ->
    new row, -1: gone): ``table[n, ids[n, ...]]``, -1 staying -1 (and a row ``>= M``, which names no object,
    becoming -1). Same dtype as ``ids``; no host synchronisation.

    An int16 map (an instance map) goes through one lookup table per sample over every int16 value (64 K entries,
    so no value needs a range check): one flat index, one ``take``; other dtypes (small tables of rows) through
    one ``gather``. The same torch ops on every device (no numpy: nothing is read back to the host).
    """
    n, m = table.shape
    if ids.dtype == torch.int16:
        lut = torch.full((n, _INT16), NO_OBJECT, dtype=torch.int16, device=table.device)
        lut[:, _ZERO : _ZERO + m] = table.to(torch.int16)
        base = torch.arange(n, device=ids.device, dtype=torch.long) * _INT16 + _ZERO
        return lut.reshape(-1).take(ids.long() + base.reshape((n,) + (1,) * (ids.dim() - 1)))
    padded = torch.cat([torch.full((n, 1), NO_OBJECT, dtype=table.dtype, device=table.device), table], 1)
    idx = ids.reshape(n, math.prod(ids.shape[1:])).long() + 1
    idx = torch.where((idx < 0) | (idx > m), torch.zeros_like(idx), idx)
    return torch.gather(padded, 1, idx).reshape(ids.shape).to(ids.dtype)


def binary_masks(instances: Tensor, count: int) -> Tensor:
    """uint8 ``[count, H, W]``: mask ``k`` is 1 where ``instances`` (``[H, W]``) is ``k`` (torchvision's Mask R-CNN
    ``"masks"`` of one sample)."""
    rows = torch.arange(count, device=instances.device, dtype=instances.dtype).reshape(-1, 1, 1)
    return (instances[None] == rows).to(torch.uint8)


def instance_map(masks: Tensor) -> Tensor:
    """int16 ``[H, W]`` from binary masks ``[n, H, W]``: each pixel the row of the *last* mask set there, -1 where
    none is (the inverse of :func:`binary_masks` where masks do not overlap; where they do, the later row wins)."""
    n = masks.shape[0]
    if n == 0:
        return torch.full(masks.shape[1:], NO_OBJECT, dtype=torch.int16, device=masks.device)
    rows = torch.arange(1, n + 1, device=masks.device, dtype=torch.int32).reshape(-1, 1, 1)
    top = torch.where(masks.bool(), rows, torch.zeros_like(rows)).amax(0)
    return (top - 1).to(torch.int16)


__all__ = ["NO_OBJECT", "binary_masks", "instance_map", "kept_rows", "relabel"]
