"""The read side of a :class:`~shardkit.format.snapshot.Snapshot`: planned positions to stored ones, new labels.

The planner plans over the samples that are in (:attr:`Snapshot.shard_sizes
<shardkit.format.snapshot.Snapshot.shard_sizes>`), exactly as over a whole split; the readers turn a planned
position of a shard into its stored position (:meth:`ReadMap.stored`) before they ask for bytes, and give what
they read the label the snapshot gives it (:func:`relabel`): its class index, and the ``class`` name of its
metadata, which names the class. :class:`ReadMap` holds this for the concatenated shards of one id space (a
mixture's sources one after another), so one reader serves every source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from shardkit.format.sample import RawSample
from shardkit.format.snapshot.subset import Subset

if TYPE_CHECKING:
    from shardkit.format.snapshot import Snapshot


@dataclass(frozen=True, eq=False)
class ReadMap:
    """Kept positions, changed labels and class names of the shards of one id space (sources in order).

    Attributes:
        subset: the kept positions and relabels of every shard.
        stored_sizes: samples stored per shard (what a shard's sample index lists).
        classes: per shard, the class names of its source (what a relabelled ``class`` metadata names).
    """

    subset: Subset
    stored_sizes: np.ndarray
    classes: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, snapshots: Sequence["Snapshot"]) -> "ReadMap":
        """The map of ``snapshots``' shards, one source after another."""
        kept: list[Optional[np.ndarray]] = []
        relabels: list[dict[int, int]] = []
        sizes: list[int] = []
        classes: list[tuple[str, ...]] = []
        for snap in snapshots:
            names = tuple(snap.manifest.classes)
            kept += list(snap.subset.kept)
            relabels += [dict(r) for r in snap.subset.relabels]
            sizes += [int(n) for n in snap.manifest.shard_sizes]
            classes += [names] * len(snap.manifest.shards)
        return cls(Subset(tuple(kept), tuple(relabels)), np.asarray(sizes, np.int64), tuple(classes))

    @property
    def is_everything(self) -> bool:
        """Every stored sample is planned and no label changes (the read path maps nothing)."""
        return self.subset.is_everything

    def stored(self, shard: int, local: np.ndarray) -> np.ndarray:
        """The stored positions in ``shard`` of planned positions ``local``."""
        return self.subset.stored(shard, local)

    def relabel(self, shard: int, samples: Sequence[RawSample]) -> None:
        """Give ``samples`` (read from ``shard``, ``index`` their stored position) their changed labels."""
        changes = self.subset.relabels[shard]
        if changes:
            for s in samples:
                relabel(s, changes, self.classes[shard])


def relabel(sample: RawSample, changes: Mapping[int, int], classes: Sequence[str]) -> None:
    """Set ``sample``'s class label to ``changes[sample.index]`` (its stored position) when it has one, and its
    metadata's ``class`` name with it; a sample that failed to read (``error``) is left alone."""
    new = changes.get(sample.index)
    if new is None or sample.error:
        return
    sample.label = int(new)
    meta = sample.meta
    if "class" in meta and new < len(classes):
        sample.meta_bytes = json.dumps({**meta, "class": classes[new]}, ensure_ascii=False).encode("utf-8")


__all__ = ["ReadMap", "relabel"]
