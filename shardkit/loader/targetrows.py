"""A batch's target fields (boxes, box labels and counts, keypoints, mask, instances), moved with the worker's crops.

The worker knows each sample's crop before it decodes a pixel: a box in stored pixels and a flip
(:class:`~shardkit.loader.decode.worker.Crops`). The decode reports the box the pixels really came
from (rounded to the DCT-decoded pixel grid), and :func:`target_rows` turns those boxes and flips into
one inverse map per sample (:func:`shardkit.targets.crops.crop_maps`) and moves the whole batch's
objects with the one geometry rule (:func:`shardkit.targets.geometry.move`: boxes clipped and dropped
below ``min_visible``, keypoints mirrored with their flip pairs swapped) and each sample's mask with
:func:`~shardkit.targets.geometry.warp_masks`'s arithmetic (nearest, 255 where no stored pixel maps; per sample,
:func:`~shardkit.targets.crops.warp_crop_mask`, equal bit for bit for these axis-aligned maps). Masks are
decoded first (:func:`decode_masks`): a mask that cannot be read fails its sample like a bad JPEG. An instance
map (``instances``) is decoded likewise, warped per sample by the same rule (-1 outside) and relabelled in one
:func:`~shardkit.targets.instances.relabel` of the batch: stored object ``k`` -> its row among the non-crowd
objects -> its row after the crop's drops (:func:`~shardkit.targets.instances.kept_rows` twice, composed), -1
for a crowd region's or a dropped box's pixels. With ``box_crowd`` asked for, crowd regions are objects like the
others (moved, dropped below ``min_visible``, their pixels their row), marked in ``box_crowd``.

Which target fields there are, and which of the moved objects' attributes each one is, is the field table's
(:mod:`shardkit.format.fieldtable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np
import torch

from shardkit.format import RawSample, fieldtable
from shardkit.format.fields import Objects
from shardkit.format.masks import decode_instances, decode_mask
from shardkit.loader.fields import RowSpec
from shardkit.loader.rows import BOX_DROPPED, PLANES, FieldRows
from shardkit.targets.crops import crop_maps, warp_crop_mask
from shardkit.targets.geometry import compact, moved_rows, pad_objects
from shardkit.targets.instances import NO_OBJECT, kept_rows, relabel

#: the target fields stored as images, decoded before the batch (:func:`decode_masks`)
PIXEL_TARGETS = PLANES
#: bytes per output pixel of each pixel target (uint8 class mask, int16 instance map)
PLANE_BYTES = {name: fieldtable.by_name()[name].plane_bytes for name in PLANES}


class Pixels(NamedTuple):
    """One sample's decoded pixel targets at its stored size (``None``: not asked for)."""

    mask: Optional[np.ndarray] = None
    instances: Optional[np.ndarray] = None


def decode_masks(
    samples: Sequence[RawSample], sizes: Sequence[tuple[int, int]], want: Sequence[str] = ("mask",)
) -> tuple[list[Optional[Pixels]], list[tuple[int, str]]]:
    """Each sample's ``.mask.png`` (uint8 ``[H, W]``) and ``.instances.png`` (int16 object rows) as ``want`` asks
    (``sizes``: its image's ``(width, height)``), and the ``(position, reason)`` of those that cannot be read
    (their entry is ``None``)."""
    out: list[Optional[Pixels]] = []
    errors: list[tuple[int, str]] = []
    for i, (s, size) in enumerate(zip(samples, sizes)):
        wh = (int(size[0]), int(size[1]))
        try:
            mask = inst = None
            if "mask" in want:
                if s.mask is None:
                    raise ValueError("missing field 'mask.png'")
                mask = decode_mask(s.mask, wh)
            if "instances" in want:
                if s.instances is None:
                    raise ValueError("missing field 'instances.png'")
                inst = decode_instances(s.instances, wh, 0 if s.objects is None else len(s.objects))
            out.append(Pixels(mask, inst))
        except ValueError as exc:
            out.append(None)
            errors.append((i, f"cannot decode mask ({exc})"))
    return out, errors


