"""The simulator's store bytes per epoch, requests per GiB and cache waits against references computed from the
dataset alone: range reads through the index fetch exactly the samples, an index is 64 + 40 bytes per sample, a
node cache downloads each shard and index once per node, start-up is one manifest GET per rank."""

from __future__ import annotations

from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.plan import PlanConfig
from shardkit.simulate import Dataset, SimSettings, simulate
from shardkit.simulate.schedule import INDEX_BYTES_PER_SAMPLE, epoch_schedule

ORACLE = settings(derandomize=True, deadline=None, max_examples=25, phases=[Phase.explicit, Phase.generate])


@ORACLE
@given(
    shards=st.integers(1, 12),
    per_shard=st.integers(1, 30),
    nodes=st.integers(1, 3),
    ranks=st.integers(1, 3),
    workers=st.integers(0, 3),
    epochs=st.integers(1, 3),
    cache=st.booleans(),
)
@example(shards=4, per_shard=10, nodes=1, ranks=2, workers=2, epochs=3, cache=True)
@example(shards=4, per_shard=10, nodes=2, ranks=2, workers=2, epochs=1, cache=False)
def test_store_bytes_and_requests_per_gib(shards, per_shard, nodes, ranks, workers, epochs, cache):
    data = Dataset.synthetic(shards, per_shard, 5000)
    s = SimSettings(nodes=nodes, ranks_per_node=ranks, workers=workers, epochs=epochs, cache=cache, request_budget=None)
    r = simulate(data, s)
    size = int(data.sample_bytes[0])
    index_bytes = 64 + INDEX_BYTES_PER_SAMPLE * per_shard
    assert len(r.store_bytes_per_epoch) == epochs and sum(r.store_bytes_per_epoch) == r.bytes
    assert r.startup_requests == nodes * ranks  # the manifest: one GET per rank, no HEAD
    assert r.by_kind["HEAD"] == 0  # sizes come from the manifest
    assert abs(r.requests_per_gib - (r.requests + nodes * ranks) / (r.bytes / 2**30)) < 1e-6 * r.requests_per_gib
    if not cache:  # every sample's bytes once per epoch (plus the few repeated for equal batches) and the indexes
        samples, extra = divmod(r.bytes - r.by_kind["GET index"] * index_bytes, size)
        assert extra == 0
        assert epochs * shards * per_shard <= samples < epochs * (shards * per_shard + nodes * ranks * s.batch_size)
        assert r.cache_waits is None
        return
    # a node downloads the shards (and indexes) its processes open, once; later epochs of one node read none
    cfg = PlanConfig(batch_size=s.batch_size, seed=s.seed)
    sched = epoch_schedule(data, cfg, world_size=nodes * ranks, num_workers=workers, epoch=0, block_size=1 << 20)
    w = max(1, workers)
    opened = {((int(p) // w) // ranks, int(sh)) for p, sh in zip(sched.proc, sched.shard)}
    assert r.store_bytes_per_epoch[0] == len(opened) * (int(data.nbytes[0]) + index_bytes)
    if nodes == 1:
        assert all(b == 0 for b in r.store_bytes_per_epoch[1:])
    assert r.by_kind["GET index"] <= len({sh for _, sh in opened}) * nodes * epochs


@ORACLE
@given(shards=st.integers(1, 8), ranks=st.integers(1, 4), workers=st.integers(0, 3), epochs=st.integers(1, 3))
@example(shards=2, ranks=4, workers=2, epochs=2)
def test_cache_waits_are_the_opens_of_a_shard_another_process_of_the_node_downloaded(shards, ranks, workers, epochs):
    """One node: in the first epoch every open of an already downloaded shard found another process's download
    (the opens that download are one per shard); later epochs' hits are of earlier downloads, not waits."""
    data = Dataset.synthetic(shards, 7, 3000)
    cfg = PlanConfig(batch_size=4, seed=1)
    cache, idx = [set()], [set()]
    for e in range(epochs):
        sched = epoch_schedule(
            data,
            cfg,
            world_size=ranks,
            num_workers=workers,
            epoch=e,
            block_size=1 << 20,
            cache=cache,
            index_cache=idx,
            ranks_per_node=ranks,
        )
        if e == 0:
            assert sched.cache_waits == sched.opens - len(cache[0]) and sched.cache_hits == sched.cache_waits
        else:
            assert sched.cache_waits == 0 and sched.cache_hits == sched.opens
