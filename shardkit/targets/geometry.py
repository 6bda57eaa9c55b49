"""Move boxes, keypoints and masks with the pixels: the one geometry rule of every target.

Every geometric step shardkit applies (the worker's crop + resize + flip, the ``detect`` preset's
scale + crop + letterbox, :class:`~shardkit.augment.GpuAugment`'s flips, rotations, affines and
crops) is, per sample, an **inverse map** ``inv`` ``[N, 3, 3]``: it sends an output pixel centre to
the input point the pixel samples, in pixel coordinates with pixel centres at integers (the
convention of :mod:`shardkit.augment.affine`, whose matrices are exactly these). A target moves
by the same map, so a crop can never move the pixels and forget the boxes:

* boxes and keypoints are in pixel-*edge* coordinates (pixel ``i`` spans ``[i, i + 1]``): a point
  ``e`` is the centre coordinate ``e - 0.5``, mapped forward (the inverse of ``inv``), plus ``0.5``;
  a box becomes the enclosing box of its four moved corners (:func:`move_boxes`);
* a mask is resampled with the image's own map, nearest: output pixel ``(i, j)`` takes the source
  pixel nearest ``inv @ (j, i, 1)`` (ties round up), :data:`~shardkit.format.fields.IGNORE` where
  that point lies outside the source (:func:`warp_masks`); an instance map (object row per pixel)
  likewise, -1 outside, its rows then relabelled to the kept objects' new rows
  (:mod:`shardkit.targets.instances`);
* boxes are clipped to the output and dropped when less than ``min_visible`` of their moved area
  remains (:func:`clip_boxes`); a mirroring map (negative determinant) swaps the keypoints of each
  flip pair (:func:`swap_pairs`); :func:`move` does all of it for a padded batch (:class:`Targets`)
  and keeps each sample's surviving objects first, in their order.

Everything is elementwise torch on the maps' device (no matrix products, so the global matmul
precision cannot shift a box; no host synchronisation, so it runs inside a CUDA stream's queue)
and gives the same numbers on CPU tensors. The maps must be affine (last row ``0 0 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.format.fields import IGNORE, Objects
from shardkit.targets.instances import NO_OBJECT, kept_rows, relabel

Size = tuple[int, int]  #: ``(height, width)``

#: the default ``min_visible`` of every geometric step (the loader's crops, ``GpuAugment``): a box keeps at
#: least this share of its moved area in the output, or is dropped (counted). Ultralytics' YOLO pipelines keep
#: boxes with more than 10 % of their area after augmentation (``box_candidates(area_thr=0.1)``); a higher bar
#: leaves more object pixels without a box (taught as background). :func:`move` itself defaults to 0.
MIN_VISIBLE = 0.1


def forward(inv: Tensor) -> Tensor:
    """The forward maps ``[N, 2, 3]`` (input point -> output point) of affine inverse maps ``[N, 3, 3]``.

    Closed form (no ``linalg`` call: no host sync for its error check on CUDA, no matmul precision).
    """
    a, b, c = inv[:, 0, 0], inv[:, 0, 1], inv[:, 0, 2]
    d, e, f = inv[:, 1, 0], inv[:, 1, 1], inv[:, 1, 2]
    det = a * e - b * d
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return torch.stack(
        [torch.stack([ia, ib, -(ia * c + ib * f)], 1), torch.stack([id_, ie, -(id_ * c + ie * f)], 1)], 1
    )


def move_points(points: Tensor, inv: Tensor) -> Tensor:
    """Points ``[N, ..., 2+]`` (x, y first; edge coordinates) moved by ``inv`` ``[N, 3, 3]``; other columns kept."""
    fw = forward(inv.to(points.dtype))
    shape = (fw.shape[0],) + (1,) * (points.dim() - 2)
    x, y = points[..., 0] - 0.5, points[..., 1] - 0.5
    row = [fw[:, r, k].reshape(shape) for r in range(2) for k in range(3)]
    nx = row[0] * x + row[1] * y + row[2] + 0.5
    ny = row[3] * x + row[4] * y + row[5] + 0.5
    return torch.cat([nx[..., None], ny[..., None], points[..., 2:]], dim=-1)


def move_boxes(boxes: Tensor, inv: Tensor) -> Tensor:
    """Boxes ``[N, M, 4]`` (x0, y0, x1, y1) moved by ``inv``: the enclosing box of the four moved corners."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    corners = torch.stack(
        [torch.stack([x0, y0], -1), torch.stack([x1, y0], -1), torch.stack([x0, y1], -1), torch.stack([x1, y1], -1)],
        dim=-2,
    )  # [N, M, 4, 2]
    moved = move_points(corners, inv)
    lo, hi = moved.amin(dim=-2), moved.amax(dim=-2)
    return torch.cat([lo, hi], dim=-1)


