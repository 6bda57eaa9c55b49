"""Weighted mixtures of several datasets: what each source contributes to each epoch.

Pure functions of (sources' shard sizes, specs, seed, epoch); no data is touched.
:mod:`shardkit.mixplan` interleaves the sources and splits the mixed epoch over
ranks and workers.

The model:

1. **Specs.** Each :class:`Source` asks for exactly one of ``weight`` (a share of
   the epoch), ``repeat`` (passes over the source per epoch, fractional allowed) or
   ``choose`` (samples per epoch). A lone source may omit all three (``repeat=1``).
2. **Counts** (:func:`epoch_counts`), the rounding rule:

   * ``choose``: exactly ``choose`` every epoch;
   * ``repeat``: cumulative rounding down, ``floor((e+1)*repeat*size) - floor(e*repeat*size)``
     (``repeat`` read as the decimal it prints as), so 0.5 x 7 samples gives 3, 4, 3, 4...
     and any whole number of passes lands exactly on the pass boundary;
   * ``weight``: the epoch size (``epoch_size``, else the sum of all sources' sizes) minus
     the repeat/choose counts is shared by largest remainder of ``seats * w / sum(w)``,
     ties to the lower source index. Counts always sum to the epoch size.
3. **Selection** (:func:`selection`): every source has an infinite stream, pass after
   pass, each pass its shards in a seeded order (:meth:`shardkit.plan.Stream.full_epoch`
   with the source's seed). Epoch ``e`` takes the next ``count`` samples of that stream,
   right after those of the earlier epochs: sampling without replacement across epochs,
   read as contiguous runs inside shards. Source 0's seed is the loader seed, so a
   one-source mixture is exactly today's single-dataset epoch.

Sample ids of a mixture are global: source ``i``'s shards follow source ``i-1``'s in one
shard list (:attr:`Mixture.shard_offsets`), so the existing readers need no change.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Optional, Sequence

import numpy as np

from .errors import ShardkitError
from .plan import Stream, fingerprint

#: per-source seeds: source ``i`` shuffles its passes with ``seed + i * _SOURCE_STRIDE``
_SOURCE_STRIDE = 0x9E3779B9


@dataclass(frozen=True)
class Source:
    """One split of a mixture.

    Attributes:
        url: split directory or manifest URL (any storage).
        weight: share of each epoch (normalised over the weighted sources).
        repeat: passes over the source per epoch (0.5: half of it per epoch).
        choose: exactly this many samples per epoch.
        storage_options: fsspec options for this source's URL.
    """

    url: str
    weight: Optional[float] = None
    repeat: Optional[float] = None
    choose: Optional[int] = None
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("weight", "repeat"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, Fraction)) or not math.isfinite(v) or v < 0):
                raise ValueError(f"source {self.url!r}: {name} must be a finite number >= 0, got {v!r}")
        if self.choose is not None and (isinstance(self.choose, bool) or not isinstance(self.choose, int) or self.choose < 1):
            raise ValueError(f"source {self.url!r}: choose must be an integer >= 1, got {self.choose!r}")
        if len(self.given) > 1:
            raise ValueError(f"source {self.url!r}: give one of weight, repeat or choose, not {' and '.join(self.given)}")

    @property
    def given(self) -> tuple[str, ...]:
        """Which of ``weight``/``repeat``/``choose`` this source sets."""
        return tuple(n for n in ("weight", "repeat", "choose") if getattr(self, n) is not None)

    def spec(self) -> dict[str, Any]:
        """The ordering-relevant part, JSON-friendly (stored in state dicts)."""
        return {n: getattr(self, n) for n in ("weight", "repeat", "choose")}


def as_sources(sources: "str | Source | Sequence[str | Source]") -> tuple[Source, ...]:
    """Normalise ``load``'s first argument: a URL or :class:`Source`, or a list of them."""
    items = [sources] if isinstance(sources, (str, Source)) else list(sources)
    out = tuple(s if isinstance(s, Source) else Source(str(s)) for s in items)
    check_specs(out)
    return out


def check_specs(sources: Sequence[Source]) -> None:
    """Errors that need the whole list but no data: count, missing spec, all-zero weights."""
    if not sources:
        raise ValueError("a mixture needs at least one source")
    if len(sources) > 1:
        for i, s in enumerate(sources):
            if not s.given:
                raise ValueError(f"source {i} ({s.url!r}): give one of weight=, repeat= or choose= (only a lone source may omit them)")
    weights = [s.weight for s in sources if s.weight is not None]
    if weights and not any(weights):
        raise ValueError("all weights are 0: give at least one source a positive weight")
    if any(s.given for s in sources) and not any(s.weight or s.repeat or s.choose for s in sources):
        raise ValueError("every source's weight or repeat is 0: the epoch would be empty")


@dataclass(frozen=True)
class SourceData:
    """What validation needs from a source's manifest (testable without files).

    Attributes:
        url: where it was loaded from (for messages).
        identity: what makes two splits the same (e.g. the shards' checksums).
        num_samples: samples in the split.
        image: conversion options that fix the stored image size (``short_side``, ``max_side``).
    """

    url: str
    identity: str
    num_samples: int
    image: tuple[tuple[str, Any], ...] = ()


