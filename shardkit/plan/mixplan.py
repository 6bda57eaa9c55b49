"""Planning a mixed epoch: interleave the sources, split over ranks x workers, resume.

Pure functions of (mixture, plan options, seed, epoch, topology, batches done), on
sample indices only. They mirror :mod:`shardkit.plan.epoch` and reuse its rank split,
worker chunks, shuffle blocks and block permutations, so for one source every
:class:`~shardkit.plan.epoch.Block` is exactly the single-dataset plan's.

1. **Interleave.** Epoch ``e`` holds ``c_i`` samples of source ``i``
   (:meth:`shardkit.plan.Mixture.counts`), each source's in its stream order.
   Mixed position order is the Sainte-Lague (Webster) merge: source ``i``'s
   ``k``-th sample has key ``(k + 1/2) / c_i``; keys ascending, ties to the lower
   source. Keys compare exactly in integers, and the position of any sample, or the
   samples of any window, cost O(sources) each (:func:`window`) -- nothing is
   materialised per epoch. Each source's samples are spread evenly: any window of
   ``L`` consecutive positions (wrapping around at the end) holds, of source ``i``,
   ``L * c_i / N`` samples at most ``1 + (S - 2) * c_i / N`` off, with ``S`` sources
   of ``N`` samples in all (in any window, source ``i`` is at most 1 off the interval's
   share; summing over sources gives the rest). Two sources: the floor or the ceiling
   of ``L * c_i / N`` (the merge is a mechanical word, hence balanced).
2. **Split.** The mixed stream of ``N`` positions is split like one dataset's
   (:func:`shardkit.plan.epoch.rank_split`, :func:`shardkit.plan.epoch.worker_chunks`): every
   rank the same batches, ``PAD`` repeats the first positions, ``DROP`` leaves the
   last out; each worker reads one contiguous chunk, which is a contiguous run of
   every source's stream, so reads stay sequential inside shards.
3. **Shuffle within source.** A worker emits its chunk in shuffle blocks, as for one
   dataset, but the block's permutation keeps the source pattern of the stream: slot
   ``t`` of the block emits a sample of the source at stream position ``t``, drawn in
   the block permutation's order (:func:`by_source`). So every emitted batch -- a
   window of the stream -- keeps the interleave's shares (stratified batches). A
   block's ids are grouped by source, each in stream order, so the reader opens each
   source's shards in turn instead of switching per sample.
4. **Resume.** Same topology: ``batches_done`` skips whole blocks and the emitted part
   of one block, as in :func:`shardkit.plan.epoch.worker_plan` (O(1) in consumed batches).
   Elastic: :func:`remaining` keeps the positions not yet emitted on any rank, in
   stream order (an :class:`Explicit` stream), and plans them for the new topology.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, Sequence

import numpy as np

from shardkit.plan.epoch import (
    Block,
    PlanConfig,
    Segment,
    Stream,
    WorkerPlan,
    batches_emitted,
    block_bounds,
    block_perm,
    partition_ranges,
    rank_split,
    worker_chunks,
)
from shardkit.plan.interleave import window
from shardkit.plan.mixture import Mixture, source_epochs
from shardkit.plan.world import World


class MixedStream(Protocol):
    """The samples of (the rest of) a mixed epoch, in stream order."""

    #: some source is seen more than once in the epoch (then no batch is let hold a sample twice)
    repeats: bool
    #: the stream mixes sources (then unshuffled chunks are cut in blocks too, see :func:`_blocked`)
    mixed: bool

    def __len__(self) -> int: ...

    def window(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, mixture sample id)`` of stream positions ``[a, b)``."""
        ...


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
        src, k = window(self.counts, a, b)
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


def mixed_epoch(mixture: Mixture, *, seed: int, epoch: int, shuffle: bool = True) -> MixedEpoch:
    """Epoch ``epoch`` of ``mixture`` (same on every rank and worker)."""
    streams = source_epochs(mixture, seed=seed, epoch=epoch, shuffle=shuffle)
    counts = mixture.counts(epoch)
    return MixedEpoch(counts, streams, repeats=bool(np.any(counts > mixture.sizes)), mixed=len(counts) > 1)


def _virtual(stream: MixedStream, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray]:
    """``window`` of virtual positions ``[c0, c1)``; positions past the end wrap to the start (padding)."""
    n = len(stream)
    if n == 0 or c1 <= c0:
        z = np.zeros(0, np.int64)
        return z, z
    parts = []
    p = c0
    while p < c1:
        a = p % n
        b = min(n, a + (c1 - p))
        parts.append(stream.window(a, b))
        p += b - a
    return np.concatenate([s for s, _ in parts]), np.concatenate([g for _, g in parts])