def clip_boxes(boxes: Tensor, out_size: Size, min_visible: float) -> tuple[Tensor, Tensor]:
    """Boxes clipped to the ``out_size`` image, and which to keep ``[N, M]``: those with a positive
    clipped area of at least ``min_visible`` of their unclipped area."""
    h, w = out_size
    x0, y0, x1, y1 = boxes.unbind(-1)
    cx0, cx1 = x0.clamp(0, w), x1.clamp(0, w)
    cy0, cy1 = y0.clamp(0, h), y1.clamp(0, h)
    area = (x1 - x0) * (y1 - y0)
    visible = (cx1 - cx0) * (cy1 - cy0)
    keep = (cx1 > cx0) & (cy1 > cy0) & (visible >= min_visible * area)
    return torch.stack([cx0, cy0, cx1, cy1], dim=-1), keep


def mirrored(inv: Tensor) -> Tensor:
    """``[N]`` bool: the maps that mirror the image (negative determinant: left and right swap)."""
    return inv[:, 0, 0] * inv[:, 1, 1] - inv[:, 0, 1] * inv[:, 1, 0] < 0


def swap_pairs(keypoints: Tensor, swap: Tensor, flip_pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Keypoints ``[N, M, K, 3]`` with each flip pair's two points exchanged in the samples where ``swap``."""
    if not flip_pairs or keypoints.shape[2] == 0:
        return keypoints
    order = list(range(keypoints.shape[2]))
    for i, j in flip_pairs:
        order[i], order[j] = j, i
    # slices, not a list index: a Python list as an index is a host-to-device copy (a sync on CUDA)
    swapped = torch.cat([keypoints[:, :, k : k + 1] for k in order], dim=2)
    return torch.where(swap.reshape(-1, 1, 1, 1), swapped, keypoints)


#: source coordinates are nudged by this (pixels) before ``grid_sample`` rounds them half to even, so that
#: exact ties (a 2x reduction) round up; more than float32's error in normalised coordinates up to ~8000 px
TIE = 2.0**-10


def sampling_grid(inv: Tensor, size: Size, out_size: Size) -> Tensor:
    """``grid_sample`` grid ``[N, oh, ow, 2]`` (``align_corners=False``) of the points ``inv @ (j, i, 1)``
    on a canvas of ``size``, nudged by :data:`TIE` (nearest sampling then rounds ties up)."""
    h, w = size
    oh, ow = out_size
    m = inv.to(torch.float32)  # the same arithmetic on every device
    dev = m.device
    ys = torch.arange(oh, device=dev, dtype=m.dtype).reshape(1, oh, 1)
    xs = torch.arange(ow, device=dev, dtype=m.dtype).reshape(1, 1, ow)
    # pixel x -> normalised (2x + 1) / w - 1, folded into the map's coefficients: one broadcast pass per plane
    row = [m[:, r, k].reshape(-1, 1, 1) * (2.0 / (w, h)[r]) for r in range(2) for k in range(3)]
    gx = torch.addcmul(row[2] + row[1] * ys + (2.0 * TIE + 1.0) / w - 1.0, row[0], xs)
    gy = torch.addcmul(row[5] + row[4] * ys + (2.0 * TIE + 1.0) / h - 1.0, row[3], xs)
    return torch.stack([gx, gy], dim=-1)


def outside(inv: Tensor, size: Size, out_size: Size) -> Tensor:
    """bool ``[N, *out_size]``: the output pixels whose nearest source pixel under ``inv`` lies outside
    a canvas of ``size`` (where an image resampled through ``inv`` shows its fill)."""
    grid = sampling_grid(inv, size, out_size)
    ones = torch.ones((1, 1, *size), device=grid.device).expand(grid.shape[0], 1, *size)
    return F.grid_sample(ones, grid, mode="nearest", padding_mode="zeros", align_corners=False)[:, 0] == 0


def warp_masks(masks: Tensor, inv: Tensor, out_size: Size, fill: int = IGNORE) -> Tensor:
    """Masks ``[N, H, W]`` resampled through ``inv`` to ``[N, *out_size]``, nearest; ``fill`` outside.

    Output pixel ``(i, j)`` takes the source pixel nearest ``inv @ (j, i, 1)`` (ties rounded up:
    ``floor(x + 0.5)``), ``fill`` where that pixel lies outside the source. ``inv`` is ``[N, 3, 3]``
    or ``[1, 3, 3]`` (one map for the whole batch). One ``grid_sample`` (nearest) of the values + 1,
    so that its zero padding marks the outside. The dtype is kept: uint8 class masks (fill
    :data:`~shardkit.format.fields.IGNORE`) and int16 instance maps (values >= -1, fill -1: a source -1
    and the outside both give -1) go through the same arithmetic, exact in float32."""
    n, h, w = masks.shape
    grid = sampling_grid(inv.expand(n, 3, 3), (h, w), out_size)
    src = masks.to(torch.float32).add_(1.0)[:, None]
    out = F.grid_sample(src, grid, mode="nearest", padding_mode="zeros", align_corners=False)[:, 0].sub_(1.0)
    return out.masked_fill_(out < 0, float(fill)).to(masks.dtype)


@dataclass(frozen=True, eq=False)
class Targets:
    """A batch's objects, padded to ``M`` per sample, and its masks.

    Attributes:
        boxes: float32 ``[N, M, 4]`` (x0, y0, x1, y1), pixel edges; rows beyond a sample's count are 0.
        labels: int64 ``[N, M]`` class indices; -1 beyond a sample's count.
        count: int64 ``[N]`` objects per sample (its first ``count`` rows).
        crowd: bool ``[N, M]`` (COCO crowd regions).
        keypoints: float32 ``[N, M, K, 3]`` (x, y, visibility), or ``None``.
        mask: uint8 ``[N, H, W]`` class per pixel (:data:`~shardkit.format.fields.IGNORE`: none), or ``None``.
        instances: int16 ``[N, H, W]`` object row per pixel (its row in ``boxes``; -1: none), or ``None``.
    """

    boxes: Tensor
    labels: Tensor
    count: Tensor
    crowd: Tensor
    keypoints: Optional[Tensor] = None
    mask: Optional[Tensor] = None
    instances: Optional[Tensor] = None

    def to(self, device: "torch.device | str", non_blocking: bool = False) -> "Targets":
        """The same targets on ``device``."""

        def mv(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Targets(
            mv(self.boxes),
            mv(self.labels),
            mv(self.count),
            mv(self.crowd),
            None if self.keypoints is None else mv(self.keypoints),
            None if self.mask is None else mv(self.mask),
            None if self.instances is None else mv(self.instances),
        )

    def take(self, rows: Tensor) -> "Targets":
        """The samples at ``rows`` (indices into the batch), in order."""
        return Targets(
            self.boxes[rows],
            self.labels[rows],
            self.count[rows],
            self.crowd[rows],
            None if self.keypoints is None else self.keypoints[rows],
            None if self.mask is None else self.mask[rows],
            None if self.instances is None else self.instances[rows],
        )


def pad_objects(objects: Sequence[Objects], num_keypoints: int = 0, width: Optional[int] = None) -> Targets:
    """Per-sample :class:`~shardkit.format.fields.Objects` as one padded :class:`Targets` (no mask).

    ``width``: the ``M`` to pad to (default: the most objects any sample has).
    """
    n = len(objects)
    counts = np.fromiter((len(o) for o in objects), np.int64, n)
    m = int(counts.max(initial=0)) if width is None else width
    boxes = np.zeros((n, m, 4), np.float32)
    labels = np.full((n, m), -1, np.int64)
    crowd = np.zeros((n, m), bool)
    kp = np.zeros((n, m, num_keypoints, 3), np.float32) if num_keypoints else None
    for i, o in enumerate(objects):
        c = len(o)
        boxes[i, :c], labels[i, :c], crowd[i, :c] = o.boxes, o.labels, o.iscrowd
        if kp is not None and o.keypoints is not None:
            kp[i, :c] = o.keypoints
    return Targets(
        torch.from_numpy(boxes),
        torch.from_numpy(labels),
        torch.from_numpy(counts),
        torch.from_numpy(crowd),
        None if kp is None else torch.from_numpy(kp),
    )


def compact(targets: Targets, keep: Tensor) -> Targets:
    """Each sample's kept objects first (stable), the rest padding (boxes 0, labels -1, keypoints 0); an
    instance map's rows relabelled to match (:func:`~shardkit.targets.instances.kept_rows`: -1 for a dropped
    object's pixels)."""
    m = keep.shape[1]
    # a stable partition without a host sync: sort by (dropped, position)
    pos = torch.arange(m, device=keep.device).expand_as(keep)
    order = torch.argsort((~keep).long() * m + pos, dim=1)
    live = torch.gather(keep, 1, order)
    boxes = torch.gather(targets.boxes, 1, order[..., None].expand(-1, -1, 4)) * live[..., None]
    labels = torch.where(live, torch.gather(targets.labels, 1, order), torch.full_like(targets.labels, -1))
    crowd = torch.gather(targets.crowd, 1, order) & live
    kp = targets.keypoints
    if kp is not None:
        k = kp.shape[2]
        kp = torch.gather(kp, 1, order[..., None, None].expand(-1, -1, k, 3)) * live[..., None, None]
    inst = targets.instances
    if inst is not None:
        inst = relabel(inst, kept_rows(keep))
    return replace(targets, boxes=boxes, labels=labels, count=live.sum(1), crowd=crowd, keypoints=kp, instances=inst)


def move(
    targets: Targets,
    inv: Tensor,
    out_size: Size,
    *,
    min_visible: float = 0.0,
    flip_pairs: Sequence[tuple[int, int]] = (),
) -> tuple[Targets, Tensor]:
    """The targets after the geometric step ``inv`` (``[N, 3, 3]`` inverse maps) to ``out_size``.

    Boxes move (:func:`move_boxes`), are clipped and dropped below ``min_visible``
    (:func:`clip_boxes`); keypoints move with their boxes, swap their flip pairs under a mirroring
    map, and become not labelled (visibility 0) where they leave the image; a mask and an instance
    map (same size as the step's input) are warped nearest (:func:`warp_masks`), the instance map's
    rows then follow the kept boxes (:func:`compact`). Padding rows stay padding.

    Returns:
        ``(targets, dropped)``: ``dropped`` int64 ``[N]`` counts the objects each sample lost.
    """
    moved, keep = moved_rows(targets, inv, out_size, min_visible=min_visible, flip_pairs=flip_pairs)
    out = compact(moved, keep)
    return out, (targets.labels >= 0).sum(1) - out.count


def moved_rows(
    targets: Targets,
    inv: Tensor,
    out_size: Size,
    *,
    min_visible: float = 0.0,
    flip_pairs: Sequence[tuple[int, int]] = (),
) -> tuple[Targets, Tensor]:
    """:func:`move` before its :func:`compact`: every row moved in place, and which to keep (bool ``[N, M]``).

    For a caller that composes steps or warps the pixel targets its own way, then compacts."""
    live = targets.labels >= 0
    boxes, keep = clip_boxes(move_boxes(targets.boxes, inv), out_size, min_visible)
    keep = keep & live
    kp = targets.keypoints
    if kp is not None:
        kp = swap_pairs(move_points(kp, inv), mirrored(inv), flip_pairs)
        h, w = out_size
        x, y = kp[..., 0], kp[..., 1]
        out = (x < 0) | (x > w) | (y < 0) | (y > h)
        kp = torch.cat([kp[..., :2], torch.where(out, torch.zeros_like(kp[..., 2]), kp[..., 2])[..., None]], -1)
    mask = None if targets.mask is None else warp_masks(targets.mask, inv, out_size)
    inst = None if targets.instances is None else warp_masks(targets.instances, inv, out_size, NO_OBJECT)
    return replace(targets, boxes=boxes, keypoints=kp, mask=mask, instances=inst), keep


__all__ = [
    "MIN_VISIBLE",
    "Size",
    "TIE",
    "Targets",
    "clip_boxes",
    "compact",
    "forward",
    "mirrored",
    "move",
    "move_boxes",
    "move_points",
    "moved_rows",
    "sampling_grid",
    "outside",
    "pad_objects",
    "swap_pairs",
    "warp_masks",
]
