"""Weighted mixtures of several datasets: what each source contributes to each epoch.

Pure functions of (sources' shard sizes, specs, seed, epoch); no data is touched.
:mod:`shardkit.plan.epoch` interleaves the sources and splits the mixed epoch over
ranks and workers.

The model:

1. **Specs.** Each :class:`Source` asks for exactly one of ``weight`` (a share of
   the epoch), ``repeat`` (passes over the source per epoch, fractional allowed) or
   ``choose`` (samples per epoch). A lone source may omit all three (``repeat=1``).
2. **Counts** (:meth:`Mixture.counts`), the rounding rule:

   * ``choose``: exactly ``choose`` every epoch;
   * ``repeat``: cumulative rounding down, ``floor((e+1)*repeat*size) - floor(e*repeat*size)``
     (``repeat`` read as the decimal it prints as), so 0.5 x 7 samples gives 3, 4, 3, 4...
     and any whole number of passes lands exactly on the pass boundary;
   * ``weight``: the epoch size (``epoch_size``, else the sum of all sources' sizes) minus
     the repeat/choose counts is shared by largest remainder of ``seats * w / sum(w)``,
     ties to the lower source index, so the counts sum to the epoch size. Without weighted
     sources the epoch size is the sum of the counts (fractional repeats make it vary by
     a sample or so from epoch to epoch).
3. **Selection** (:func:`selection`): every source has an infinite stream, pass after
   pass, each pass its shards in a seeded order (:meth:`shardkit.plan.stream.Stream.full_epoch`
   with the source's seed). Epoch ``e`` takes the next ``count`` samples of that stream,
   right after those of the earlier epochs: sampling without replacement across epochs,
   read as contiguous runs inside shards. Source 0's seed is the loader seed, so a
   one-source mixture is exactly today's single-dataset epoch.

Sample ids of a mixture are global: source ``i``'s shards follow source ``i-1``'s in one
shard list (:attr:`Mixture.shard_offsets`), so a reader addresses any source's shard by
one index and :meth:`Mixture.source_of` tells a batch's sources from its ids.

A mixture changed mid-training (``allow_remix``) is a new :class:`Mixture` whose
``first_epoch``, ``offsets`` and ``seed_keys`` continue each shared source's stream
(:meth:`Mixture.continue_from`, :func:`shardkit.plan.resume_mixtures`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.plan.affinity import NodeLayout, node_layout, node_targets
from shardkit.plan.member import Source, check_specs, exact
from shardkit.plan.stream import Sizes, Stream, sizes_fingerprint

#: per-source seeds: source ``i`` shuffles its passes with ``seed + i * _SOURCE_STRIDE``
_SOURCE_STRIDE = 0x9E3779B9


@dataclass(frozen=True, eq=False)
class Mixture:
    """Sources with their shard sizes: everything that decides the epochs' counts and samples.

    Attributes:
        sources: the specs.
        shard_sizes: samples per shard of each source (manifest order).
        epoch_size: samples per epoch for weighted mixtures (None: the sum of the sources' sizes).
        first_epoch: the epoch this mixture starts at (a mixture changed mid-training, :meth:`continue_from`).
        offsets: samples of each source's stream used before ``first_epoch`` (None: none).
        seed_keys: which seed each source's passes use (:func:`source_seed`; None: its index).
    """

    sources: tuple[Source, ...]
    shard_sizes: tuple[np.ndarray, ...]
    epoch_size: Optional[int] = None
    first_epoch: int = 0
    offsets: Optional[tuple[int, ...]] = None
    seed_keys: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        check_specs(self.sources)
        sizes = tuple(np.asarray(s, dtype=np.int64) for s in self.shard_sizes)
        if len(sizes) != len(self.sources):
            raise ValueError(f"{len(self.sources)} sources but {len(sizes)} shard size lists")
        object.__setattr__(self, "shard_sizes", sizes)
        n = len(sizes)
        object.__setattr__(
            self, "offsets", tuple(int(v) for v in self.offsets) if self.offsets is not None else (0,) * n
        )
        object.__setattr__(
            self, "seed_keys", tuple(int(v) for v in self.seed_keys) if self.seed_keys is not None else tuple(range(n))
        )
        if len(self.offsets) != n or len(self.seed_keys) != n or self.first_epoch < 0:  # type: ignore[arg-type]
            raise ValueError("offsets and seed_keys need one entry per source, first_epoch >= 0")
        if self.epoch_size is not None:
            if (
                isinstance(self.epoch_size, bool)
                or not isinstance(self.epoch_size, numbers.Integral)
                or self.epoch_size < 1
            ):
                raise ValueError(
                    f"epoch_size must be an integer >= 1 (samples per epoch of a weighted mixture) or None "
                    f"(the sum of the sources' sizes), got {type(self.epoch_size).__name__} {self.epoch_size!r}"
                )
            object.__setattr__(self, "epoch_size", int(self.epoch_size))
            if all(s.weight is None for s in self.sources):
                raise ValueError("epoch_size applies to weighted sources; repeat= and choose= fix their own counts")
        totals = np.array([int(s.sum()) for s in sizes], np.int64)
        nshards = np.array([len(s) for s in sizes], np.int64)
        object.__setattr__(self, "sizes", totals)
        object.__setattr__(self, "shard_base", np.concatenate([[0], np.cumsum(nshards)]).astype(np.int64))
        object.__setattr__(self, "gid_base", np.concatenate([[0], np.cumsum(totals)]).astype(np.int64))
        flat = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        object.__setattr__(
            self, "shard_offsets", np.concatenate([[0], np.cumsum(flat)[:-1]]).astype(np.int64) if len(flat) else flat
        )
        for i, (s, n) in enumerate(zip(self.sources, totals)):
            if n == 0 and len(self.sources) > 1:
                raise ShardkitError(
                    f"source {i} ({s.url}) has no samples; convert it again or leave it out of the mixture"
                )
        if any(s.weight is not None for s in self.sources):  # the repeat/choose counts must fit every epoch
            most = sum(
                math.ceil(exact(s.repeat) * n) if s.repeat is not None else (s.choose or 0)
                for s, n in zip(self.sources, totals.tolist())
            )
            total = self.epoch_size if self.epoch_size is not None else int(totals.sum())
            if most > total:
                raise ValueError(
                    f"repeat/choose sources take up to {most} samples per epoch, more than the epoch size {total}; "
                    "raise epoch_size or lower them"
                )

    sizes: np.ndarray = field(init=False, repr=False)  #: samples per source
    shard_base: np.ndarray = field(init=False, repr=False)  #: first mixture shard index of each source (+ total)
    gid_base: np.ndarray = field(init=False, repr=False)  #: first mixture sample id of each source (+ total)
    shard_offsets: np.ndarray = field(init=False, repr=False)  #: mixture sample id of each mixture shard's first sample

    def source_of(self, gids: np.ndarray) -> np.ndarray:
        """Source index of mixture sample ids (vectorised)."""
        return np.searchsorted(self.gid_base, np.asarray(gids, np.int64), side="right") - 1

    def _fixed(self, epochs: int) -> list[int]:
        """Cumulative repeat/choose samples of each source over the first ``epochs`` epochs (0 for weighted ones)."""
        out = []
        for s, n in zip(self.sources, self.sizes.tolist()):
            if s.choose is not None:
                out.append(epochs * s.choose)
            elif s.weight is None:  # repeat, or a lone source without a spec
                out.append(math.floor(epochs * exact(1 if s.repeat is None else s.repeat) * n))
            else:
                out.append(0)
        return out

    def counts(self, epoch: int) -> np.ndarray:
        """Samples each source contributes to ``epoch`` (they sum to the epoch size)."""
        r = self._relative(epoch)
        fixed = np.array(self._fixed(r + 1), np.int64) - np.array(self._fixed(r), np.int64)
        w = [(i, exact(s.weight)) for i, s in enumerate(self.sources) if s.weight is not None]
        if not w:
            return fixed
        total = self.epoch_size if self.epoch_size is not None else int(self.sizes.sum())
        seats = total - int(fixed.sum())
        if seats < 0:
            raise ValueError(
                f"repeat/choose sources take {int(fixed.sum())} samples of epoch {epoch}, more than the epoch size {total}; "
                "raise epoch_size or lower them"
            )
        wsum = sum(v for _, v in w)
        quotas = [seats * v / wsum for _, v in w]
        floors = [math.floor(q) for q in quotas]
        extra = seats - sum(floors)
        by_remainder = sorted(range(len(w)), key=lambda j: (-(quotas[j] - floors[j]), j))
        for j in by_remainder[:extra]:
            floors[j] += 1
        out = fixed.copy()
        for (i, _), c in zip(w, floors):
            out[i] = c
        return out

    def _relative(self, epoch: int) -> int:
        if epoch < self.first_epoch:
            raise ValueError(f"epoch {epoch} is before this mixture's first epoch {self.first_epoch}")
        return epoch - self.first_epoch

    def starts(self, epoch: int) -> np.ndarray:
        """Samples of each source's infinite stream used by the epochs before ``epoch``."""
        r = self._relative(epoch)
        start = np.array(self.offsets, np.int64) + np.array(self._fixed(r), np.int64)
        weighted = [i for i, s in enumerate(self.sources) if s.weight is not None]
        if weighted and r:
            if all(s.repeat is None for s in self.sources):  # constant weighted counts
                start[weighted] += r * self.counts(self.first_epoch)[weighted]
            else:  # fractional repeats vary the seats left to the weighted sources: O(epochs)
                start[weighted] += np.sum([self.counts(e)[weighted] for e in range(self.first_epoch, epoch)], axis=0)
        return start

    def continue_from(self, previous: "Mixture", epoch: int) -> "Mixture":
        """This mixture from ``epoch`` on, after ``previous`` until then: a source of both (same
        shard sizes) continues its stream where ``previous`` left it, with the same seed."""
        ends = previous.starts(epoch)
        mine = [sizes_fingerprint(s) for s in self.shard_sizes]
        theirs = [sizes_fingerprint(s) for s in previous.shard_sizes]
        offsets, keys, used = [], [], set()
        fresh = max(previous.seed_keys) + 1  # type: ignore[arg-type]
        for fp in mine:
            j = next((j for j, t in enumerate(theirs) if t == fp and j not in used), None)
            if j is None:
                offsets.append(0)
                keys.append(fresh)
                fresh += 1
            else:
                used.add(j)
                offsets.append(int(ends[j]))
                keys.append(previous.seed_keys[j])  # type: ignore[index]
        return Mixture(self.sources, self.shard_sizes, self.epoch_size, epoch, tuple(offsets), tuple(keys))

    def describe(self) -> dict[str, Any]:
        """JSON-friendly identity of the mixture (data fingerprints and specs), for state dicts."""
        return {
            "epoch_size": self.epoch_size,
            "sources": [
                {"fingerprint": sizes_fingerprint(s), "samples": int(n), **src.spec()}
                for s, n, src in zip(self.shard_sizes, self.sizes, self.sources)
            ],
            "first_epoch": self.first_epoch,
            "offsets": list(self.offsets),  # type: ignore[arg-type]
            "seed_keys": list(self.seed_keys),  # type: ignore[arg-type]
        }

    def with_history(self, saved: dict[str, Any]) -> "Mixture":
        """This mixture with the era bookkeeping (first epoch, offsets, seeds) of a saved :meth:`describe`."""
        return Mixture(
            self.sources,
            self.shard_sizes,
            self.epoch_size,
            int(saved.get("first_epoch", 0)),
            tuple(saved.get("offsets") or (0,) * len(self.sources)),
            tuple(saved.get("seed_keys") or range(len(self.sources))),
        )


def source_seed(seed: int, source: int) -> int:
    """Seed of source ``source``'s pass orders (source 0 uses ``seed`` itself)."""
    return seed + source * _SOURCE_STRIDE


def selection(
    shard_sizes: Sizes, *, seed: int, start: int, count: int, shuffle: bool = True, layout: Optional[NodeLayout] = None
) -> Stream:
    """Samples ``[start, start + count)`` of a source's infinite stream (pass after pass, shards in a
    per-pass seeded order; with a ``layout``, the nodes' shares in node order, each shuffled within itself,
    :mod:`shardkit.plan.affinity`) as a :class:`~shardkit.plan.stream.Stream` in the source's own sample ids."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    n = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)
    if count <= 0 or n == 0:
        z = np.zeros(0, np.int64)
        return Stream(z, z, z, offsets)
    first, last = start // n, (start + count - 1) // n
    passes = [
        Stream.full_epoch(sizes, seed=seed, epoch=p, shuffle=shuffle)
        if layout is None
        else layout.pass_order(seed, p, shuffle)
        for p in range(first, last + 1)
    ]
    shard = np.concatenate([p.run_shard for p in passes])
    lo = np.concatenate([p.run_start for p in passes])
    hi = np.concatenate([p.run_stop for p in passes])
    ends = np.cumsum(hi - lo)
    begins = ends - (hi - lo)
    a, b = start - first * n, start - first * n + count
    keep = (ends > a) & (begins < b)
    lo = lo[keep] + np.maximum(0, a - begins[keep])
    hi = hi[keep] - np.maximum(0, ends[keep] - b)
    return Stream(shard[keep], lo, hi, offsets)


def source_epochs(
    mixture: Mixture, *, seed: int, epoch: int, shuffle: bool = True, nodes: int = 1, per_node: int = 0
) -> tuple[Stream, ...]:
    """Each source's samples of ``epoch``, in its stream order, as mixture sample ids.

    With ``nodes > 1`` (node affinity) each source's passes are its nodes' shares in node order, node ``n``'s
    share cut to the source's samples at mixed positions ``[n * per_node, (n + 1) * per_node)`` of an epoch
    that takes every source's size (:func:`shardkit.plan.affinity.node_targets`)."""
    starts, counts = mixture.starts(epoch), mixture.counts(epoch)
    targets = node_targets(mixture.sizes, nodes, per_node) if nodes > 1 else None
    out = []
    for i, key in enumerate(mixture.seed_keys):  # type: ignore[arg-type]
        local = selection(
            mixture.shard_sizes[i],
            seed=source_seed(seed, key),
            start=int(starts[i]),
            count=int(counts[i]),
            shuffle=shuffle,
            layout=None if targets is None else node_layout(mixture.shard_sizes[i], targets[i], source_seed(seed, key)),
        )
        out.append(
            Stream(local.run_shard + mixture.shard_base[i], local.run_start, local.run_stop, mixture.shard_offsets)
        )
    return tuple(out)


def source_epoch(mixture: Mixture, source: int, *, seed: int, epoch: int, shuffle: bool = True) -> Stream:
    """Source ``source``'s samples of ``epoch`` (:func:`source_epochs`)."""
    return source_epochs(mixture, seed=seed, epoch=epoch, shuffle=shuffle)[source]
