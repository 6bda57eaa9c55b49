"""Epoch planning: which samples each rank and worker reads, in which order.

Everything here is a pure function of (shard sizes, seed, epoch, topology,
batches already consumed), computed on sample *indices* without touching data.

The model:

1. **Stream.** An epoch is a *stream*: every sample once, as runs of
   consecutive samples inside shards. A fresh epoch is every shard in a
   seeded per-epoch permutation (:meth:`Stream.full_epoch`); after an elastic
   resume it is the samples not yet seen (:func:`remaining_stream`).
2. **Ranks.** The stream is cut into ``world_size`` contiguous, equal ranges
   (:func:`rank_split`). When the length does not divide, the
   :class:`EpochPolicy` decides: ``PAD`` repeats the first few samples of the
   stream (like ``DistributedSampler``), ``DROP`` leaves the last few out.
   ``drop_last`` drops each rank's last partial batch. Every rank therefore has
   the same number of batches, so DDP never waits on a rank that ran dry.
3. **Workers.** Batch ``i`` of a rank is made by DataLoader worker
   ``i % num_workers`` -- the order in which ``DataLoader`` collects results
   from its workers -- and each worker reads one contiguous chunk of the rank's
   range. Fewer shards than ranks x workers is fine: chunks split shards.
4. **Shuffle.** Inside a worker, samples are read sequentially and emitted in
   *blocks*: the first block holds ``shuffle_initial`` samples, later ones
   ``shuffle_buffer``; each block is emitted in a seeded random permutation.
   Memory is one block of raw samples, as with a shuffle buffer, and the state
   after any number of batches is known in O(1), so resuming never re-reads or
   decodes what was consumed.

Resume: after ``k`` batches on every rank, the worker that made batches
``w, w + W, ...`` has emitted ``ceil((k - w) / W)`` of them; :func:`worker_plan`
starts right after them, and rotates worker roles by ``k`` so that the new
DataLoader's worker 0 makes batch ``k``.
Elastic resume (different ``world_size``/``num_workers``) takes the stream
minus everything emitted on every rank (:func:`remaining_stream`) and plans it
again for the new topology.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from shardkit.choices import Choice
from shardkit.plan.position import Position, Segment, fingerprint  # noqa: F401 - part of the plan's API
from shardkit.plan.world import World


class EpochPolicy(Choice):
    """What to do when the samples of an epoch do not divide evenly over ranks."""

    PAD = "pad"  #: repeat the first few samples so every rank gets ceil(N / R)
    DROP = "drop"  #: leave the last few samples out so every rank gets floor(N / R)


#: samples per shuffle block, and at most in the first one (smaller, so that emitting starts sooner):
#: the one place of these defaults (``PlanConfig`` and ``LoaderConfig``)
SHUFFLE_BUFFER = 1024
SHUFFLE_INITIAL = 256


@dataclass(frozen=True)
class PlanConfig:
    """Options that decide the order and split of samples.

    Attributes:
        batch_size: samples per batch.
        seed: seed of every random choice (shard order, block permutations).
        shuffle: shuffle shard order and samples; False reads in manifest order.
        shuffle_buffer: samples per shuffle block (memory: one block of raw samples per worker).
        shuffle_initial: size of the first block (start emitting sooner); 0 means ``shuffle_buffer``.
            Default (None): ``min(SHUFFLE_INITIAL, shuffle_buffer)``.
        drop_last: drop each rank's last partial batch (reported in :class:`RankSplit`);
            implies ``DROP`` for the rank split, since padding a batch that is dropped is pointless.
        policy: how uneven epochs are made even across ranks.
    """

    batch_size: int
    seed: int = 0
    shuffle: bool = True
    shuffle_buffer: int = SHUFFLE_BUFFER
    shuffle_initial: Optional[int] = None
    drop_last: bool = False
    policy: EpochPolicy = EpochPolicy.PAD

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.shuffle_initial is None:
            object.__setattr__(self, "shuffle_initial", min(SHUFFLE_INITIAL, self.shuffle_buffer))
        if self.shuffle_buffer < 1 or self.shuffle_initial < 0:  # type: ignore[operator]
            raise ValueError("shuffle_buffer must be >= 1 and shuffle_initial >= 0")
        object.__setattr__(self, "policy", EpochPolicy.parse(self.policy))


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) & 0xFFFFFFFF for k in key] + [0x5EED])


# --------------------------------------------------------------------------- streams


def shard_offsets(shard_sizes: Sequence[int]) -> np.ndarray:
    """Global id of each shard's first sample (manifest order): ``[0, s0, s0 + s1, ...]`` without the total."""
    sizes = np.asarray(shard_sizes, dtype=np.int64)
    return (np.cumsum(sizes) - sizes).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Stream:
    """An ordered sequence of samples, stored as runs ``[start, stop)`` inside shards.

    ``shard_offsets[s]`` is the global id of the first sample of shard ``s``
    (manifest order); a sample's global id is ``shard_offsets[shard] + index``.
    """

    run_shard: np.ndarray
    run_start: np.ndarray
    run_stop: np.ndarray
    shard_offsets: np.ndarray

    def __post_init__(self) -> None:
        lengths = self.run_stop - self.run_start
        object.__setattr__(self, "_ends", np.cumsum(lengths, dtype=np.int64))

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @classmethod
    def full_epoch(cls, shard_sizes: Sequence[int], *, seed: int, epoch: int, shuffle: bool = True) -> "Stream":
        """Every sample once: shards in a seeded per-epoch order (manifest order if not ``shuffle``)."""
        sizes = np.asarray(shard_sizes, dtype=np.int64)
        offsets = shard_offsets(sizes)
        order = _rng(seed, epoch, 1).permutation(len(sizes)) if shuffle else np.arange(len(sizes))
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
        """Global ids of stream positions ``[start, stop)`` (the mixture planner's tests compare streams by them)."""
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


