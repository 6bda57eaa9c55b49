"""The mixture's label space (classes merged by name, or kept apart per source) and keys unique across sources."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


class LabelMode(str, enum.Enum):
    """How the sources' class indices become the mixture's."""

    MERGED = (
        "merged"  #: classes merged by name into one sorted union (sources that all list the same classes keep them)
    )
    PER_SOURCE = "per_source"  #: each source's classes kept apart, offset by the classes before it

    @classmethod
    def parse(cls, value: "LabelMode | str") -> "LabelMode":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"invalid labels {value!r}; choose one of {[m.value for m in cls]}") from None


@dataclass(frozen=True, eq=False)
class LabelSpace:
    """The mixture's classes and each source's label -> mixture label table.

    Attributes:
        classes: mixture class names (``loader.classes``); ``per_source`` names read ``"i/name"``.
        tables: per source, ``tables[i][label]`` is the mixture label; None: labels stay as they are.
    """

    classes: tuple[str, ...]
    tables: "tuple[np.ndarray, ...] | None"
    _base: np.ndarray = field(init=False, repr=False)  #: first row of each source's table in ``_lut``
    _lut: np.ndarray = field(init=False, repr=False)  #: every table, concatenated

    def __post_init__(self) -> None:
        lens = [len(t) for t in self.tables or ()]
        object.__setattr__(
            self,
            "_base",
            np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if lens else np.zeros(0, np.int64),
        )
        object.__setattr__(
            self, "_lut", np.concatenate(self.tables or ()).astype(np.int64) if lens else np.zeros(0, np.int64)
        )

    def map(self, sources: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Mixture labels of a batch's ``labels`` from ``sources`` (vectorised)."""
        if self.tables is None:
            return np.asarray(labels)
        return self._lut[self._base[np.asarray(sources)] + np.asarray(labels)]


def label_space(class_lists: Sequence[Sequence[str]], mode: "LabelMode | str" = LabelMode.MERGED) -> LabelSpace:
    """Merge the sources' class lists (see :class:`LabelMode`).

    One source, or sources that all list the same classes in the same order, keep their
    labels unchanged in ``merged`` mode (so ``load(url)`` labels are today's).

    Raises:
        ValueError: a source without class names in a mixture (its labels cannot be matched).
    """
    mode = LabelMode.parse(mode)
    lists = [list(cl) for cl in class_lists]
    if mode is LabelMode.MERGED and all(cl == lists[0] for cl in lists):
        return LabelSpace(tuple(lists[0]) if lists else (), None)
    for i, cl in enumerate(lists):
        if not cl:
            raise ValueError(
                f"source {i} has no class names (its manifest lists no classes), so its labels cannot join the mixture's"
            )
    if mode is LabelMode.MERGED:
        union = sorted(set().union(*map(set, class_lists))) if class_lists else []
        index = {c: i for i, c in enumerate(union)}
        return LabelSpace(tuple(union), tuple(np.array([index[c] for c in cl], np.int64) for cl in class_lists))
    names: list[str] = []
    tables, base = [], 0
    for i, cl in enumerate(lists):
        names += [f"{i}/{c}" for c in cl]
        tables.append(np.arange(base, base + len(cl), dtype=np.int64))
        base += len(cl)
    return LabelSpace(tuple(names), tuple(tables))


def qualify_keys(sources: Sequence[int], keys: Sequence[str]) -> list[str]:
    """Keys unique across the mixture: ``"1/00000042"`` is key ``00000042`` of source 1."""
    return [f"{s}/{k}" for s, k in zip(sources, keys)]
