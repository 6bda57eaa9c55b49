"""A batch's target fields (boxes, box labels and counts, keypoints, mask), moved with the worker's crops.

The worker knows each sample's crop before it decodes a pixel: a box in stored pixels and a flip
(:class:`~shardkit.loader.decode.worker.Crops`). The decode reports the box the pixels really came
from (rounded to the DCT-decoded pixel grid), and :func:`target_rows` turns those boxes and flips into
one inverse map per sample (:func:`shardkit.targets.crops.crop_maps`) and moves the whole batch's
objects with the one geometry rule (:func:`shardkit.targets.geometry.move`: boxes clipped and dropped
below ``min_visible``, keypoints mirrored with their flip pairs swapped) and each sample's mask with
:func:`~shardkit.targets.geometry.warp_masks`'s arithmetic (nearest, 255 where no stored pixel maps; per sample,
:func:`~shardkit.targets.crops.warp_crop_mask`, equal bit for bit for these axis-aligned maps). Masks are
decoded first (:func:`decode_masks`): a mask that cannot be read fails its sample like a bad JPEG.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np
import torch

from shardkit.format import RawSample
from shardkit.format.fields import Objects
from shardkit.format.masks import decode_mask
from shardkit.loader.fields import RowSpec
from shardkit.loader.rows import FieldRows
from shardkit.targets.crops import crop_maps, warp_crop_mask
from shardkit.targets.geometry import move, pad_objects


def decode_masks(
    samples: Sequence[RawSample], sizes: Sequence[tuple[int, int]]
) -> tuple[list[Optional[np.ndarray]], list[tuple[int, str]]]:
    """Each sample's ``.mask.png`` as uint8 ``[H, W]`` (``sizes``: its image's ``(width, height)``), and the
    ``(position, reason)`` of those that cannot be read (their entry is ``None``)."""
    masks: list[Optional[np.ndarray]] = []
    errors: list[tuple[int, str]] = []
    for i, (s, size) in enumerate(zip(samples, sizes)):
        try:
            if s.mask is None:
                raise ValueError("missing field 'mask.png'")
            masks.append(decode_mask(s.mask, (int(size[0]), int(size[1]))))
        except ValueError as exc:
            masks.append(None)
            errors.append((i, f"cannot decode mask ({exc})"))
    return masks, errors


def target_rows(
    samples: Sequence[RawSample],
    masks: Optional[Sequence[Optional[np.ndarray]]],
    boxes: np.ndarray,
    flips: np.ndarray,
    size: int,
    spec: RowSpec,
) -> tuple[FieldRows, int]:
    """The target fields of ``samples`` after each one's crop ``boxes[i]`` (stored pixels, the box the pixels
    came from) resized to ``size`` x ``size`` and mirrored where ``flips[i]``.

    Returns:
        ``(rows, dropped)``: :class:`FieldRows` with the asked-for target fields of ``spec``, and the number of
        boxes dropped (less than ``spec.min_visible`` of their area left in the output, or a crowd region).
    """
    want = spec.targets
    n = len(samples)
    k = spec.num_keypoints if "keypoints" in want else 0
    objects = [s.objects if s.objects is not None else Objects.empty(k) for s in samples]
    # crowd regions (COCO iscrowd, VOC difficult) are not objects to detect (torchvision's COCO reference drops
    # them too; their pixels are 255 in a converted mask): not yielded, counted with the dropped boxes
    crowds = np.fromiter((int(o.iscrowd.sum()) for o in objects), np.int64, n)
    objects = [o.take(~o.iscrowd) if o.iscrowd.any() else o for o in objects]
    inv = crop_maps(boxes, flips, size)
    moved, dropped = move(
        pad_objects(objects, k), inv, (size, size), min_visible=spec.min_visible, flip_pairs=spec.flip_pairs
    )
    dropped = dropped + torch.from_numpy(crowds)
    mask = None
    if "mask" in want:
        assert masks is not None
        mask = torch.empty((n, size, size), dtype=torch.uint8)
        for i, m in enumerate(masks):
            src = torch.from_numpy(np.require(m, requirements="W"))  # PIL's arrays are read-only
            mask[i] = warp_crop_mask(src, inv[i], (size, size))
    # M: the most objects a sample keeps (dropped boxes leave padding at the end of each row)
    m_kept = int(moved.count.max()) if n else 0
    rows = FieldRows(
        boxes=moved.boxes[:, :m_kept].contiguous() if "boxes" in want else None,
        box_labels=moved.labels[:, :m_kept].contiguous() if "box_labels" in want else None,
        box_count=moved.count if "box_count" in want else None,
        keypoints=moved.keypoints[:, :m_kept].contiguous() if k else None,  # type: ignore[index]
        mask=mask,
        box_dropped=dropped,
    )
    return rows, int(dropped.sum())


__all__ = ["decode_masks", "target_rows"]