def check_data(sources: Sequence[Source], data: Sequence[SourceData]) -> None:
    """Errors that need the manifests: empty source, the same split twice, different image sizes."""
    for i, d in enumerate(data):
        if d.num_samples == 0:
            raise ShardkitError(f"source {i} ({d.url}) has no samples; convert it again or leave it out of the mixture")
    seen: dict[str, int] = {}
    for i, d in enumerate(data):
        if d.identity in seen:
            j = seen[d.identity]
            raise ShardkitError(f"sources {j} ({data[j].url}) and {i} ({d.url}) are the same split; list it once (use repeat= to oversample it)")
        seen[d.identity] = i
    for i, d in enumerate(data[1:], 1):
        if dict(d.image) != dict(data[0].image):
            raise ShardkitError(f"source {i} ({d.url}) was converted with image options {dict(d.image)}, source 0 ({data[0].url}) with "
                                f"{dict(data[0].image)}; convert both with the same --short-side/--max-side")


def _exact(v: "float | int | Fraction") -> Fraction:
    """A spec value as the decimal it prints as (0.3 is 3/10, not the nearest binary fraction)."""
    return v if isinstance(v, Fraction) else Fraction(str(v)) if isinstance(v, float) else Fraction(v)


# --------------------------------------------------------------------------- the mixture value


@dataclass(frozen=True, eq=False)
class Mixture:
    """Sources with their shard sizes: everything that decides the epochs' counts and samples.

    Attributes:
        sources: the specs.
        shard_sizes: samples per shard of each source (manifest order).
        epoch_size: samples per epoch for weighted mixtures (None: the sum of the sources' sizes).
    """

    sources: tuple[Source, ...]
    shard_sizes: tuple[np.ndarray, ...]
    epoch_size: Optional[int] = None

    def __post_init__(self) -> None:
        check_specs(self.sources)
        sizes = tuple(np.asarray(s, dtype=np.int64) for s in self.shard_sizes)
        if len(sizes) != len(self.sources):
            raise ValueError(f"{len(self.sources)} sources but {len(sizes)} shard size lists")
        object.__setattr__(self, "shard_sizes", sizes)
        if self.epoch_size is not None:
            if self.epoch_size < 1:
                raise ValueError(f"epoch_size must be >= 1, got {self.epoch_size}")
            if all(s.weight is None for s in self.sources):
                raise ValueError("epoch_size applies to weighted sources; repeat= and choose= fix their own counts")
        totals = np.array([int(s.sum()) for s in sizes], np.int64)
        nshards = np.array([len(s) for s in sizes], np.int64)
        object.__setattr__(self, "sizes", totals)
        object.__setattr__(self, "shard_base", np.concatenate([[0], np.cumsum(nshards)]).astype(np.int64))
        object.__setattr__(self, "gid_base", np.concatenate([[0], np.cumsum(totals)]).astype(np.int64))
        flat = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        object.__setattr__(self, "shard_offsets", np.concatenate([[0], np.cumsum(flat)[:-1]]).astype(np.int64) if len(flat) else flat)
        for i, (s, n) in enumerate(zip(self.sources, totals)):
            if n == 0 and len(self.sources) > 1:
                raise ShardkitError(f"source {i} ({s.url}) has no samples; convert it again or leave it out of the mixture")
        self.counts(0)  # validates that the fixed counts fit the epoch

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
                out.append(math.floor(epochs * _exact(1 if s.repeat is None else s.repeat) * n))
            else:
                out.append(0)
        return out

    def counts(self, epoch: int) -> np.ndarray:
        """Samples each source contributes to ``epoch`` (they sum to the epoch size)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        fixed = np.array(self._fixed(epoch + 1), np.int64) - np.array(self._fixed(epoch), np.int64)
        w = [(i, _exact(s.weight)) for i, s in enumerate(self.sources) if s.weight is not None]
        if not w:
            return fixed
        total = self.epoch_size if self.epoch_size is not None else int(self.sizes.sum())
        seats = total - int(fixed.sum())
        if seats < 0:
            raise ValueError(f"repeat/choose sources take {int(fixed.sum())} samples of epoch {epoch}, more than the epoch size {total}; "
                             "raise epoch_size or lower them")
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

    def starts(self, epoch: int) -> np.ndarray:
        """Samples of each source's infinite stream used by the epochs before ``epoch``."""
        start = np.array(self._fixed(epoch), np.int64)
        weighted = [i for i, s in enumerate(self.sources) if s.weight is not None]
        if weighted and epoch:
            # weighted counts change only when the fixed counts do (fractional repeats): sum per distinct value
            if all(s.repeat is None for s in self.sources):
                start[weighted] = epoch * self.counts(0)[weighted]
            else:
                start[weighted] = np.sum([self.counts(e)[weighted] for e in range(epoch)], axis=0)
        return start

    def describe(self) -> dict[str, Any]:
        """JSON-friendly identity of the mixture (data fingerprints and specs), for state dicts."""
        return {
            "epoch_size": self.epoch_size,
            "sources": [{"fingerprint": fingerprint(s), **src.spec()} for s, src in zip(self.shard_sizes, self.sources)],
        }


