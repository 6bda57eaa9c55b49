"""Shuffle blocks: how a worker emits its chunk, and what it emits for the rest of the epoch.

Inside a worker, samples are read sequentially and emitted in *blocks*: the first block holds
``shuffle_initial`` samples, later ones ``shuffle_buffer``; each block is emitted in a seeded
random permutation (:func:`block_perm`). Memory is one block of raw samples, as with a shuffle
buffer, and the state after any number of batches is known in O(1), so resuming never re-reads
or decodes what was consumed. In a mixed block the permutation keeps the source pattern of the
stream (:func:`by_source`), so every batch keeps the interleave's shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardkit.plan.ordering import PlanConfig
from shardkit.plan.split import RankSplit
from shardkit.plan.stream import seeded_rng
from shardkit.plan.world import World


def block_bounds(n: int, cfg: PlanConfig) -> np.ndarray:
    """Start offsets of the shuffle blocks of a chunk of ``n`` samples, plus ``n``."""
    if not cfg.shuffle:
        return np.array([0, n], dtype=np.int64) if n else np.array([0], dtype=np.int64)
    first = cfg.shuffle_initial or cfg.shuffle_buffer
    if n <= first:
        return np.array([0, n], dtype=np.int64) if n else np.array([0], dtype=np.int64)
    return np.concatenate([[0], np.arange(first, n, cfg.shuffle_buffer), [n]]).astype(np.int64)


def whole_blocks(length: np.ndarray, skip: np.ndarray, cfg: PlanConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk of ``length`` with ``skip`` samples emitted: (samples in whole blocks before ``skip``,
    index of the block holding ``skip``, that block's end) -- :func:`block_bounds`, vectorised."""
    if not cfg.shuffle:
        return np.where(skip >= length, length, 0), np.zeros_like(skip), length
    first, buf = cfg.shuffle_initial or cfg.shuffle_buffer, cfg.shuffle_buffer
    later = skip >= first
    whole = np.where(later, first + (skip - first) // buf * buf, 0)
    whole = np.where(skip >= length, length, np.where(length <= first, 0, whole))
    block = np.where(whole == 0, 0, 1 + (whole - first) // buf)
    end = np.minimum(length, np.where(block == 0, first, whole + buf))
    return whole, block, end


@dataclass(frozen=True)
class Block:
    """Samples to read in one go (``gids`` in reading order) and the order to emit them.

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
    return seeded_rng(cfg.seed, epoch, generation, world.rank, world.worker, block, 2).permutation(n).astype(np.int64)


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
