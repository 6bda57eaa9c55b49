"""Which of a split's samples are in, and which labels are changed: one immutable value per resolved split.

A :class:`Subset` is what a selection (``shardkit select``) and a generation's corrections (``convert --remove``,
``--relabel``) leave of a split's stored shards, without rewriting one: per shard, the **positions kept**
(sorted, ``None``: every sample) and the **class index** of each relabelled position. The planner plans over
the kept counts (:meth:`Subset.sizes`) exactly as over a split's own shard sizes, so exactly once per epoch,
equal batches, resume and mixtures hold on a subset unchanged; the read path maps a planned position back to
the stored one (:meth:`Subset.stored`) before it reads, and applies :meth:`Subset.label` to what it read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True, eq=False)
class Subset:
    """The kept positions and changed labels of each shard of one split (manifest order).

    Attributes:
        kept: per shard, the stored positions that are in, sorted ascending (int64), or ``None``: all of them.
        relabels: per shard, ``{stored position: class index}`` of the samples whose label changed (``{}``: none).
    """

    kept: tuple[Optional[np.ndarray], ...]
    relabels: tuple[Mapping[int, int], ...]

    def __post_init__(self) -> None:
        if len(self.kept) != len(self.relabels):
            raise ValueError(f"subset: {len(self.kept)} kept entries but {len(self.relabels)} relabel entries")
        kept = tuple(None if k is None else np.asarray(k, np.int64) for k in self.kept)
        for i, k in enumerate(kept):
            if k is not None and len(k) > 1 and not bool(np.all(k[1:] > k[:-1])):
                raise ValueError(f"subset: shard {i}'s kept positions are not strictly increasing")
        object.__setattr__(self, "kept", kept)

    @classmethod
    def everything(cls, shards: int) -> "Subset":
        """Every sample of ``shards`` shards, no label changed."""
        return cls((None,) * shards, ({},) * shards)

    @classmethod
    def from_mask(cls, mask: np.ndarray, shard_sizes: Sequence[int]) -> "Subset":
        """The samples where ``mask`` (one bool per stored sample, in split order) is true."""
        sizes = np.asarray(shard_sizes, np.int64)
        mask = np.asarray(mask, bool)
        if mask.shape != (int(sizes.sum()),):
            raise ValueError(f"subset: a mask of {mask.shape} for {int(sizes.sum())} samples")
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        kept = tuple(np.flatnonzero(mask[bounds[i] : bounds[i + 1]]) for i in range(len(sizes)))
        return cls(tuple(None if len(k) == n else k for k, n in zip(kept, sizes)), ({},) * len(sizes))

    @property
    def is_everything(self) -> bool:
        """No sample left out and no label changed."""
        return all(k is None for k in self.kept) and not any(self.relabels)

    def sizes(self, shard_sizes: Sequence[int]) -> np.ndarray:
        """Samples kept per shard, given the stored ``shard_sizes`` (what the planner plans over)."""
        return np.array([n if k is None else len(k) for k, n in zip(self.kept, shard_sizes)], np.int64)

    def stored(self, shard: int, local: np.ndarray) -> np.ndarray:
        """The stored positions in ``shard`` of planned positions ``local`` (indexes into the kept ones)."""
        k = self.kept[shard]
        local = np.asarray(local, np.int64)
        return local if k is None else k[local]

    def label(self, shard: int, position: int, label: int) -> int:
        """The class index of stored sample ``position`` of ``shard``, whose stored label is ``label``."""
        return int(self.relabels[shard].get(int(position), label))

    def mask(self, shard_sizes: Sequence[int]) -> np.ndarray:
        """One bool per stored sample (split order): whether it is kept."""
        parts = []
        for k, n in zip(self.kept, shard_sizes):
            m = np.ones(int(n), bool) if k is None else np.zeros(int(n), bool)
            if k is not None:
                m[k] = True
            parts.append(m)
        return np.concatenate(parts) if parts else np.zeros(0, bool)

    def restrict(self, other: "Subset") -> "Subset":
        """The samples kept by both ``self`` and ``other`` (same shards); ``other``'s relabels over ``self``'s."""
        if len(other.kept) != len(self.kept):
            raise ValueError("subset: restricting by a subset of other shards")
        kept = tuple(
            a if b is None else b if a is None else np.intersect1d(a, b, assume_unique=True)
            for a, b in zip(self.kept, other.kept)
        )
        relabels = tuple({**dict(a), **dict(b)} for a, b in zip(self.relabels, other.relabels))
        return Subset(kept, relabels)

    def fingerprint(self) -> str:
        """A short hash of which samples are kept and every changed label (saved in loader states)."""
        sha = hashlib.sha256()
        for i, (k, r) in enumerate(zip(self.kept, self.relabels)):
            sha.update(f"|{i}:".encode())
            sha.update(b"*" if k is None else k.astype("<i8").tobytes())
            for pos in sorted(r):
                sha.update(f"{pos}={r[pos]},".encode())
        return sha.hexdigest()[:16]


__all__ = ["Subset"]
