"""The simulator's schedule is the real loader's: the same requests (method, path, Range) as the fault proxy logs
in front of moto, in the same order for one reader, for the header walk and the sample index, flat and
spread over prefixes, one and two ranks, with and without DataLoader workers. Every sample has the same
size here, so the simulator's uniform-sample assumption is exact."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import shardkit
from shardkit.format.index import index_url
from shardkit.format.manifest import load_manifest
from shardkit.format.prefixes import spread_name
from shardkit.loader.read import ranges
from shardkit.plan import PlanConfig
from shardkit.simulate.schedule import HEAD, INDEX, NOOP, Dataset, epoch_schedule
from tests.support.data import add_index, write_dataset
from tests.support.faults import FaultProxy
from tests.support.s3 import put_dir

BLOCK = 8192
PLAN = dict(batch_size=4, seed=3, shuffle_buffer=6, shuffle_initial=3)
KW = dict(size=16, pin_memory=False, with_keys=True, multiprocessing_context="fork", block_size=BLOCK, **PLAN)


@pytest.fixture(autouse=True)
def _collect_clients():
    yield
    import gc

    gc.collect()


def _layout(root: str, name: str) -> ranges.SampleLayout:
    import tarfile

    members = tarfile.open(os.path.join(root, name)).getmembers()
    per = [m for m in members if m.name.startswith(members[0].name.split(".")[0] + ".")]
    size = per[-1].offset_data + -(-per[-1].size // 512) * 512
    return ranges.SampleLayout(size, tuple((m.offset, m.size, True) for m in per))


@pytest.fixture()
def remote(tmp_path, s3):
    """``make(indexed, spread)``: a 42-sample dataset (7 shards of 6 uniform samples) on moto, flat or under 3
    prefixes, with or without sample indexes, as ``(its path in the bucket, its Dataset)``; and the options."""
    opts, bucket = s3
    base = write_dataset(str(tmp_path / "base"), num_samples=42, shard_size=6, num_classes=1, distinct_images=1)

    def make(indexed: bool, spread: bool) -> tuple[str, Dataset]:
        key = f"ds{int(indexed)}{int(spread)}"
        root = str(tmp_path / key)
        shutil.copytree(base.url, root)
        if indexed:
            add_index(root)
        m = load_manifest(root)
        if spread:  # as convert --prefixes 3 names them (until it is merged here: hand-written spread names)
            shards = []
            for j, s in enumerate(m.shards):
                name = spread_name(s.name, j, 3)
                os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
                for old, new in ((s.name, name), (index_url(s.name), index_url(name))):
                    if os.path.exists(os.path.join(root, old)):
                        os.rename(os.path.join(root, old), os.path.join(root, new))
                shards.append(replace(s, name=name))
            m = replace(m, shards=shards)
            with open(os.path.join(root, "manifest.json"), "w") as f:  # save_manifest refuses paths (for now)
                f.write(m.to_json())
        layout = _layout(root, m.shards[0].name)
        data = Dataset(
            tuple(s.name for s in m.shards),
            [s.samples for s in m.shards],
            [s.bytes for s in m.shards],
            indexed=indexed,
            layout=layout,
            sample_bytes=np.full(len(m.shards), layout.size),
        )
        put_dir(opts, root, f"{bucket}/{key}")
        return f"/{bucket}/{key}/", data

    return make, opts, bucket


def _simulated(data: Dataset, root: str, world_size: int, workers: int, rank: int) -> list[tuple[str, str, str]]:
    sched = epoch_schedule(
        data, PlanConfig(**PLAN), world_size=world_size, num_workers=workers, epoch=0, block_size=BLOCK, index=True
    )
    w = max(1, workers)
    out = [("GET", root + "manifest.json", "bytes=0-")]  # the manifest: one GET, no size probe
    for i in range(len(sched.proc)):
        if sched.proc[i] // w != rank or sched.kind[i] == NOOP:
            continue
        path = root + data.names[int(sched.shard[i])]
        k, lo, hi = int(sched.kind[i]), int(sched.lo[i]), int(sched.hi[i])
        if k == HEAD:
            out.append(("HEAD", path, ""))
        elif k == INDEX:
            out.append(("GET", index_url(path), "bytes=0-"))
        else:
            out.append(("GET", path, f"bytes={lo}-{hi - 1}"))
    return out


def _logged(s3_endpoint: str, opts: dict, url: str, **kw) -> tuple[list[tuple[str, str, str]], list[str]]:
    with FaultProxy(s3_endpoint) as proxy:
        loader = shardkit.load(
            url,
            storage_options=proxy.storage_options(opts),
            **KW,
            **kw,
        )
        keys = [k for _, _, ks in loader for k in ks]
        log = [(r.method, r.path, r.range) for r in proxy.log]
    return log, keys


def _url(bucket: str, root: str) -> str:
    return f"s3://{bucket}{root[len(bucket) + 1 :]}".rstrip("/")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "indexed, spread, world_size, rank", [(False, False, 1, 0), (True, True, 2, 1)], ids=["walk-flat", "index-spread"]
)
def test_one_reader_sends_exactly_the_simulated_requests_in_order(
    remote, s3_endpoint, indexed, spread, world_size, rank
):
    """A rank without workers is one reader: the logged requests are the simulated ones, in order."""
    make, opts, bucket = remote
    root, data = make(indexed, spread)
    log, keys = _logged(s3_endpoint, opts, _url(bucket, root), num_workers=0, rank=rank, world_size=world_size)
    assert len(keys) == 42 // world_size
    assert log == _simulated(data, root, world_size, 0, rank)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "indexed, spread, world_size, rank", [(False, True, 2, 0), (True, False, 2, 1)], ids=["walk-spread", "index-flat"]
)
def test_workers_send_the_simulated_requests(remote, s3_endpoint, indexed, spread, world_size, rank):
    """Two DataLoader workers: the same requests; the workers interleave in the log, so they are compared as a
    multiset (each worker's own order is the one-reader test's)."""
    make, opts, bucket = remote
    root, data = make(indexed, spread)
    log, keys = _logged(s3_endpoint, opts, _url(bucket, root), num_workers=2, rank=rank, world_size=world_size)
    assert len(keys) == 42 // world_size
    assert Counter(log) == Counter(_simulated(data, root, world_size, 2, rank))


def _simulated_cached(data: Dataset, root: str, world_size: int, workers: int) -> list[tuple[str, str, str]]:
    """Every rank of one node sharing a cache folder: the manifest per rank, each index and shard once."""
    sched = epoch_schedule(
        data,
        PlanConfig(**PLAN),
        world_size=world_size,
        num_workers=workers,
        epoch=0,
        block_size=BLOCK,
        index=True,
        cache=[set()],
        index_cache=[set()],
        ranks_per_node=world_size,
    )
    out = [("GET", root + "manifest.json", "bytes=0-")] * world_size
    for i in np.flatnonzero(sched.kind != NOOP).tolist():
        path = root + data.names[int(sched.shard[i])]
        if int(sched.kind[i]) == INDEX:
            out.append(("GET", index_url(path), "bytes=0-"))
        else:
            out.append(("GET", path, f"bytes={int(sched.lo[i])}-{int(sched.hi[i]) - 1}"))
    return out


@pytest.mark.timeout(180)
def test_ranks_sharing_a_cache_send_the_simulated_requests(remote, s3_endpoint, tmp_path):
    """Two ranks of one node (one cache folder), two workers each: each sample index and each shard is fetched
    once for the node (the loader's GETs at the proxy are the simulated ones, as a multiset), no HEAD; the
    simulator's cache waits are the opens that found a shard another process of the node downloaded."""
    make, opts, bucket = remote
    root, data = make(True, False)
    logged: list[tuple[str, str, str]] = []
    for rank in range(2):
        log, keys = _logged(
            s3_endpoint, opts, _url(bucket, root), num_workers=2, rank=rank, world_size=2, cache_dir=str(tmp_path / "c")
        )
        assert len(keys) == 21
        logged += log
    assert Counter(logged) == Counter(_simulated_cached(data, root, 2, 2))
    shard_gets = [p for m, p, _ in logged if p.endswith(".tar")]
    assert len(shard_gets) == len(set(shard_gets)) == len(data.names)  # one download per shard for the node
