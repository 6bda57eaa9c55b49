"""A batch dict's target fields as one :class:`~shardkit.targets.geometry.Targets`, and back.

The loader's dict batches (``load(fields=...)``) name the targets ``boxes`` (float32 ``[B, M, 4]``),
``box_labels`` (int64 ``[B, M]``, -1 beyond each sample's count), ``box_count`` (int64 ``[B]``),
``keypoints`` (float32 ``[B, M, K, 3]``), ``mask`` (uint8 ``[B, S, S]``) and ``instances`` (int16
``[B, S, S]``, each pixel its object's row in ``boxes``, -1 none), and, asked for by name, ``box_crowd`` (bool
``[B, M]``: a crowd region's row). Geometric steps work on :class:`Targets`; :func:`targets_of` and
:func:`with_targets` convert at the edges. Which fields are targets, and which :class:`Targets` attribute each one
is, is the field table's (:mod:`shardkit.format.fieldtable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch

from shardkit.format import fieldtable
from shardkit.targets.geometry import Targets

#: the batch fields that are targets (moved by every geometric step)
TARGET_FIELDS = tuple(fieldtable.target_fields())


def targets_of(batch: Mapping[str, Any]) -> Optional[Targets]:
    """The targets of a dict batch (``None`` when it has none of :data:`TARGET_FIELDS`).

    Boxes need ``box_labels`` (their padding rows are those with label -1); ``box_count`` is
    recomputed from the labels when missing. A batch with only a ``mask`` gets zero boxes.
    """
    if not any(k in batch for k in TARGET_FIELDS):
        return None
    mask = batch.get("mask")
    orphans = [k for k in _needs_boxes() if k in batch and "boxes" not in batch]
    if orphans:
        raise ValueError(
            f"a batch with {orphans[0]!r} needs 'boxes' and 'box_labels' too (which rows are objects, where they "
            "are): ask fields= for them"
        )
    if "boxes" in batch:
        if "box_labels" not in batch:
            raise ValueError(
                "a batch with 'boxes' needs 'box_labels' too (which rows are objects): ask fields= for both"
            )
        boxes, labels = batch["boxes"], batch["box_labels"]
    else:
        like = mask if mask is not None else batch["image"]
        boxes = torch.zeros((like.shape[0], 0, 4), dtype=torch.float32, device=like.device)
        labels = torch.zeros((like.shape[0], 0), dtype=torch.int64, device=like.device)
    count = batch.get("box_count")
    if count is None:
        count = (labels >= 0).sum(1)
    crowd = batch.get("box_crowd")
    if crowd is None:
        crowd = torch.zeros_like(labels, dtype=torch.bool)
    return Targets(boxes, labels, count, crowd, batch.get("keypoints"), mask, batch.get("instances"))


def with_targets(batch: Mapping[str, Any], targets: Targets) -> dict[str, Any]:
    """A copy of ``batch`` with its target fields (those it has) replaced by ``targets``'."""
    out = dict(batch)
    for field in fieldtable.FIELDS:
        if field.is_target and field.name in out:
            out[field.name] = getattr(targets, field.attr)
    return out


def _needs_boxes() -> tuple[str, ...]:
    """The target fields that mean nothing without ``boxes`` (rows of the objects, or pixels naming them)."""
    free = (fieldtable.Geometry.BOXES, fieldtable.Geometry.MASK)
    return tuple(f.name for f in fieldtable.FIELDS if f.is_target and f.geometry not in free)


__all__ = ["TARGET_FIELDS", "targets_of", "with_targets"]
