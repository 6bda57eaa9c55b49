"""A batch's stored fields beside the image and the class label: multi-hot labels, targets, texts, metadata.

:class:`FieldRows` is one batch's rows of the fields a loader was asked for (``fields=``), built in the worker
from the batch's samples by :func:`field_rows`, batched: one ``torch.zeros`` and one index assignment from
flat class indices for the multi-hot ``labels``, one array for the ``target`` values. It travels inside the
batch (:attr:`shardkit.loader.batchtypes.Batch.extra`), pickled inline as numpy arrays like the labels, and
every step that drops rows keeps it aligned (:meth:`FieldRows.take`).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
import torch

from shardkit.format import RawSample, fieldtable
from shardkit.loader.fields import RowSpec

#: the fields of :class:`FieldRows` that are pixel planes ``[n, S, S]`` (a class mask, an instance map): made in a
#: worker's batch slot beside the images and handed over by it (:mod:`shardkit.loader.transport`)
PLANES = fieldtable.planes()
#: not a field: int64 ``[n]``, the boxes each row lost below ``min_visible`` (the consumer uncounts those of a row
#: it cannot decode)
BOX_DROPPED = "box_dropped"


class FieldRows:
    """One batch's rows of the fields beside image and label: a value per :data:`~shardkit.format.fieldtable.FIELDS`
    entry kept in the rows (``rows.boxes``; ``None``: not asked for), plus ``box_dropped``.

    What each value is (dtype, shape, padding) is the table's; :meth:`take`, :meth:`copied`, :meth:`with_targets`
    and pickling follow it. Built with keywords: ``FieldRows(labels=..., boxes=...)``.
    """

    __slots__ = ("_v",)
    _v: dict[str, Any]

    def __init__(self, **values: Any):
        known = fieldtable.by_name()
        for name in values:
            if name != BOX_DROPPED and name not in known:
                raise TypeError(f"{name!r} is not a batch field (shardkit.format.fieldtable.FIELDS)")
        object.__setattr__(self, "_v", {k: v for k, v in values.items() if v is not None})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._v:
            return self._v[name]
        if name == BOX_DROPPED or name in fieldtable.by_name():
            return None
        raise AttributeError(f"{name!r} is not a batch field")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FieldRows is immutable: use updated()")

    def values(self) -> dict[str, Any]:
        """The fields present (not ``None``), by name."""
        return dict(self._v)

    def updated(self, **changes: Any) -> "FieldRows":
        """These rows with the fields ``changes`` replaced (``None``: removed)."""
        return FieldRows(**{**self._v, **changes})

    def take(self, rows: Sequence[int]) -> "FieldRows":
        """The rows ``rows`` (positions, in order) of every field (the object axis ``M`` shrinks to the most
        objects a kept row has)."""
        idx = torch.as_tensor(np.asarray(rows, np.int64))
        out: dict[str, Any] = {k: ([v[i] for i in rows] if isinstance(v, list) else v[idx]) for k, v in self._v.items()}
        labels = out.get("box_labels")
        if labels is not None:
            m = int((labels >= 0).sum(1).max()) if len(rows) else 0
            table = fieldtable.by_name()
            for k, v in out.items():
                if k in table and table[k].per_object:
                    out[k] = v[:, :m]
        return FieldRows(**out)

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "FieldRows":
        """The rows with their tensors replaced by ``copy(tensor)`` (pinned, or moved)."""
        return FieldRows(
            **{k: copy(v) if isinstance(v, torch.Tensor) and k != BOX_DROPPED else v for k, v in self._v.items()}
        )

    def with_targets(self, other: "Optional[FieldRows]") -> "FieldRows":
        """These rows with the target fields of ``other`` (the worker's decode built them; ``None``: unchanged)."""
        if other is None:
            return self
        moved = {k: v for k, v in other._v.items() if k == BOX_DROPPED or fieldtable.by_name()[k].is_target}
        return FieldRows(**{**self._v, **moved})

    def with_labels(self, labels: torch.Tensor) -> "FieldRows":
        """The rows with other multi-hot labels (a mixture's class space)."""
        return self.updated(labels=labels)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # inline numpy arrays, not torch's shared-memory reducer (a file and a mapping per tensor per batch)
        return _rebuild_rows, ({k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in self._v.items()},)


def _rebuild_rows(values: dict[str, Any]) -> FieldRows:
    return FieldRows(**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in values.items()})


def multi_hot(class_lists: Sequence[Sequence[int]], num_classes: int) -> torch.Tensor:
    """uint8 ``[n, num_classes]`` with row ``i`` set at ``class_lists[i]``: one zeros, one index assignment."""
    n = len(class_lists)
    counts = np.fromiter((len(c) for c in class_lists), np.int64, n)
    flat = np.fromiter(itertools.chain.from_iterable(class_lists), np.int64, int(counts.sum()))
    out = torch.zeros((n, num_classes), dtype=torch.uint8)
    out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy(flat)] = 1
    return out


def _multi_hot(samples: Sequence[RawSample], spec: RowSpec, field: fieldtable.Field) -> torch.Tensor:
    return multi_hot([getattr(s, field.attr) or () for s in samples], spec.num_classes)


def _vector(samples: Sequence[RawSample], spec: RowSpec, field: fieldtable.Field) -> torch.Tensor:
    values = np.fromiter(
        itertools.chain.from_iterable(getattr(s, field.attr) or () for s in samples),
        np.float32,
        len(samples) * spec.num_targets,
    )
    return torch.from_numpy(values.reshape(len(samples), spec.num_targets))


def _list(samples: Sequence[RawSample], spec: RowSpec, field: fieldtable.Field) -> list[Any]:
    fill = field.fill
    return [copy.copy(fill) if v is None else v for v in (getattr(s, field.attr) for s in samples)]


#: a row field's ``codec`` -> how a batch's samples become its value: ``(samples, spec, field) -> value``
ROW_CODECS: dict[str, Callable[[Sequence[RawSample], RowSpec, fieldtable.Field], Any]] = {
    "multi_hot": _multi_hot,
    "vector": _vector,
    "list": _list,
}


def field_rows(samples: Sequence[RawSample], spec: RowSpec) -> FieldRows:
    """The rows of ``spec.fields`` of ``samples`` (each already checked by its dataset's rule)."""
    table = fieldtable.by_name()
    return FieldRows(**{name: ROW_CODECS[table[name].codec](samples, spec, table[name]) for name in spec.fields})