def source_seed(seed: int, source: int) -> int:
    """Seed of source ``source``'s pass orders (source 0 uses ``seed`` itself)."""
    return seed + source * _SOURCE_STRIDE


def selection(shard_sizes: Sequence[int], *, seed: int, start: int, count: int, shuffle: bool = True) -> Stream:
    """Samples ``[start, start + count)`` of a source's infinite stream (pass after pass, shards in a
    per-pass seeded order) as a :class:`~shardkit.plan.Stream` in the source's own sample ids."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    n = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)
    if count <= 0 or n == 0:
        z = np.zeros(0, np.int64)
        return Stream(z, z, z, offsets)
    first, last = start // n, (start + count - 1) // n
    passes = [Stream.full_epoch(sizes, seed=seed, epoch=p, shuffle=shuffle) for p in range(first, last + 1)]
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


def source_epoch(mixture: Mixture, source: int, *, seed: int, epoch: int, shuffle: bool = True) -> Stream:
    """Source ``source``'s samples of ``epoch``, in stream order, as mixture sample ids."""
    local = selection(mixture.shard_sizes[source], seed=source_seed(seed, source), start=int(mixture.starts(epoch)[source]),
                      count=int(mixture.counts(epoch)[source]), shuffle=shuffle)
    return Stream(local.run_shard + mixture.shard_base[source], local.run_start, local.run_stop, mixture.shard_offsets)


# --------------------------------------------------------------------------- labels and keys


class LabelMode(str, enum.Enum):
    """How the sources' class indices become the mixture's."""

    MERGED = "merged"  #: classes merged by name into one sorted union
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
        tables: per source, ``tables[i][label]`` is the mixture label.
    """

    classes: tuple[str, ...]
    tables: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        lens = [len(t) for t in self.tables]
        object.__setattr__(self, "_base", np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if lens else np.zeros(0, np.int64))
        object.__setattr__(self, "_lut", np.concatenate(self.tables).astype(np.int64) if lens else np.zeros(0, np.int64))

    def map(self, sources: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Mixture labels of a batch's ``labels`` from ``sources`` (vectorised)."""
        return self._lut[self._base[np.asarray(sources)] + np.asarray(labels)]


def label_space(class_lists: Sequence[Sequence[str]], mode: "LabelMode | str" = LabelMode.MERGED) -> LabelSpace:
    """Merge the sources' class lists (see :class:`LabelMode`)."""
    mode = LabelMode.parse(mode)
    if mode is LabelMode.MERGED:
        union = sorted(set().union(*map(set, class_lists))) if class_lists else []
        index = {c: i for i, c in enumerate(union)}
        return LabelSpace(tuple(union), tuple(np.array([index[c] for c in cl], np.int64) for cl in class_lists))
    names, tables, base = [], [], 0
    for i, cl in enumerate(class_lists):
        names += [f"{i}/{c}" for c in cl]
        tables.append(np.arange(base, base + len(cl), dtype=np.int64))
        base += len(cl)
    return LabelSpace(tuple(names), tuple(tables))


def qualify_keys(sources: Sequence[int], keys: Sequence[str]) -> list[str]:
    """Keys unique across the mixture: ``"1/00000042"`` is key ``00000042`` of source 1."""
    return [f"{s}/{k}" for s, k in zip(sources, keys)]


# --------------------------------------------------------------------------- resuming with another mixture


def mixture_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two :meth:`Mixture.describe` values, one phrase each (empty: the same)."""
    out = []
    if saved.get("epoch_size") != current.get("epoch_size"):
        out.append(f"epoch_size {saved.get('epoch_size')} -> {current.get('epoch_size')}")
    a, b = saved.get("sources", []), current.get("sources", [])
    if len(a) != len(b):
        out.append(f"{len(a)} sources -> {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.get("fingerprint") != y.get("fingerprint"):
            out.append(f"source {i}: other data (shard sizes differ)")
        for k in ("weight", "repeat", "choose"):
            if x.get(k) != y.get(k):
                out.append(f"source {i}: {k} {x.get(k)} -> {y.get(k)}")
    return out


def check_remix(saved: dict[str, Any], current: dict[str, Any], *, allow_remix: bool = False) -> bool:
    """Whether a state saved with mixture ``saved`` may resume with ``current``; True when they differ.

    Raises:
        ShardkitError: they differ and ``allow_remix`` is False (the message lists every difference).
    """
    diff = mixture_diff(saved, current)
    if diff and not allow_remix:
        raise ShardkitError(f"loader state was saved with another mixture ({'; '.join(diff)}); resume with the same sources, "
                            "or pass allow_remix=True to finish this epoch as saved and switch at the next epoch")
    return bool(diff)