def by_source(perm: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """A block's emission order: slot ``t`` emits a sample of ``sources[t]``'s source, the
    samples of each source taken in ``perm``'s order (with one source: ``perm`` itself)."""
    if len(sources) == 0 or sources.min() == sources.max():
        return perm
    slots = np.argsort(sources, kind="stable")
    order = np.empty_like(perm)
    order[slots] = perm[np.argsort(sources[perm], kind="stable")]
    return order


def spread_repeats(order: np.ndarray, gids: np.ndarray, sources: np.ndarray, start: int, batch_size: int) -> np.ndarray:
    """``order`` with a sample that would appear twice in one batch swapped with a sample of the
    same source from another batch of the block (the first one, in slot order after it, that
    repeats nothing in either batch). ``gids`` and ``sources`` are the block's in stream order;
    slot ``t`` belongs to batch ``(start + t) // batch_size``. Without a fitting sample (a source
    with fewer distinct samples in the block than its slots in one batch) the repeat stays; the
    search tries at most ``4 * len(order)`` candidates per block (deterministic, so every plan of
    the block agrees), which bounds its cost when a tiny source fills the batches."""
    emitted = gids[order]
    batch = (start + np.arange(len(order))) // batch_size
    idx = np.lexsort((emitted, batch))
    dup = (batch[idx][1:] == batch[idx][:-1]) & (emitted[idx][1:] == emitted[idx][:-1])
    if not dup.any():
        return order
    order, emitted = order.copy(), emitted.copy()

    def in_batch(t: int) -> np.ndarray:  # the emitted ids of slot t's batch
        x = int(batch[t])
        return emitted[max(0, x * batch_size - start) : max(0, (x + 1) * batch_size - start)]

    budget = 4 * len(order)
    for t in idx[1:][dup].tolist():
        if np.count_nonzero(in_batch(t) == emitted[t]) < 2:
            continue  # fixed by an earlier swap
        same = np.flatnonzero(sources == sources[t])
        for u in np.roll(same, -int(np.searchsorted(same, t))).tolist():
            budget -= 1
            if budget < 0:
                return order
            if batch[u] != batch[t] and not np.any(in_batch(t) == emitted[u]) and not np.any(in_batch(u) == emitted[t]):
                order[t], order[u] = order[u], order[t]
                emitted[t], emitted[u] = emitted[u], emitted[t]
                break
    return order


def _block_order(stream: MixedStream, cfg: PlanConfig, epoch: int, generation: int, world: World, block: int, src: np.ndarray,
                 gids: np.ndarray, start: int) -> np.ndarray:
    """Emission order of a block whose stream-order sources and ids are ``src``, ``gids``, at chunk offset ``start``."""
    order = by_source(block_perm(cfg, epoch, generation, world, block, len(src)), src)
    return spread_repeats(order, gids, src, start, cfg.batch_size) if stream.repeats else order


def _blocked(stream: MixedStream, cfg: PlanConfig) -> PlanConfig:
    """The options whose shuffle blocks cut a chunk. Unshuffled, one dataset's chunk is one block
    that the reader takes a batch at a time (its order is the identity); a mixed block's ids are
    grouped by source, so it is read whole: unshuffled mixed chunks are cut like shuffled ones
    (blocks of ``shuffle_buffer``, emitted in stream order), to hold one block of bytes, not a chunk."""
    return replace(cfg, shuffle=True) if stream.mixed and not cfg.shuffle else cfg


def _chunk(stream_len: int, cfg: PlanConfig, world: World, batches_done: int) -> tuple[World, int, int, int, np.ndarray]:
    """(role, chunk start, chunk stop, samples emitted, block bounds) of ``world`` after ``batches_done``."""
    split = rank_split(stream_len, world.world_size, cfg)
    ws, we = worker_chunks(split, world.num_workers, cfg.batch_size)
    c0 = world.rank * split.per_rank + int(ws[world.worker])
    c1 = world.rank * split.per_rank + int(we[world.worker])
    skip = min(c1 - c0, batches_emitted(batches_done, world.worker, world.num_workers) * cfg.batch_size)
    return world, c0, c1, skip, block_bounds(c1 - c0, cfg)


def worker_plan(stream: MixedStream, cfg: PlanConfig, world: World, *, epoch: int, batches_done: int = 0, generation: int = 0) -> WorkerPlan:
    """The rest of the mixed epoch for ``world`` after the rank consumed ``batches_done`` batches
    (arguments as :func:`shardkit.plan.epoch.worker_plan`). Blocks hold mixture sample ids."""
    n = len(stream)
    # a resumed DataLoader starts collecting at its worker 0: it takes the role of the worker of the next batch
    world = world.with_worker((world.worker + batches_done) % world.num_workers, world.num_workers)
    world, c0, c1, skip, bounds = _chunk(n, _blocked(stream, cfg), world, batches_done)
    first = int(np.searchsorted(bounds, skip, side="right")) - 1 if c1 > c0 else len(bounds) - 1
    off = int(bounds[first])
    src, gids = _virtual(stream, c0 + off, c1)
    blocks = []
    for b in range(first, len(bounds) - 1):
        b0, b1 = int(bounds[b]), int(bounds[b + 1])
        if b1 <= skip:
            continue
        s, g = src[b0 - off : b1 - off], gids[b0 - off : b1 - off]
        order = _block_order(stream, cfg, epoch, generation, world, b, s, g, b0)
        if b0 < skip:  # resume inside this block: keep only what was not emitted, in the same order
            rest = order[skip - b0 :]
            keep = np.sort(rest)
            s, g, order = s[keep], g[keep], np.searchsorted(keep, rest)
        group = np.argsort(s, kind="stable")  # read each source's run in turn
        inv = np.empty_like(group)
        inv[group] = np.arange(len(group))
        blocks.append(Block(gids=g[group], order=inv[order]))
    return WorkerPlan(world=world, split=rank_split(n, world.world_size, cfg), chunk=(c0, c1), skip=skip, blocks=tuple(blocks))


def _covered(n: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Which of ``n`` stream positions the virtual ranges ``[starts, stops)`` cover (past ``n``: wrapped)."""
    size = max(n, int(stops.max()) if len(stops) else 0)
    diff = np.zeros(size + 1, np.int64)
    np.add.at(diff, starts, 1)
    np.add.at(diff, stops, -1)
    cov = np.cumsum(diff[:-1]) > 0
    out = cov[:n].copy()
    for a in range(n, size, n):  # padding: positions past the end are the stream's first ones again
        out[: min(n, size - a)] |= cov[a : a + n]
    return out


def _whole_blocks(length: np.ndarray, skip: np.ndarray, cfg: PlanConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk of ``length`` with ``skip`` samples emitted: (samples in whole blocks before ``skip``,
    index of the block holding ``skip``, that block's end) -- :func:`shardkit.plan.epoch.block_bounds`, vectorised."""
    if not cfg.shuffle:
        return np.where(skip >= length, length, 0), np.zeros_like(skip), length
    first, buf = cfg.shuffle_initial or cfg.shuffle_buffer, cfg.shuffle_buffer
    later = skip >= first
    whole = np.where(later, first + (skip - first) // buf * buf, 0)
    whole = np.where(skip >= length, length, np.where(length <= first, 0, whole))
    block = np.where(whole == 0, 0, 1 + (whole - first) // buf)
    end = np.minimum(length, np.where(block == 0, first, whole + buf))
    return whole, block, end


def remaining(stream: MixedStream, cfg: PlanConfig, world_size: int, num_workers: int, *, epoch: int, batches_done: int,
              generation: int = 0) -> Explicit:
    """The samples of ``stream`` not yet emitted on any rank, in stream order (elastic resume).

    As :func:`shardkit.plan.epoch.remaining_stream`: samples the old split dropped stay dropped; a
    sample seen through padding counts as seen. Whole blocks are ranges (one pass over the
    epoch); only each reader's partly emitted block is planned again.
    """
    n = len(stream)
    listed = Explicit(*stream.window(0, n), repeats=stream.repeats, mixed=stream.mixed)  # materialised once: the partial blocks are slices of it
    if n == 0:
        return listed
    split = rank_split(n, world_size, cfg)
    rank0 = np.arange(world_size, dtype=np.int64) * split.per_rank
    assigned = _covered(n, rank0, rank0 + split.used)
    starts, stops = partition_ranges(n, world_size, num_workers, cfg)
    roles = np.tile(np.arange(num_workers, dtype=np.int64), world_size)
    done = np.maximum(0, (batches_done - roles + num_workers - 1) // num_workers)  # batches each reader emitted
    skip = np.minimum(stops - starts, done * cfg.batch_size)
    whole, block, end = _whole_blocks(stops - starts, skip, _blocked(stream, cfg))
    seen = _covered(n, starts, starts + whole)
    for i in np.flatnonzero(whole < skip).tolist():  # the block each reader was emitting
        c0, b0 = int(starts[i]), int(whole[i])
        src, gids = _virtual(listed, c0 + b0, c0 + int(end[i]))
        world = World(i // num_workers, world_size, i % num_workers, num_workers)
        order = _block_order(listed, cfg, epoch, generation, world, int(block[i]), src, gids, b0)
        seen[(c0 + b0 + order[: int(skip[i]) - b0]) % n] = True
    keep = np.flatnonzero(assigned & ~seen)
    return Explicit(listed.sources[keep], listed.gids[keep], repeats=stream.repeats, mixed=stream.mixed)


def epoch_stream(mixture: Mixture, cfg: PlanConfig, epoch: int, history: Sequence[Segment] = ()) -> MixedStream:
    """The mixed stream still to read in ``epoch`` after the finished segments in ``history``."""
    stream: MixedStream = mixed_epoch(mixture, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle)
    for gen, seg in enumerate(history):
        stream = remaining(stream, cfg, seg.world_size, seg.num_workers, epoch=epoch, batches_done=seg.batches_done, generation=gen)
    return stream
