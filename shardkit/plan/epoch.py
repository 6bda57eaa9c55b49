"""The epoch plan: which samples each rank and worker reads, in which order -- one planner for every loader.

Pure functions of (mixture, plan options, seed, epoch, topology, batches done), on sample
indices only. A single dataset is the one-source mixture (a plain
:class:`~shardkit.plan.stream.Stream` is a one-source stream), so this is the only planner.

1. **Interleave.** Epoch ``e`` holds ``c_i`` samples of source ``i``
   (:meth:`shardkit.plan.Mixture.counts`), each source's in its stream order; one source's
   epoch is every sample once, its shards in a seeded per-epoch order. Mixed position order is
   the Sainte-Lague (Webster) merge (:mod:`shardkit.plan.interleave`): source ``i``'s ``k``-th
   sample has key ``(k + 1/2) / c_i``; keys ascending, ties to the lower source. Nothing is
   materialised per epoch. Each source's samples are spread evenly: any window of ``L``
   consecutive positions (wrapping around at the end) holds, of source ``i``, ``L * c_i / N``
   samples at most ``1 + (S - 2) * c_i / N`` off, with ``S`` sources of ``N`` samples in all.
   Two sources: the floor or the ceiling of ``L * c_i / N``.
2. **Split.** The stream of ``N`` positions is cut over ranks and workers
   (:mod:`shardkit.plan.split`): every rank the same batches, ``PAD`` repeats the first
   positions, ``DROP`` leaves the last out; each worker reads one contiguous chunk, which is a
   contiguous run of every source's stream, so reads stay sequential inside shards.
3. **Shuffle within source.** A worker emits its chunk in shuffle blocks
   (:mod:`shardkit.plan.blocks`); a mixed block's permutation keeps the source pattern of the
   stream, so every emitted batch keeps the interleave's shares (stratified batches). A block's
   ids are grouped by source, each in stream order, so the reader opens each source's shards in
   turn instead of switching per sample.
4. **Resume.** After ``k`` batches on every rank, the worker that made batches ``w, w + W, ...``
   has emitted ``ceil((k - w) / W)`` of them; :func:`worker_plan` starts right after them (whole
   blocks and the emitted part of one block are skipped, O(1) in consumed batches) and rotates
   worker roles by ``k`` so that the new DataLoader's worker 0 makes batch ``k``. Elastic resume
   (another ``world_size``/``num_workers``): :func:`remaining` keeps the positions not yet emitted
   on any rank, in stream order (an :class:`~shardkit.plan.stream.Explicit` stream), and plans
   them for the new topology (:func:`replanned`, :func:`epoch_stream`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from shardkit.plan.blocks import Block, WorkerPlan, block_bounds, block_perm, by_source, spread_repeats, whole_blocks
from shardkit.plan.mixture import Mixture, source_epochs
from shardkit.plan.ordering import EpochPolicy, PlanConfig
from shardkit.plan.position import Segment
from shardkit.plan.split import RankSplit, batches_emitted, covered, partition_ranges, rank_split, worker_chunks
from shardkit.plan.stream import Explicit, MixedEpoch, MixedStream, Stream, shard_offsets
from shardkit.plan.world import World

__all__ = [  # the planner, and what its callers name with it (imported from here by older code)
    "Block",
    "EpochPolicy",
    "Explicit",
    "MixedEpoch",
    "MixedStream",
    "PlanConfig",
    "RankSplit",
    "Segment",
    "Stream",
    "WorkerPlan",
    "epoch_stream",
    "mixed_epoch",
    "partition_ranges",
    "rank_split",
    "remaining",
    "replanned",
    "shard_offsets",
    "worker_plan",
]


def mixed_epoch(
    mixture: Mixture, *, seed: int, epoch: int, shuffle: bool = True, nodes: int = 1, per_node: int = 0
) -> MixedEpoch:
    """Epoch ``epoch`` of ``mixture`` (same on every rank and worker); ``nodes > 1``: node affinity, node ``n``
    reading positions ``[n * per_node, (n + 1) * per_node)`` (:func:`~shardkit.plan.mixture.source_epochs`)."""
    streams = source_epochs(mixture, seed=seed, epoch=epoch, shuffle=shuffle, nodes=nodes, per_node=per_node)
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


def _block_order(
    stream: MixedStream,
    cfg: PlanConfig,
    epoch: int,
    generation: int,
    world: World,
    block: int,
    src: np.ndarray,
    gids: np.ndarray,
    start: int,
) -> np.ndarray:
    """Emission order of a block whose stream-order sources and ids are ``src``, ``gids``, at chunk offset ``start``."""
    order = by_source(block_perm(cfg, epoch, generation, world, block, len(src)), src)
    return spread_repeats(order, gids, src, start, cfg.batch_size) if stream.repeats else order


def _blocked(stream: MixedStream, cfg: PlanConfig) -> PlanConfig:
    """The options whose shuffle blocks cut a chunk. Unshuffled, one source's chunk is one block
    that the reader takes a batch at a time (its order is the identity); a mixed block's ids are
    grouped by source, so it is read whole: unshuffled mixed chunks are cut like shuffled ones
    (blocks of ``shuffle_buffer``, emitted in stream order), to hold one block of bytes, not a chunk."""
    return replace(cfg, shuffle=True) if stream.mixed and not cfg.shuffle else cfg


def _chunk(stream_len: int, cfg: PlanConfig, world: World, batches_done: int) -> tuple[int, int, int, np.ndarray]:
    """(chunk start, chunk stop, samples emitted, block bounds) of ``world`` after ``batches_done``."""
    split = rank_split(stream_len, world.world_size, cfg)
    ws, we = worker_chunks(split, world.num_workers, cfg.batch_size)
    c0 = world.rank * split.per_rank + int(ws[world.worker])
    c1 = world.rank * split.per_rank + int(we[world.worker])
    skip = min(c1 - c0, batches_emitted(batches_done, world.worker, world.num_workers) * cfg.batch_size)
    return c0, c1, skip, block_bounds(c1 - c0, cfg)


def worker_plan(
    stream: MixedStream, cfg: PlanConfig, world: World, *, epoch: int, batches_done: int = 0, generation: int = 0
) -> WorkerPlan:
    """The rest of the epoch for ``world`` after the rank consumed ``batches_done`` batches.

    Args:
        stream: the epoch's stream (same on every rank and worker): :func:`epoch_stream`, or a plain
            :class:`~shardkit.plan.stream.Stream` (one source).
        cfg: plan options.
        world: this rank and worker.
        epoch: epoch number (seeds the block permutations).
        batches_done: batches the rank already consumed (resume); 0 for a fresh start.
        generation: number of elastic re-plans earlier in this epoch (varies the seeds).

    Blocks hold the stream's sample ids (a mixture's: mixture sample ids).
    """
    n = len(stream)
    # a resumed DataLoader starts collecting at its worker 0: it takes the role of the worker of the next batch
    world = world.with_worker((world.worker + batches_done) % world.num_workers, world.num_workers)
    c0, c1, skip, bounds = _chunk(n, _blocked(stream, cfg), world, batches_done)
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
    return WorkerPlan(
        world=world, split=rank_split(n, world.world_size, cfg), chunk=(c0, c1), skip=skip, blocks=tuple(blocks)
    )


def remaining(
    stream: MixedStream,
    cfg: PlanConfig,
    world_size: int,
    num_workers: int,
    *,
    epoch: int,
    batches_done: int,
    generation: int = 0,
) -> Explicit:
    """The samples of ``stream`` not yet emitted on any rank, in stream order (elastic resume).

    A checkpoint taken after ``batches_done`` batches with ``world_size`` x ``num_workers`` readers
    is re-planned for another topology. Samples the old split dropped (``DROP``/``drop_last``) stay
    dropped; a sample seen through padding counts as seen. Whole blocks are ranges (one pass over
    the epoch); only each reader's partly emitted block is planned again.
    """
    n = len(stream)
    listed = Explicit(
        *stream.window(0, n), repeats=stream.repeats, mixed=stream.mixed
    )  # materialised once: the partial blocks are slices of it
    if n == 0:
        return listed
    split = rank_split(n, world_size, cfg)
    rank0 = np.arange(world_size, dtype=np.int64) * split.per_rank
    assigned = covered(n, rank0, rank0 + split.used)
    starts, stops = partition_ranges(n, world_size, num_workers, cfg)
    roles = np.tile(np.arange(num_workers, dtype=np.int64), world_size)
    done = np.maximum(0, (batches_done - roles + num_workers - 1) // num_workers)  # batches each reader emitted
    skip = np.minimum(stops - starts, done * cfg.batch_size)
    whole, block, end = whole_blocks(stops - starts, skip, _blocked(stream, cfg))
    seen = covered(n, starts, starts + whole)
    for i in np.flatnonzero(whole < skip).tolist():  # the block each reader was emitting
        c0, b0 = int(starts[i]), int(whole[i])
        src, gids = _virtual(listed, c0 + b0, c0 + int(end[i]))
        world = World(i // num_workers, world_size, i % num_workers, num_workers)
        order = _block_order(listed, cfg, epoch, generation, world, int(block[i]), src, gids, b0)
        seen[(c0 + b0 + order[: int(skip[i]) - b0]) % n] = True
    keep = np.flatnonzero(assigned & ~seen)
    return Explicit(listed.sources[keep], listed.gids[keep], repeats=stream.repeats, mixed=stream.mixed)


def replanned(stream: MixedStream, cfg: PlanConfig, epoch: int, history: Sequence[Segment] = ()) -> MixedStream:
    """What is left of ``stream`` (epoch ``epoch``) after the finished segments in ``history``."""
    for gen, seg in enumerate(history):
        stream = remaining(
            stream, cfg, seg.world_size, seg.num_workers, epoch=epoch, batches_done=seg.batches_done, generation=gen
        )
    return stream


def epoch_stream(
    mixture: Mixture,
    cfg: PlanConfig,
    epoch: int,
    history: Sequence[Segment] = (),
    *,
    world_size: int = 1,
    nodes: int = 1,
) -> MixedStream:
    """The stream still to read in ``epoch`` of ``mixture`` (one source: a single dataset) after the finished
    segments in ``history``; ``world_size`` ranks on ``nodes`` nodes read it now.

    With ``cfg.node_affinity`` the epoch's stream is the nodes' shares in node order for the topology that
    started the epoch (the first segment of ``history``, else ``world_size`` on ``nodes``), so an elastic
    resume re-plans the same samples (:mod:`shardkit.plan.affinity`)."""
    if history:
        world_size, nodes = history[0].world_size, history[0].nodes
    nodes = nodes if cfg.node_affinity else 1
    per_node = 0
    if nodes > 1:
        per_node = rank_split(int(np.sum(mixture.sizes)), world_size, cfg).per_rank * (world_size // nodes)
    fresh = mixed_epoch(mixture, seed=cfg.seed, epoch=epoch, shuffle=cfg.shuffle, nodes=nodes, per_node=per_node)
    return replanned(fresh, cfg, epoch, history)