def target_rows(
    samples: Sequence[RawSample],
    masks: Optional[Sequence[Optional[Pixels]]],
    boxes: np.ndarray,
    flips: np.ndarray,
    size: int,
    spec: RowSpec,
    planes: Optional[dict[str, torch.Tensor]] = None,
) -> tuple[FieldRows, int]:
    """The target fields of ``samples`` after each one's crop ``boxes[i]`` (stored pixels, the box the pixels
    came from) resized to ``size`` x ``size`` and mirrored where ``flips[i]``.

    ``planes`` (optional): where the pixel targets go (``"mask"``: uint8, ``"instances"``: int16, each
    ``[len(samples), size, size]``; the worker's shared batch slot), else new memory.

    Returns:
        ``(rows, dropped)``: :class:`FieldRows` with the asked-for target fields of ``spec``, and the number of
        boxes dropped (less than ``spec.min_visible`` of their area left in the output, or a crowd region).
    """
    want = spec.targets
    n = len(samples)
    k = spec.num_keypoints if "keypoints" in want else 0
    objects = [s.objects if s.objects is not None else Objects.empty(k) for s in samples]
    # crowd regions (COCO iscrowd, VOC difficult) are not objects to detect (torchvision's COCO reference drops
    # them too; their pixels are 255 in a converted mask): not yielded, counted with the dropped boxes, unless
    # box_crowd is asked for (then they are rows like any other object, marked)
    keep_crowds = "box_crowd" in want
    crowds = np.zeros(n, np.int64) if keep_crowds else np.fromiter((int(o.iscrowd.sum()) for o in objects), np.int64, n)
    as_stored = pad_objects(objects) if "instances" in want else None
    if not keep_crowds:
        objects = [o.take(~o.iscrowd) if o.iscrowd.any() else o for o in objects]
    inv = crop_maps(boxes, flips, size)
    stepped, keep = moved_rows(
        pad_objects(objects, k), inv, (size, size), min_visible=spec.min_visible, flip_pairs=spec.flip_pairs
    )
    moved = compact(stepped, keep)
    dropped = (stepped.labels >= 0).sum(1) - moved.count
    dropped = dropped + torch.from_numpy(crowds)
    mask = inst = None
    if "mask" in want:
        assert masks is not None
        mask = _plane(planes, "mask", (n, size, size), torch.uint8)
        for i, px in enumerate(masks):
            assert px is not None and px.mask is not None
            src = torch.from_numpy(np.require(px.mask, requirements="W"))  # PIL's arrays are read-only
            mask[i] = warp_crop_mask(src, inv[i], (size, size))
    if "instances" in want and as_stored is not None:
        assert masks is not None
        inst = _plane(planes, "instances", (n, size, size), torch.int16)
        for i, px in enumerate(masks):
            assert px is not None and px.instances is not None
            ids = torch.from_numpy(np.require(px.instances, requirements="W"))
            inst[i] = warp_crop_mask(ids, inv[i], (size, size), NO_OBJECT)
        yielded = as_stored.labels >= 0
        if not keep_crowds:
            yielded = yielded & ~as_stored.crowd
        # stored row -> row among the yielded objects -> row after the crop's drops; -1 for crowds and drops
        table = relabel(kept_rows(yielded), kept_rows(keep))
        same = (table == torch.arange(table.shape[1])) | (as_stored.labels < 0)  # no crowd, no drop: rows stay
        if not bool(same.all()):  # the worker's host tensors: a cheap test that skips the map's pass
            inst.copy_(relabel(inst, table))  # in place: the map may be the batch slot's
    # M: the most objects a sample keeps (dropped boxes leave padding at the end of each row)
    m_kept = int(moved.count.max()) if n else 0
    values = {"mask": mask, "instances": inst}
    for name in want:  # the per-object and per-sample target fields: the moved objects' attribute the table names
        field = fieldtable.by_name()[name]
        if field.codec == "objects" and (name != "keypoints" or k):
            v = getattr(moved, field.attr)
            values[name] = v[:, :m_kept].contiguous() if field.per_object else v
    return FieldRows(**{BOX_DROPPED: dropped}, **{f: values.get(f) for f in want}), int(dropped.sum())


def _plane(
    planes: Optional[dict[str, torch.Tensor]], name: str, shape: tuple[int, int, int], dtype: torch.dtype
) -> torch.Tensor:
    """The given plane ``name`` (checked: ``shape`` and ``dtype``), else new memory."""
    out = None if planes is None else planes.get(name)
    if out is None:
        return torch.empty(shape, dtype=dtype)
    assert tuple(out.shape) == shape and out.dtype == dtype, (name, tuple(out.shape), out.dtype)
    return out


__all__ = ["PIXEL_TARGETS", "PLANE_BYTES", "Pixels", "decode_masks", "target_rows"]
