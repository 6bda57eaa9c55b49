"""Splitting a stream over ranks and workers: equal batches on every rank, one contiguous chunk per worker.

The stream is cut into ``world_size`` contiguous, equal ranges (:func:`rank_split`). When the
length does not divide, the :class:`~shardkit.plan.ordering.EpochPolicy` decides: ``PAD`` repeats
the first few samples of the stream (like ``DistributedSampler``), ``DROP`` leaves the last few
out. ``drop_last`` drops each rank's last partial batch. Every rank therefore has the same number
of batches, so DDP never waits on a rank that ran dry. Batch ``i`` of a rank is made by DataLoader
worker ``i % num_workers`` -- the order in which ``DataLoader`` collects results from its workers --
and each worker reads one contiguous chunk of the rank's range (:func:`worker_chunks`). Fewer
shards than ranks x workers is fine: chunks split shards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardkit.plan.ordering import EpochPolicy, PlanConfig


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


def partition_ranges(
    num_samples: int, world_size: int, num_workers: int, cfg: PlanConfig
) -> tuple[np.ndarray, np.ndarray]:
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


def covered(n: int, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Which of ``n`` stream positions the virtual ranges ``[starts, stops)`` cover (past ``n``: wrapped, the padding)."""
    size = max(n, int(stops.max()) if len(stops) else 0)
    diff = np.zeros(size + 1, np.int64)
    np.add.at(diff, starts, 1)
    np.add.at(diff, stops, -1)
    cov = np.cumsum(diff[:-1]) > 0
    out = cov[:n].copy()
    for a in range(n, size, n):  # padding: positions past the end are the stream's first ones again
        out[: min(n, size - a)] |= cov[a : a + n]
    return out
