"""Epoch planning invariants: exactly once, equal batches, resume and elastic resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shardkit.plan import (
    EpochPolicy,
    Mixture,
    PlanConfig,
    Segment,
    Source,
    Stream,
    WorkerPlan,
    epoch_stream,
    partition_ranges,
    rank_split,
    worker_plan,
)
from shardkit.plan.world import World
from tests.support.plans import rank_batches
from tests.support.timing import best_seconds, check_scales_linearly

SIZES = [7, 7, 7, 3, 0, 7, 5]  # 36 samples, one empty shard


@pytest.mark.parametrize("R,W,B", [(1, 1, 4), (2, 2, 4), (3, 2, 5), (3, 3, 1), (4, 8, 2), (5, 1, 64)])
@pytest.mark.parametrize("policy", list(EpochPolicy))
@pytest.mark.parametrize("drop_last", [False, True])
def test_exactly_once_and_equal_batches(R, W, B, policy, drop_last):
    cfg = PlanConfig(batch_size=B, seed=3, shuffle_buffer=4, policy=policy, drop_last=drop_last)
    stream = Stream.full_epoch(SIZES, seed=3, epoch=1)
    split = rank_split(len(stream), R, cfg)
    per_rank = [rank_batches(stream, cfg, R, W, r, epoch=1) for r in range(R)]
    assert {len(b) for b in per_rank} == {split.num_batches}
    ids = Counter(int(g) for batches in per_rank for b in batches for g in b)
    total = sum(ids.values())
    assert total == split.used * R == 36 + split.padded - split.dropped
    if split.padded == 0:
        assert all(c == 1 for c in ids.values())
    else:  # padding repeats exactly `padded` samples once
        assert sum(c - 1 for c in ids.values()) == split.padded and set(ids) == set(range(36))
    if split.dropped == 0:
        assert set(ids) == set(range(36))
    # batch sizes: all full except possibly the last one of each rank
    for batches in per_rank:
        assert all(len(b) == B for b in batches[:-1])


def test_epochs_differ_seed_reproduces():
    cfg = PlanConfig(batch_size=4, seed=1, shuffle_buffer=8)

    def order(e, s):
        return worker_plan(
            Stream.full_epoch(SIZES, seed=s, epoch=e),
            PlanConfig(batch_size=4, seed=s, shuffle_buffer=8),
            World(),
            epoch=e,
        ).emission_order()

    assert np.array_equal(order(0, 1), order(0, 1))
    assert not np.array_equal(order(0, 1), order(1, 1))
    assert not np.array_equal(order(0, 1), order(0, 2))
    assert sorted(order(2, 1)) == list(range(36))
    no_shuffle = worker_plan(
        Stream.full_epoch(SIZES, seed=0, epoch=0, shuffle=False),
        PlanConfig(batch_size=4, shuffle=False),
        World(),
        epoch=0,
    )
    assert list(no_shuffle.emission_order()) == list(range(36))
    del cfg


def test_shuffle_initial_block():
    cfg = PlanConfig(batch_size=2, shuffle_buffer=10, shuffle_initial=3)
    plan = worker_plan(Stream.full_epoch(SIZES, seed=0, epoch=0), cfg, World(), epoch=0)
    assert [len(b.gids) for b in plan.blocks] == [3, 10, 10, 10, 3]


@pytest.mark.parametrize("R,W", [(1, 1), (2, 3), (3, 2)])
def test_resume_same_topology_equals_uninterrupted(R, W):
    cfg = PlanConfig(batch_size=3, seed=5, shuffle_buffer=5, shuffle_initial=2)
    stream = Stream.full_epoch(SIZES, seed=5, epoch=2)
    for r in range(R):
        full = rank_batches(stream, cfg, R, W, r, epoch=2)
        for k in range(len(full) + 1):
            rest = rank_batches(stream, cfg, R, W, r, epoch=2, batches_done=k)
            assert [list(b) for b in rest] == [list(b) for b in full[k:]], (r, k)


@pytest.mark.parametrize("old,new", [((3, 2), (2, 1)), ((2, 1), (3, 2)), ((2, 2), (2, 3)), ((1, 1), (4, 2))])
@pytest.mark.parametrize("policy", list(EpochPolicy))
def test_elastic_resume_exactly_once(old, new, policy):
    cfg = PlanConfig(batch_size=2, seed=9, shuffle_buffer=4, policy=policy)
    sizes = [5, 9, 2, 7, 8, 1, 6]  # 38 samples
    R0, W0 = old
    one = Mixture((Source("a"),), (sizes,))  # a single dataset is the one-source mixture
    stream = epoch_stream(one, cfg, 0, [])
    first = rank_split(len(stream), R0, cfg)
    k = first.num_batches // 2
    seen = Counter(int(g) for r in range(R0) for b in rank_batches(stream, cfg, R0, W0, r)[:k] for g in b)
    rest_stream = epoch_stream(one, cfg, 0, [Segment(R0, W0, k)])
    R1, W1 = new
    second = rank_split(len(rest_stream), R1, cfg)
    rest = [rank_batches(rest_stream, cfg, R1, W1, r, generation=1) for r in range(R1)]
    assert {len(b) for b in rest} == {second.num_batches}
    later = Counter(int(g) for batches in rest for b in batches for g in b)
    everything = seen + later
    repeats = sum(c - 1 for c in everything.values())
    if policy is EpochPolicy.PAD:  # every sample at least once; repeats only through reported padding
        assert set(everything) == set(range(38))
        assert repeats <= first.padded + second.padded
    else:  # no repeats; exactly the reported drops are missing
        assert repeats == 0 and len(everything) == 38 - first.dropped - second.dropped


def _plan_shards(num_shards: int, cfg: PlanConfig) -> tuple[Stream, np.ndarray, np.ndarray, WorkerPlan]:
    """The epoch of ``num_shards`` shards of ~1000 samples over 1,024 x 8 ranks x 8 workers: the shuffled stream,
    every reader's range and the plan of worker 7 of rank 5000."""
    sizes = np.full(num_shards, 1000, dtype=np.int64)
    sizes[::7] = 997
    stream = Stream.full_epoch(sizes, seed=0, epoch=3)
    starts, stops = partition_ranges(len(stream), 1024 * 8, 8, cfg)
    plan = worker_plan(stream, cfg, World(rank=5000, world_size=8192, worker=7, num_workers=8), epoch=3)
    return stream, starts, stops, plan


def test_planning_scales_to_100k_shards_65536_readers():
    cfg = PlanConfig(batch_size=256, seed=0)
    stream, starts, stops, plan = _plan_shards(100_000, cfg)
    # no blow-up: 100 times the shards costs about 100 times the time or less (a machine-independent
    # guard; the absolute figure: python tools/stress.py)
    small = best_seconds(lambda: _plan_shards(1_000, cfg))
    large = best_seconds(lambda: _plan_shards(100_000, cfg))
    check_scales_linearly("planning 65,536 readers", (1_000, small), (100_000, large))
    # exactly once: the partitions tile [0, total) with no gap or overlap
    split = rank_split(len(stream), 8192, cfg)
    assert starts[0] == 0 and np.all(starts[1:] == stops[:-1]) and stops[-1] == split.per_rank * 8192
    assert split.per_rank * 8192 - len(stream) == split.padded < 8192
    assert plan.num_samples == stops[5000 * 8 + 7] - starts[5000 * 8 + 7]