# --------------------------------------------------------------------------- ranks and workers


@dataclass(frozen=True)
class RankSplit:
    """How a stream of ``num_samples`` is split over ranks.

    Attributes:
        per_rank: samples assigned to each rank before ``drop_last``.
        used: samples each rank yields (``per_rank`` rounded down to whole batches with ``drop_last``).
        num_batches: batches each rank yields (identical on every rank).
        padded: samples repeated to even out ranks (``PAD``).
        dropped: samples left out of this epoch (``DROP`` and ``drop_last``).
    """

    num_samples: int
    world_size: int
    per_rank: int
    used: int
    num_batches: int
    padded: int
    dropped: int


def rank_split(num_samples: int, world_size: int, cfg: PlanConfig) -> RankSplit:
    """Equal per-rank sample and batch counts for a stream of ``num_samples``."""
    if cfg.policy is EpochPolicy.PAD and not cfg.drop_last:  # padding is pointless when batches are dropped anyway
        per_rank = math.ceil(num_samples / world_size) if num_samples else 0
    else:
        per_rank = num_samples // world_size
    used = (per_rank // cfg.batch_size) * cfg.batch_size if cfg.drop_last else per_rank
    padded = max(0, per_rank * world_size - num_samples)
    dropped = num_samples + padded - used * world_size
    return RankSplit(num_samples, world_size, per_rank, used, math.ceil(used / cfg.batch_size), padded, dropped)


def worker_chunks(split: RankSplit, num_workers: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(start, stop)`` of each worker's chunk, relative to the rank's range.

    Worker ``w`` makes batches ``w, w + W, w + 2W, ...`` of the rank; only the
    rank's last batch may be short.
    """
    w = np.arange(num_workers, dtype=np.int64)
    t = split.num_batches
    nb = np.maximum(0, (t - w + num_workers - 1) // num_workers)
    sizes = nb * batch_size
    if t:
        last_worker = (t - 1) % num_workers
        sizes[last_worker] -= t * batch_size - split.used
    stops = np.cumsum(sizes)
    return stops - sizes, stops


def partition_ranges(num_samples: int, world_size: int, num_workers: int, cfg: PlanConfig) -> tuple[np.ndarray, np.ndarray]:
    """Virtual stream ranges ``[start, stop)`` of every (rank, worker), rank-major, vectorised.

    Positions ``>= num_samples`` are padding and wrap around to the start of the stream.
    """
    split = rank_split(num_samples, world_size, cfg)
    ws, we = worker_chunks(split, num_workers, cfg.batch_size)
    base = (np.arange(world_size, dtype=np.int64) * split.per_rank)[:, None]
    return (base + ws[None, :]).ravel(), (base + we[None, :]).ravel()


def batches_emitted(batches_done: int, worker: int, num_workers: int) -> int:
    """Batches worker ``worker`` has produced once the rank consumed ``batches_done``."""
    return max(0, (batches_done - worker + num_workers - 1) // num_workers)


def block_bounds(n: int, cfg: PlanConfig) -> np.ndarray:
    """Start offsets of the shuffle blocks of a chunk of ``n`` samples, plus ``n``."""
    if not cfg.shuffle:
        return np.array([0, n], dtype=np.int64) if n else np.array([0], dtype=np.int64)
    first = cfg.shuffle_initial or cfg.shuffle_buffer
    if n <= first:
        return np.array([0, n], dtype=np.int64) if n else np.array([0], dtype=np.int64)
    return np.concatenate([[0], np.arange(first, n, cfg.shuffle_buffer), [n]]).astype(np.int64)


@dataclass(frozen=True)
class Block:
    """Samples to read in one go (``gids`` in stream order) and the order to emit them.

    ``order`` indexes into ``gids``; when resuming inside a block, ``gids``
    holds only the samples not yet emitted.
    """

    gids: np.ndarray
    order: np.ndarray


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker of one rank does for the rest of the epoch."""

    world: World  #: the worker's role (its DataLoader worker id rotated by the batches already consumed)
    split: RankSplit
    chunk: tuple[int, int]  #: virtual stream range of this worker
    skip: int  #: samples already emitted (resume)
    blocks: tuple[Block, ...]

    @property
    def num_samples(self) -> int:
        """Samples this worker still emits."""
        return sum(len(b.order) for b in self.blocks)

    def emission_order(self) -> np.ndarray:
        """Global ids in the order this worker emits them."""
        if not self.blocks:
            return np.zeros(0, np.int64)
        return np.concatenate([b.gids[b.order] for b in self.blocks])


def block_perm(cfg: PlanConfig, epoch: int, generation: int, world: World, block: int, n: int) -> np.ndarray:
    """Emission order of block ``block`` (``n`` samples) of ``world``'s chunk: a pure function of (seed, epoch, generation, rank, worker, block)."""
    if not cfg.shuffle or n <= 1:
        return np.arange(n, dtype=np.int64)
    return _rng(cfg.seed, epoch, generation, world.rank, world.worker, block, 2).permutation(n).astype(np.int64)


def worker_plan(
    stream: Stream,
    cfg: PlanConfig,
    world: World,
    *,
    epoch: int,
    batches_done: int = 0,
    generation: int = 0,
) -> WorkerPlan:
    """The rest of the epoch for ``world`` after the rank consumed ``batches_done`` batches.

    Args:
        stream: the epoch's stream (same on every rank and worker).
        cfg: plan options.
        world: this rank and worker.
        epoch: epoch number (seeds the block permutations).
        batches_done: batches the rank already consumed (resume); 0 for a fresh start.
        generation: number of elastic re-plans earlier in this epoch (varies the seeds).
    """
    n = len(stream)
    split = rank_split(n, world.world_size, cfg)
    ws, we = worker_chunks(split, world.num_workers, cfg.batch_size)
    # A resumed DataLoader starts collecting at its worker 0, so that worker takes the role
    # of the worker that makes the next batch.
    world = world.with_worker((world.worker + batches_done) % world.num_workers, world.num_workers)
    base = world.rank * split.per_rank
    c0, c1 = base + int(ws[world.worker]), base + int(we[world.worker])
    skip = min(c1 - c0, batches_emitted(batches_done, world.worker, world.num_workers) * cfg.batch_size)
    bounds = block_bounds(c1 - c0, cfg)
    blocks = []
    for b in range(len(bounds) - 1):
        b0, b1 = int(bounds[b]), int(bounds[b + 1])
        if b1 <= skip:
            continue
        perm = block_perm(cfg, epoch, generation, world, b, b1 - b0)
        positions = c0 + b0 + np.arange(b1 - b0, dtype=np.int64)
        if b0 < skip:  # resume inside this block: keep only what was not emitted, in the same order
            rest = perm[skip - b0:]
            keep = np.sort(rest)
            positions = positions[keep]
            perm = np.searchsorted(keep, rest)
        gids = stream.global_ids_at(positions % n) if n else positions
        blocks.append(Block(gids=gids, order=perm))
    return WorkerPlan(world=world, split=split, chunk=(c0, c1), skip=skip, blocks=tuple(blocks))


def _emitted_prefix(skip: np.ndarray, length: np.ndarray, cfg: PlanConfig) -> np.ndarray:
    """Start of the block that emission position ``skip`` falls in, per chunk of ``length`` samples
    (vectorised :func:`block_bounds`): every block before it was emitted whole."""
    first = cfg.shuffle_initial or cfg.shuffle_buffer
    if not cfg.shuffle:
        return np.where(skip >= length, length, 0)
    inner = np.where(skip < first, 0, first + ((skip - first) // cfg.shuffle_buffer) * cfg.shuffle_buffer)
    return np.where(skip >= length, length, np.where(length <= first, 0, inner))


def remaining_stream(
    stream: Stream,
    cfg: PlanConfig,
    world_size: int,
    num_workers: int,
    *,
    epoch: int,
    batches_done: int,
    generation: int = 0,
) -> Stream:
    """The samples of ``stream`` not yet emitted on any rank, in stream order.

    Used for elastic resume: a checkpoint taken after ``batches_done`` batches
    with ``world_size`` x ``num_workers`` readers is re-planned for another
    topology. Samples the old split dropped (``DROP``/``drop_last``) stay
    dropped; a sample seen through padding counts as seen. Vectorised over the
    readers (:func:`partition_ranges`); only a reader stopped inside a shuffle
    block draws that block's permutation.
    """
    n = len(stream)
    if n == 0:
        return stream
    split = rank_split(n, world_size, cfg)
    starts, stops = partition_ranges(n, world_size, num_workers, cfg)
    workers = np.tile(np.arange(num_workers, dtype=np.int64), world_size)
    emitted = np.maximum(0, (batches_done - workers + num_workers - 1) // num_workers) * cfg.batch_size
    length = stops - starts
    skip = np.minimum(length, emitted)
    prefix = _emitted_prefix(skip, length, cfg)
    virtual = split.per_rank * world_size  # positions >= n are padding: they wrap to the start
    marks = np.zeros(virtual + 1, np.int64)  # +1 / -1 at the ends of every wholly emitted range
    np.add.at(marks, starts, 1)
    np.add.at(marks, starts + prefix, -1)
    seen_virtual = np.cumsum(marks[:-1]) > 0
    for i in np.flatnonzero(skip > prefix):  # readers that stopped inside a block: its first emissions
        c0, b0, k = int(starts[i]), int(prefix[i]), int(skip[i])
        bounds = block_bounds(int(length[i]), cfg)
        b = int(np.searchsorted(bounds, b0, side="right")) - 1
        world = World(int(i) // num_workers, world_size, int(workers[i]), num_workers)
        perm = block_perm(cfg, epoch, generation, world, b, int(bounds[b + 1]) - b0)
        seen_virtual[c0 + b0 + perm[: k - b0]] = True
    seen = np.zeros(n, dtype=bool)
    seen[np.flatnonzero(seen_virtual) % n] = True
    assigned = np.zeros(n, dtype=bool)
    rank_starts = np.arange(world_size, dtype=np.int64) * split.per_rank
    used = (rank_starts[:, None] + np.arange(split.used, dtype=np.int64)[None, :]).ravel() % n
    assigned[used] = True
    keep = np.flatnonzero(assigned & ~seen)
    return Stream.from_global_ids(stream.global_ids_at(keep), stream.shard_offsets)


# --------------------------------------------------------------------------- resumable position


def epoch_stream(shard_sizes: Sequence[int], cfg: PlanConfig, epoch: int, history: Sequence[Segment]) -> Stream:
    """The stream still to read in ``epoch`` after the finished segments in ``history``."""
    stream = Stream.full_epoch(shard_sizes, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle)
    for gen, seg in enumerate(history):
        stream = remaining_stream(stream, cfg, seg.world_size, seg.num_workers, epoch=epoch, batches_done=seg.batches_done, generation=gen)
    return stream
