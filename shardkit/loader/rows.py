"""A batch's stored fields beside the image and the class label: multi-hot labels, targets, texts, metadata.

:class:`FieldRows` is one batch's rows of the fields a loader was asked for (``fields=``), built in the worker
from the batch's samples by :func:`field_rows`, batched: one ``torch.zeros`` and one index assignment from
flat class indices for the multi-hot ``labels``, one array for the ``target`` values. It travels inside the
batch (:attr:`shardkit.loader.batchtypes.Batch.extra`), pickled inline as numpy arrays like the labels, and
every step that drops rows keeps it aligned (:meth:`FieldRows.take`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
import torch

from shardkit.format import RawSample
from shardkit.loader.fields import RowSpec

#: the fields of :class:`FieldRows` that are pixel planes ``[n, S, S]`` (a class mask, an instance map): made in a
#: worker's batch slot beside the images and handed over by it (:mod:`shardkit.loader.transport`)
PLANES = ("mask", "instances")


@dataclass(frozen=True, eq=False)
class FieldRows:
    """One batch's rows of the fields beside image and label (``None``: not asked for).

    Attributes:
        labels: multi-hot uint8 ``[n, C]``.
        target: float32 ``[n, D]``.
        text: ``n`` strings.
        meta: ``n`` dicts (each sample's ``.json`` metadata, ``{}`` without one).
        boxes: float32 ``[n, M, 4]`` (x0, y0, x1, y1) in output pixels; zeros beyond each sample's count.
        box_labels: int64 ``[n, M]``, -1 beyond each sample's count.
        box_count: int64 ``[n]``.
        keypoints: float32 ``[n, M, K, 3]``.
        mask: uint8 ``[n, S, S]``.
        instances: int16 ``[n, S, S]``, each pixel its object's row in ``boxes`` (-1: none).
        box_dropped: int64 ``[n]``, the boxes each row lost below ``min_visible`` (not a field: the consumer
            uncounts those of a row it cannot decode).
    """

    labels: Optional[torch.Tensor] = None
    target: Optional[torch.Tensor] = None
    text: Optional[list[str]] = None
    meta: Optional[list[dict[str, Any]]] = None
    boxes: Optional[torch.Tensor] = None
    box_labels: Optional[torch.Tensor] = None
    box_count: Optional[torch.Tensor] = None
    keypoints: Optional[torch.Tensor] = None
    mask: Optional[torch.Tensor] = None
    box_dropped: Optional[torch.Tensor] = None
    instances: Optional[torch.Tensor] = None

    def take(self, rows: Sequence[int]) -> "FieldRows":
        """The rows ``rows`` (positions, in order) of every field (the object axis ``M`` shrinks to the most
        objects a kept row has)."""
        idx = torch.as_tensor(np.asarray(rows, np.int64))

        def sel(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else t[idx]

        out = FieldRows(
            sel(self.labels),
            sel(self.target),
            None if self.text is None else [self.text[i] for i in rows],
            None if self.meta is None else [self.meta[i] for i in rows],
            sel(self.boxes),
            sel(self.box_labels),
            sel(self.box_count),
            sel(self.keypoints),
            sel(self.mask),
            sel(self.box_dropped),
            sel(self.instances),
        )
        if out.box_labels is not None:
            m = int((out.box_labels >= 0).sum(1).max()) if len(rows) else 0
            out = replace(
                out,
                boxes=None if out.boxes is None else out.boxes[:, :m],
                box_labels=out.box_labels[:, :m],
                keypoints=None if out.keypoints is None else out.keypoints[:, :m],
            )
        return out

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "FieldRows":
        """The rows with their tensors replaced by ``copy(tensor)`` (pinned, or moved)."""

        def cp(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if t is None else copy(t)

        return replace(
            self,
            labels=cp(self.labels),
            target=cp(self.target),
            boxes=cp(self.boxes),
            box_labels=cp(self.box_labels),
            box_count=cp(self.box_count),
            keypoints=cp(self.keypoints),
            mask=cp(self.mask),
            instances=cp(self.instances),
        )

    def with_targets(self, other: "Optional[FieldRows]") -> "FieldRows":
        """These rows with the target fields of ``other`` (the worker's decode built them; ``None``: unchanged)."""
        if other is None:
            return self
        return replace(
            self,
            boxes=other.boxes,
            box_labels=other.box_labels,
            box_count=other.box_count,
            keypoints=other.keypoints,
            mask=other.mask,
            box_dropped=other.box_dropped,
            instances=other.instances,
        )

    def with_labels(self, labels: torch.Tensor) -> "FieldRows":
        """The rows with other multi-hot labels (a mixture's class space)."""
        return replace(self, labels=labels)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # inline numpy arrays, not torch's shared-memory reducer (a file and a mapping per tensor per batch)
        def arr(t: Optional[torch.Tensor]) -> Optional[np.ndarray]:
            return None if t is None else t.numpy()

        return _rebuild_rows, (
            arr(self.labels),
            arr(self.target),
            self.text,
            self.meta,
            arr(self.boxes),
            arr(self.box_labels),
            arr(self.box_count),
            arr(self.keypoints),
            arr(self.mask),
            arr(self.box_dropped),
            arr(self.instances),
        )


def _rebuild_rows(
    labels: Optional[np.ndarray],
    target: Optional[np.ndarray],
    text: Optional[list[str]],
    meta: Optional[list[dict]],
    *targets: Optional[np.ndarray],
) -> FieldRows:
    def ten(a: Optional[np.ndarray]) -> Optional[torch.Tensor]:
        return None if a is None else torch.from_numpy(a)

    return FieldRows(ten(labels), ten(target), text, meta, *(ten(a) for a in targets))


def multi_hot(class_lists: Sequence[Sequence[int]], num_classes: int) -> torch.Tensor:
    """uint8 ``[n, num_classes]`` with row ``i`` set at ``class_lists[i]``: one zeros, one index assignment."""
    n = len(class_lists)
    counts = np.fromiter((len(c) for c in class_lists), np.int64, n)
    flat = np.fromiter(itertools.chain.from_iterable(class_lists), np.int64, int(counts.sum()))
    out = torch.zeros((n, num_classes), dtype=torch.uint8)
    out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy(flat)] = 1
    return out


def field_rows(samples: Sequence[RawSample], spec: RowSpec) -> FieldRows:
    """The rows of ``spec.fields`` of ``samples`` (each already checked by its dataset's rule)."""
    want = spec.fields
    labels = multi_hot([s.labels or () for s in samples], spec.num_classes) if "labels" in want else None
    target = None
    if "target" in want:
        values = np.fromiter(
            itertools.chain.from_iterable(s.target or () for s in samples), np.float32, len(samples) * spec.num_targets
        )
        target = torch.from_numpy(values.reshape(len(samples), spec.num_targets))
    text = [s.text or "" for s in samples] if "text" in want else None
    meta = [s.meta for s in samples] if "meta" in want else None
    return FieldRows(labels, target, text, meta)
