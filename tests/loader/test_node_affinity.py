"""``load(..., node_affinity=True)`` through the real loader: each node's ranks read only their node's shards,
every epoch the same ones, and a state resumes exactly on the same topology and on another node count."""

from __future__ import annotations

import warnings

import pytest

import shardkit
from shardkit.plan.affinity import MIN_SHARDS_PER_NODE
from tests.support.data import write_dataset
from tests.support.resume import check_resume

KW = dict(batch_size=3, seed=4, shuffle_buffer=5, size=16, with_keys=True, node_affinity=True, num_workers=0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("affinity")), num_samples=64, shard_size=4, size=(20, 16))


def shard_of(key: str) -> int:
    return int(key[1:]) // 4  # write_dataset: shards of 4 samples in key order


def test_ranks_read_their_nodes_shards_every_epoch(dataset):
    """2 nodes x 2 ranks: the shards a node reads are disjoint from the other node's and the same each epoch;
    every key once per epoch (64 samples divide over 4 ranks: no padding)."""
    per_epoch = []
    for epoch in range(3):
        shards = []
        keys = []
        for node in range(2):
            mine: set[int] = set()
            for r in (2 * node, 2 * node + 1):
                loader = shardkit.load(dataset.url, rank=r, world_size=4, nodes=2, **KW)
                loader.set_epoch(epoch)
                got = [k for _, _, ks in loader for k in ks]
                keys += got
                mine |= {shard_of(k) for k in got}
            shards.append(mine)
        assert sorted(keys) == sorted(dataset.keys), f"epoch {epoch}: not every sample once"
        assert not shards[0] & shards[1], f"epoch {epoch}: both nodes read shards {shards[0] & shards[1]}"
        per_epoch.append(shards)
    assert per_epoch[0] == per_epoch[1] == per_epoch[2], "a node's shards changed between epochs"


def test_resume_same_topology_and_another_node_count(dataset):
    check_resume(lambda **topo: shardkit.load(dataset.url, nodes=2, **topo, **KW), after=2, world_size=4)
    res = check_resume(
        lambda **topo: shardkit.load(dataset.url, nodes=2, **topo, **KW),
        after=2,
        world_size=4,
        resume_world_size=4,
        resume=lambda **topo: shardkit.load(dataset.url, nodes=4, **topo, **KW),
    )
    assert sorted(res.keys()) == sorted(dataset.keys)
    assert res.states[0]["nodes"] == 2


def test_few_shards_per_node_warn(dataset):
    with pytest.warns(UserWarning, match=f"fewer than {MIN_SHARDS_PER_NODE} per node"):
        shardkit.load(dataset.url, rank=0, world_size=4, nodes=4, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shardkit.load(dataset.url, rank=0, world_size=4, nodes=2, **KW)  # 16 shards over 2 nodes: 8 each
