"""What every reading process of a cluster asks the store for in one epoch, in order: a pure function of the plan.

The samples come from the real planner (:func:`shardkit.plan.epoch_stream`, :func:`shardkit.plan.partition_ranges`,
:func:`shardkit.plan.block_bounds`: one source, a fresh epoch), the byte ranges from
:mod:`shardkit.loader.read.ranges` (what :class:`~shardkit.loader.read.blocks.BlockReader` sends). A worker reads
its chunk block by block (a shuffled block at once; unshuffled, a batch at a time), each block's samples of one
shard together; a shard it opens costs no request of its own (the manifest gives its size: no ``HEAD``) but,
with a sample index, first the index (one ``GET``, kept for the worker's next shards; with a node cache, one per
node: the others read it from the cache). With a node cache the first process of a node that opens a shard
downloads it; the node's other processes that open it in the same epoch wait for that download or find it done
(counted as ``cache_waits``) and send nothing. The only reads the model does not know
are a sample's bytes: every sample of a shard has the shard's bytes / samples (uniform; the test datasets
make every sample the same size, so there it is exact).

Everything is arrays: one entry per request (``proc``: reading process, rank-major; ``read``: the worker's read
it belongs to, global; ``kind``; ``shard``; bytes ``[lo, hi)``) and per read (its process, its first emitted
sample within the worker's chunk). A read served wholly from the node cache is one :data:`NOOP` entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from shardkit.format.prefixes import prefix_of, spread_name
from shardkit.loader.read import ranges
from shardkit.plan import Mixture, PlanConfig, Source, block_bounds, epoch_stream, partition_ranges

#: request kinds
HEAD, INDEX, GET, NOOP = 0, 1, 2, 3
KINDS = ("HEAD", "GET index", "GET", "none")
#: bytes of a sample index per sample (the sidecar holds about 40, plus its header)
INDEX_BYTES_PER_SAMPLE = 40
#: sample indexes a reader keeps (:attr:`shardkit.loader.read.blocks.BlockReader.KEEP_INDEXES`)
KEEP_INDEXES = 4


@dataclass(frozen=True, eq=False)
class Dataset:
    """What the simulator knows of a dataset: its manifest's shard names, samples and bytes.

    Attributes:
        names: shard names (``<prefix>/<split>-000000.tar`` when spread over prefixes).
        samples: samples per shard.
        nbytes: bytes per shard.
        indexed: the shards have sample indexes (``shardkit convert`` writes them).
        layout: every sample's member layout (None: :meth:`SampleLayout.synthetic
            <shardkit.loader.read.ranges.SampleLayout.synthetic>` of the shard's bytes / samples).
        sample_bytes: bytes of one sample per shard (None: the shard's bytes // samples).
    """

    names: tuple[str, ...]
    samples: np.ndarray
    nbytes: np.ndarray
    indexed: bool = True
    layout: Optional[ranges.SampleLayout] = None
    sample_bytes: Optional[np.ndarray] = None
    prefixes: tuple[str, ...] = field(init=False)
    shard_prefix: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", np.asarray(self.samples, np.int64))
        object.__setattr__(self, "nbytes", np.asarray(self.nbytes, np.int64))
        if self.sample_bytes is None:
            object.__setattr__(self, "sample_bytes", self.nbytes // np.maximum(1, self.samples))
        names = sorted({prefix_of(n) for n in self.names})
        object.__setattr__(self, "prefixes", tuple(names))
        pos = {p: i for i, p in enumerate(names)}
        object.__setattr__(self, "shard_prefix", np.array([pos[prefix_of(n)] for n in self.names], np.int64))

    @classmethod
    def synthetic(
        cls, shards: int, samples_per_shard: int, bytes_per_sample: int, *, prefixes: int = 1, indexed: bool = True
    ) -> "Dataset":
        """``shards`` shards of ``samples_per_shard`` samples of ``bytes_per_sample`` bytes, named as
        ``shardkit convert --prefixes`` names them."""
        if min(shards, samples_per_shard, bytes_per_sample) < 1:
            raise ValueError("--shards, --samples-per-shard and --bytes-per-sample must be >= 1")
        names = tuple(spread_name(f"train-{j:06d}.tar", j, prefixes) for j in range(shards))
        layout = ranges.SampleLayout.synthetic(bytes_per_sample)
        n = np.full(shards, samples_per_shard, np.int64)
        return cls(names, n, n * layout.size + 1024, indexed, layout, np.full(shards, layout.size, np.int64))

    @classmethod
    def of_manifest(cls, manifest: object) -> "Dataset":
        """The shards of a loaded :class:`~shardkit.format.manifest.Manifest`."""
        from shardkit.format.index import INDEX_FORMAT

        shards = manifest.shards  # type: ignore[attr-defined]
        return cls(
            tuple(s.name for s in shards),
            np.array([s.samples for s in shards], np.int64),
            np.array([s.bytes for s in shards], np.int64),
            manifest.sample_index == INDEX_FORMAT,  # type: ignore[attr-defined]
        )

    def layout_of(self, shard: int) -> ranges.SampleLayout:
        assert self.sample_bytes is not None
        return self.layout or ranges.SampleLayout.synthetic(int(self.sample_bytes[shard]))


@dataclass(frozen=True, eq=False)
class EpochSchedule:
    """The requests of one epoch, per reading process in order (see the module docstring)."""

    processes: int
    proc: np.ndarray
    read: np.ndarray
    kind: np.ndarray
    shard: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    read_proc: np.ndarray  #: the process of each read
    read_start: np.ndarray  #: first sample of each read, within its worker's chunk (emission position)
    chunk_len: np.ndarray  #: samples of each process's chunk
    opens: int = 0  #: shards opened (a worker's first read of a shard)
    cache_hits: int = 0  #: of those, served by the node cache
    #: of those, shards another process of the node downloaded in this epoch (it waited for it, or found it done)
    cache_waits: int = 0

    def requests_of(self, p: int) -> list[tuple[str, int, int, int]]:
        """Process ``p``'s requests: ``(kind, shard, lo, hi)`` in order (NOOP entries left out)."""
        sel = np.flatnonzero((self.proc == p) & (self.kind != NOOP))
        return [(KINDS[int(self.kind[i])], int(self.shard[i]), int(self.lo[i]), int(self.hi[i])) for i in sel]


def read_cuts(lengths: np.ndarray, cfg: PlanConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(process, offset)`` of every read of chunks of ``lengths``: the plan's shuffle blocks
    (:func:`shardkit.plan.block_bounds`), or a batch at a time when not shuffled (the read stage's pieces)."""
    offs = [
        block_bounds(n, cfg)[:-1] if cfg.shuffle else np.arange(0, n, cfg.batch_size, dtype=np.int64)
        for n in lengths.tolist()
    ]
    counts = np.array([len(b) for b in offs], np.int64)
    procs = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    return procs, (np.concatenate(offs).astype(np.int64) if offs else np.zeros(0, np.int64))


@dataclass(frozen=True, eq=False)
class _Segments:
    """An epoch's samples cut where a read, a process's chunk or a run of one shard begins: each segment is
    ``length`` consecutive samples of one shard from sample ``first`` on, in one read of one process."""

    read_proc: np.ndarray  #: the process of each read
    read_off: np.ndarray  #: first sample of each read, within its process's chunk
    chunk_len: np.ndarray  #: samples of each process's chunk
    proc: np.ndarray
    read: np.ndarray
    shard: np.ndarray
    first: np.ndarray
    length: np.ndarray


def _segments(
    data: Dataset, cfg: PlanConfig, *, world_size: int, workers: int, epoch: int, ranks_per_node: int
) -> _Segments:
    """The real plan's samples of ``epoch`` (one source), every process's chunk cut into its reads and shard runs."""
    mixture = Mixture((Source("simulated"),), (data.samples,))
    stream = epoch_stream(mixture, cfg, epoch, world_size=world_size, nodes=world_size // max(1, ranks_per_node))
    runs = stream.streams[0]  # type: ignore[attr-defined]  # one source: its runs in stream order
    n = len(stream)
    starts, stops = partition_ranges(n, world_size, workers, cfg)
    lengths = stops - starts
    read_proc, read_off = read_cuts(lengths, cfg)
    read_abs = starts[read_proc] + read_off
    run_len = runs.run_stop - runs.run_start
    ends = np.cumsum(run_len)
    wraps = int(stops.max()) // max(1, n) + 1 if n else 0
    run_cuts = (ends[None, :] - run_len[None, :] + (np.arange(wraps) * n)[:, None]).ravel()
    cuts = np.unique(np.concatenate([read_abs, starts, stops, run_cuts]))
    seg0, seg1 = cuts[:-1], cuts[1:]
    owner = np.searchsorted(starts, seg0, side="right") - 1
    keep = (owner >= 0) & (seg0 < stops[np.maximum(owner, 0)]) & (seg1 > seg0)
    seg0, seg1, owner = seg0[keep], seg1[keep], owner[keep]
    seg_read = np.searchsorted(read_abs, seg0, side="right") - 1
    pos = seg0 % max(1, n)
    run = np.searchsorted(ends, pos, side="right")
    seg_shard = runs.run_shard[run]
    seg_first = runs.run_start[run] + pos - (ends[run] - run_len[run])
    return _Segments(read_proc, read_off, lengths, owner, seg_read, seg_shard, seg_first, seg1 - seg0)


class _Requests:
    """The requests of one epoch, built segment by segment in process order.

    Holds what a reading process remembers between segments (its open shard, its walk through that shard, the
    sample indexes it keeps, whether the node cache serves the shard) and what the nodes share (their caches).
    """

    def __init__(
        self,
        data: Dataset,
        *,
        workers: int,
        ranks_per_node: int,
        indexed: bool,
        block_size: int,
        max_range: int,
        cache: Optional[Sequence[set[int]]],
        index_cache: Optional[Sequence[set[int]]],
    ) -> None:
        self.data, self.workers, self.ranks_per_node, self.indexed = data, workers, ranks_per_node, indexed
        self.block_size, self.max_range, self.cache, self.index_cache = block_size, max_range, cache, index_cache
        self.proc: list[int] = []
        self.read: list[int] = []
        self.kind: list[int] = []
        self.shard: list[int] = []
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.memo: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.opens = self.hits = self.waits = 0
        self.fetched: dict[tuple[int, int], int] = {}  # (node, shard) -> the process that downloaded it this epoch
        self.last_p, self.last_shard, self.last_read = -1, -1, -1
        self.walk: Optional[ranges.WalkState] = None
        self.indexes: list[int] = []
        self.cached = False

    def add(self, p: int, r: int, k: int, s: int, lo: int, hi: int) -> None:
        """One request: process ``p``, read ``r``, kind ``k``, shard ``s``, bytes ``[lo, hi)``."""
        self.proc.append(p)
        self.read.append(r)
        self.kind.append(k)
        self.shard.append(s)
        self.lo.append(lo)
        self.hi.append(hi)

    def segment(self, p: int, r: int, s: int, a: int, m: int) -> None:
        """The requests for ``m`` samples of shard ``s`` from sample ``a`` on, in read ``r`` of process ``p``."""
        if p != self.last_p:
            self.last_p, self.last_shard, self.walk, self.indexes = p, -1, None, []
        node = (p // self.workers) // max(1, self.ranks_per_node)
        fresh = s != self.last_shard or (not self.indexed and self.walk is not None and a < self.walk.sample)
        before = len(self.proc)
        if fresh:
            self.open(p, r, s, node)
            self.walk = None
        if not self.cached:
            self.read_samples(p, r, s, a, m)
        if r != self.last_read and len(self.proc) == before:
            self.add(p, r, NOOP, s, 0, 0)  # a read without requests still happens (served from the cache)
        self.last_shard, self.last_read = s, r

    def open(self, p: int, r: int, s: int, node: int) -> None:
        """Process ``p`` opens shard ``s``: its sample index (unless kept or in the node's cache), then the node
        cache's hit or download."""
        self.opens += 1
        indexed, cache, index_cache = self.indexed, self.cache, self.index_cache
        if indexed and s not in self.indexes:
            if index_cache is None or s not in index_cache[node]:
                self.add(p, r, INDEX, s, 0, 64 + INDEX_BYTES_PER_SAMPLE * int(self.data.samples[s]))
                if index_cache is not None:
                    index_cache[node].add(s)
            self.indexes = [*self.indexes[-(KEEP_INDEXES - 1) :], s] if KEEP_INDEXES > 1 else [s]
        elif indexed:
            self.indexes = [*(i for i in self.indexes if i != s), s]
        self.cached = cache is not None and s in cache[node]
        if self.cached:
            self.hits += 1
            if self.fetched.get((node, s), p) != p:
                self.waits += 1
        elif cache is not None:
            for lo, hi in ranges.download_gets(int(self.data.nbytes[s]), block_size=self.block_size):
                self.add(p, r, GET, s, lo, hi)
            cache[node].add(s)
            self.fetched[(node, s)] = p
            self.cached = True

    def read_samples(self, p: int, r: int, s: int, a: int, m: int) -> None:
        """The GETs of ``m`` samples of shard ``s`` from sample ``a`` on: range reads through the sample index, or
        the buffered walk over the members' headers."""
        sb = self.data.sample_bytes
        assert sb is not None
        sbytes = int(sb[s])
        if self.indexed:
            key = (m, sbytes)
            if key not in self.memo:
                st = np.arange(m + 1, dtype=np.int64) * sbytes
                self.memo[key] = ranges.index_ranges(st, np.arange(m), max_range=self.max_range)
            for lo, hi in self.memo[key]:
                self.add(p, r, GET, s, a * sbytes + lo, a * sbytes + hi)
        else:
            gets, self.walk = ranges.walk_gets(
                self.data.layout_of(s),
                first=a,
                stop=a + m,
                block_size=self.block_size,
                shard_size=int(self.data.nbytes[s]),
                state=self.walk,
            )
            for lo, hi in gets:
                self.add(p, r, GET, s, lo, hi)

    def schedule(self, seg: _Segments, processes: int) -> EpochSchedule:
        """The requests as an :class:`EpochSchedule` of ``processes`` reading processes."""
        return EpochSchedule(
            processes=processes,
            proc=np.array(self.proc, np.int64),
            read=np.array(self.read, np.int64),
            kind=np.array(self.kind, np.int8),
            shard=np.array(self.shard, np.int64),
            lo=np.array(self.lo, np.int64),
            hi=np.array(self.hi, np.int64),
            read_proc=seg.read_proc,
            read_start=seg.read_off,
            chunk_len=seg.chunk_len,
            opens=self.opens,
            cache_hits=self.hits,
            cache_waits=self.waits,
        )


def epoch_schedule(
    data: Dataset,
    cfg: PlanConfig,
    *,
    world_size: int,
    num_workers: int,
    epoch: int,
    block_size: int,
    index: bool = True,
    max_range: int = ranges.MAX_RANGE_BYTES,
    cache: Optional[Sequence[set[int]]] = None,
    ranks_per_node: int = 1,
    index_cache: Optional[Sequence[set[int]]] = None,
) -> EpochSchedule:
    """Every request of ``epoch`` (see the module docstring).

    Args:
        data: the dataset.
        cfg: plan options (batch size, seed, shuffle blocks).
        world_size, num_workers: ranks, DataLoader workers per rank (0: the rank reads itself).
        block_size: the buffered reader's size (header walk, cache download).
        index: read through the sample index when the dataset has one.
        max_range: largest range read through the index.
        cache: per node, the shards its cache holds (updated in place); None: no cache.
        ranks_per_node: ranks sharing one node's cache.
        index_cache: per node, the shards whose sample index its cache holds (updated in place); None: each
            process fetches the indexes it needs (no cache).
    """
    workers = max(1, num_workers)
    seg = _segments(data, cfg, world_size=world_size, workers=workers, epoch=epoch, ranks_per_node=ranks_per_node)
    requests = _Requests(
        data,
        workers=workers,
        ranks_per_node=ranks_per_node,
        indexed=index and data.indexed,
        block_size=block_size,
        max_range=max_range,
        cache=cache,
        index_cache=index_cache,
    )
    for p, r, s, a, m in zip(
        seg.proc.tolist(), seg.read.tolist(), seg.shard.tolist(), seg.first.tolist(), seg.length.tolist()
    ):
        requests.segment(p, r, s, a, m)
    # reads with no segment at all (never: every read has samples) would have no entry; the clock needs one each
    return requests.schedule(seg, world_size * workers)
