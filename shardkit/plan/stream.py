"""Streams: the samples of (the rest of) an epoch in stream order, stored as runs inside shards or listed.

A single dataset is the one-source mixture: a plain :class:`Stream` is a :class:`MixedStream` whose
samples all come from source 0, so :func:`shardkit.plan.epoch.worker_plan` plans both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, Union

import numpy as np

from shardkit.plan.interleave import window as interleave_window

#: samples per shard, in manifest order (a list or an integer array)
Sizes = Union[Sequence[int], np.ndarray]


def seeded_rng(*key: int) -> np.random.Generator:
    """The generator of one random choice, a pure function of its integer ``key``."""
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in key] + [0x5EED])


def sizes_fingerprint(shard_sizes: Sizes) -> str:
    """A short hash of the shard sizes, to refuse resuming on a different dataset (and find a source by its shards)."""
    return hashlib.sha256(np.asarray(shard_sizes, dtype=np.int64).tobytes()).hexdigest()[:16]


def shard_offsets(shard_sizes: Sizes) -> np.ndarray:
    """Global id of each shard's first sample (manifest order): ``[0, s0, s0 + s1, ...]`` without the total."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    return (np.cumsum(sizes) - sizes).astype(np.int64)


class MixedStream(Protocol):
    """The samples of (the rest of) an epoch, in stream order, each with its source."""

    @property
    def repeats(self) -> bool:
        """Some source is seen more than once in the epoch (then no batch is let hold a sample twice)."""
        ...

    @property
    def mixed(self) -> bool:
        """The stream mixes sources (then unshuffled chunks are cut in blocks too, see :func:`shardkit.plan.epoch.worker_plan`)."""
        ...

    def __len__(self) -> int: ...

    def window(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, sample id)`` of stream positions ``[a, b)``."""
        ...


@dataclass(frozen=True, eq=False)
class Stream:
    """An ordered sequence of samples of one source, stored as runs ``[start, stop)`` inside shards.

    ``shard_offsets[s]`` is the global id of the first sample of shard ``s``
    (manifest order); a sample's global id is ``shard_offsets[shard] + index``.
    As a :class:`MixedStream` it is the one-source stream (every sample of source 0).
    """

    run_shard: np.ndarray
    run_start: np.ndarray
    run_stop: np.ndarray
    shard_offsets: np.ndarray
    _ends: np.ndarray = field(init=False, repr=False)  #: stream position after each run

    repeats = False  # one pass over one source: no sample twice (a MixedStream attribute, not a field)
    mixed = False

    def __post_init__(self) -> None:
        lengths = self.run_stop - self.run_start
        object.__setattr__(self, "_ends", np.cumsum(lengths, dtype=np.int64))

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @classmethod
    def full_epoch(cls, shard_sizes: Sizes, *, seed: int, epoch: int, shuffle: bool = True) -> "Stream":
        """Every sample once: shards in a seeded per-epoch order (manifest order if not ``shuffle``)."""
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        offsets = shard_offsets(sizes)
        order = seeded_rng(seed, epoch, 1).permutation(len(sizes)) if shuffle else np.arange(len(sizes))
        order = order[sizes[order] > 0]
        return cls(order.astype(np.int64), np.zeros(len(order), np.int64), sizes[order], offsets)

    @classmethod
    def from_global_ids(cls, gids: np.ndarray, shard_offsets: np.ndarray) -> "Stream":
        """A stream of the given global ids, in the given order (consecutive ids merge into runs)."""
        gids = np.asarray(gids, dtype=np.int64)
        if len(gids) == 0:
            z = np.zeros(0, np.int64)
            return cls(z, z, z, shard_offsets)
        shard = np.searchsorted(shard_offsets, gids, side="right") - 1
        index = gids - shard_offsets[shard]
        brk = np.flatnonzero((np.diff(gids) != 1) | (np.diff(shard) != 0)) + 1
        starts = np.concatenate([[0], brk])
        stops = np.concatenate([brk, [len(gids)]])
        return cls(shard[starts], index[starts], index[starts] + (stops - starts), shard_offsets)

    def global_ids(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Global ids of stream positions ``[start, stop)`` (the planner's tests compare streams by them)."""
        n = len(self)
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise IndexError(f"stream slice [{start}, {stop}) out of range for length {n}")
        return self.global_ids_at(np.arange(start, stop, dtype=np.int64))

    def global_ids_at(self, positions: np.ndarray) -> np.ndarray:
        """Global ids at arbitrary stream positions."""
        run = np.searchsorted(self._ends, positions, side="right")
        run_begin = self._ends[run] - (self.run_stop[run] - self.run_start[run])
        index = self.run_start[run] + (positions - run_begin)
        return self.shard_offsets[self.run_shard[run]] + index

    def window(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source 0, global id)`` of stream positions ``[a, b)`` (the :class:`MixedStream` view)."""
        gids = self.global_ids(a, b)
        return np.zeros(len(gids), np.int64), gids


@dataclass(frozen=True, eq=False)
class MixedEpoch:
    """A fresh mixed epoch: the sources' epoch streams, interleaved (nothing materialised).

    Attributes:
        counts: samples of each source.
        streams: each source's samples in stream order (mixture sample ids).
    """

    counts: np.ndarray
    streams: tuple[Stream, ...]
    repeats: bool = False
    mixed: bool = False

    def __len__(self) -> int:
        return int(np.sum(self.counts))

    def window(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        src, k = interleave_window(self.counts, a, b)
        gids = np.empty(len(src), np.int64)
        for i, s in enumerate(self.streams):
            mine = src == i
            if mine.any():
                gids[mine] = s.global_ids_at(k[mine])
        return src, gids


@dataclass(frozen=True, eq=False)
class Explicit:
    """The rest of an epoch after an elastic re-plan: the kept samples, listed."""

    sources: np.ndarray
    gids: np.ndarray
    repeats: bool = False
    mixed: bool = False

    def __len__(self) -> int:
        return len(self.gids)

    def window(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        return self.sources[a:b], self.gids[a:b]
