"""Node affinity against a real object store: 2 nodes (2 cache folders) x 2 ranks on moto's S3 server, 3 epochs.

Bytes of shards read from the store are counted at a proxy, per epoch. With a global shuffle each epoch sends a node
shards its cache does not hold; with ``node_affinity=True`` the epochs after the first read the node's own share
from its cache: at most 5 % of the first epoch's bytes (the lent pieces that even out the shares aside).
"""

from __future__ import annotations

import re

import pytest

import shardkit
from tests.support.data import add_index, write_dataset
from tests.support.faults import FaultProxy

NODES, RANKS_PER_NODE = 2, 2
KW = dict(batch_size=4, seed=2, shuffle_buffer=8, size=16, with_keys=True, num_workers=0)


def _store_bytes_per_epoch(url: str, via: dict, proxy: FaultProxy, caches: list[str], affinity: bool) -> list[int]:
    world = NODES * RANKS_PER_NODE
    loaders = [
        shardkit.load(
            url,
            rank=r,
            world_size=world,
            nodes=NODES,
            node_affinity=affinity,
            storage_options=via,
            cache_dir=caches[r // RANKS_PER_NODE],
            **KW,
        )
        for r in range(world)
    ]
    out = []
    try:
        for epoch in range(3):
            proxy.log.clear()
            keys = []
            for loader in loaders:
                loader.set_epoch(epoch)
                keys += [k for _, _, ks in loader for k in ks]
            assert len(keys) == len(set(keys)) == 96, f"epoch {epoch}: not every sample once"
            out.append(sum(_length(r.range) for r in proxy.log if r.method == "GET" and _is_shard(r.path)))
    finally:
        for loader in loaders:
            loader.close()
    return out


def _is_shard(path: str) -> bool:
    return path.split("?")[0].endswith(".tar")


def _length(rng: str) -> int:
    m = re.match(r"bytes=(\d+)-(\d+)", rng)
    return int(m[2]) - int(m[1]) + 1 if m else 0


@pytest.mark.slow
def test_node_affinity_reads_epochs_after_the_first_from_the_node_cache(s3, s3_endpoint, tmp_path):
    import s3fs

    opts, bucket = s3
    local = str(tmp_path / "ds")
    write_dataset(local, num_samples=96, shard_size=4, size=(24, 20), distinct_images=3)  # 24 shards, 12 per node
    add_index(local)
    fs = s3fs.S3FileSystem(**opts)
    fs.put(local, f"{bucket}/ds", recursive=True)
    url = f"s3://{bucket}/ds"
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        glob = _store_bytes_per_epoch(url, via, proxy, [str(tmp_path / f"g{n}") for n in range(NODES)], False)
        aff = _store_bytes_per_epoch(url, via, proxy, [str(tmp_path / f"a{n}") for n in range(NODES)], True)
    assert glob[0] > 0 and aff[0] > 0, (glob, aff)
    assert max(aff[1:]) <= 0.05 * aff[0], f"affinity: {aff}"
    assert min(glob[1:]) > 0.05 * glob[0], f"a global shuffle should miss its cache: {glob}"
