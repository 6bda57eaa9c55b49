"""The loader reads with the sample index: one range request per block, the same samples and bytes as the
header walk (local and S3), consumed samples skipped on resume, a damaged or wrong index falls back to the walk."""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import zlib
from dataclasses import replace

import numpy as np
import pytest
import torch

import shardkit
from shardkit.format.index import index_url
from shardkit.format.manifest import load_manifest
from shardkit.loader.config import StorageConfig
from shardkit.loader.read.reader import BlockReader
from shardkit.loader.stats import Counters
from shardkit.plan.epoch import shard_offsets
from shardkit.storage.opener import ShardOpener
from tests.support.batches import assert_same_batches, keyed_batches
from tests.support.data import add_index, write_dataset
from tests.support.faults import FaultProxy
from tests.support.resume import check_resume

KW = dict(batch_size=4, size=16, pin_memory=False, seed=4, with_keys=True, multiprocessing_context="fork")


@pytest.fixture()
def pair(tmp_path):
    """``(walk_root, indexed_root, dataset)``: the same 30 samples in 5 shards, without and with indexes."""
    ds = write_dataset(str(tmp_path / "walk"), num_samples=30, shard_size=7, size=(24, 20))
    indexed = str(tmp_path / "indexed")
    shutil.copytree(ds.url, indexed)
    add_index(indexed)
    return ds.url, indexed, ds


def _batches(url, **kw):
    return keyed_batches(url, **{**KW, **kw})


_same = assert_same_batches


def _reader(root: str, *, indexed: bool, **source) -> BlockReader:
    m = load_manifest(root, **source.get("storage_options", {}))
    urls = m.shard_urls()
    return BlockReader(
        urls,
        [s.bytes for s in m.shards],
        shard_offsets(m.shard_sizes),
        ShardOpener(StorageConfig(**source)),
        Counters(),
        num_classes=len(m.classes),
        sha256=[s.sha256 for s in m.shards] if indexed else None,
    )


def _named(samples):
    """The samples with their shard named by file name only (the same shards in two places)."""
    return [replace(s, shard=os.path.basename(s.shard)) for s in samples]


#: reads as the plan makes them: whole shards, a block across shards, resumed blocks with holes
GIDS = [
    np.arange(0, 7),
    np.arange(5, 16),
    np.array([8, 9, 12, 13]),
    np.array([20]),
    np.array([22, 29]),
    np.arange(0, 30),
]


def test_block_reader_index_equals_walk(pair):
    walk_root, indexed_root, _ = pair
    walk, idx = _reader(walk_root, indexed=False), _reader(indexed_root, indexed=True)
    for gids in GIDS:
        got, want = idx.read(gids), walk.read(gids)
        assert [s.gid for s in got] == gids.tolist()
        assert _named(got) == _named(want) and all(s.error is None for s in got)
    # one range read per shard a read touches (holes of consumed samples are read through, not walked)
    shards = sum(len(np.unique(np.searchsorted(shard_offsets([7, 7, 7, 7, 2]), g, side="right"))) for g in GIDS)
    assert idx.range_reads == shards and idx.shards_withheld == 0
    idx.close()
    walk.close()


@pytest.mark.parametrize("shuffle", [True, False])
def test_loader_with_index_equals_walk(pair, shuffle):
    walk_root, indexed_root, ds = pair
    _, walk = _batches(walk_root, num_workers=2, shuffle=shuffle)
    _, indexed = _batches(indexed_root, num_workers=2, shuffle=shuffle)
    _same(walk, indexed)
    assert sorted(k for _, ks in indexed for k in ks) == sorted(ds.keys)


def test_resume_with_index_continues_exactly(pair):
    walk_root, indexed_root, _ = pair
    walk, indexed = (
        check_resume(
            lambda root=root, **topo: shardkit.load(root, **topo, **{**KW, "num_workers": 0}), after=3, pixels=True
        )
        for root in (walk_root, indexed_root)
    )
    _same([(b.images, b.keys) for b in walk.rest[0]], [(b.images, b.keys) for b in indexed.rest[0]])
    assert len(indexed.rest[0]) == len(indexed.loaders[0]) - 3


def _rewrite_index(path: str, patch) -> None:
    body = bytearray(open(path, "rb").read()[:-4])
    patch(body)
    open(path, "wb").write(bytes(body) + struct.pack("<I", zlib.crc32(bytes(body))))


def test_damaged_or_wrong_index_withholds_its_shard_once(pair, caplog):
    walk_root, indexed_root, ds = pair
    m = load_manifest(indexed_root)
    # shard 0: a flipped byte (CRC); shard 2: consistent but wrong sizes (samples no longer back to back);
    # shard 3: the index is gone
    p0 = index_url(m.shard_url(0))
    bad = bytearray(open(p0, "rb").read())
    bad[len(bad) // 2] ^= 0xFF
    open(p0, "wb").write(bytes(bad))
    p2 = index_url(m.shard_url(2))
    n, k = m.shards[2].samples, 3
    sizes_at = os.path.getsize(p2) - 4 - 4 * n - 4 * n * k  # sizes, then the checksums, then the CRC-32
    _rewrite_index(
        p2, lambda b: b.__setitem__(slice(sizes_at + 4 * (3 * 4 + 1), sizes_at + 4 * (3 * 4 + 2)), struct.pack("<I", 1))
    )
    os.remove(index_url(m.shard_url(3)))
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        loader, got = _batches(indexed_root, num_workers=0)
    walker, want = _batches(walk_root, num_workers=0)
    assert loader.stats.shards_withheld == 3 and walker.stats.shards_withheld == 0  # counted in the stats too
    offsets = np.cumsum([0] + [s.samples for s in m.shards])
    gone = {ds.keys[i] for k in (0, 2, 3) for i in range(offsets[k], offsets[k + 1])}
    keys = [k for _, ks in got for k in ks]
    assert sorted(keys) == sorted(set(ds.keys) - gone) and len(set(keys)) == len(keys)  # never walked
    assert loader.stats.skipped == len(gone) and walker.stats.skipped == 0
    held = {k: [im for im, ks in want for im, key in zip(im, ks) if key == k] for k in keys}
    assert all(torch.equal(im, held[key][0]) for ims, ks in got for im, key in zip(ims, ks))
    withheld = [m for m in (r.getMessage() for r in caplog.records) if "are withheld" in m and "skipped" not in m]
    assert len(withheld) == 3, withheld
    assert any("train-000000.idx" in f and "CRC" in f for f in withheld)
    assert any("train-000002.idx" in f and "back to back" in f for f in withheld)
    assert any("train-000003.idx" in f and "not found" in f for f in withheld)
    with pytest.raises(shardkit.DataError, match="withheld"):
        _batches(indexed_root, num_workers=0, strict=True)


def _tar_gets(proxy: FaultProxy) -> list[str]:
    return [r.range for r in proxy.log if r.method == "GET" and re.search(r"/train-\d+\.tar$", r.path.split("?")[0])]


@pytest.mark.slow
def test_s3_one_range_request_per_block(pair, s3, s3_endpoint):
    import s3fs

    walk_root, indexed_root, _ = pair
    opts, bucket = s3
    fs = s3fs.S3FileSystem(**opts)
    fs.put(indexed_root + "/", f"{bucket}/indexed/", recursive=True)
    fs.put(walk_root + "/", f"{bucket}/walk/", recursive=True)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        # BlockReader alone: every read of one shard's samples is exactly one ranged GET of that shard
        reader = _reader(f"s3://{bucket}/indexed", indexed=True, storage_options=via, block_size=4096)
        local = _reader(walk_root, indexed=False)
        for gids in GIDS[:5]:
            before = len(_tar_gets(proxy))
            assert _named(reader.read(gids)) == _named(local.read(gids))
            touched = len(np.unique(np.searchsorted(shard_offsets([7, 7, 7, 7, 2]), gids, side="right")))
            gets = _tar_gets(proxy)[before:]
            assert len(gets) == touched and all(g.startswith("bytes=") for g in gets), gets
        reader.close()
        local.close()
        # the loader: the same samples, order and pixels as the local walk; requests per epoch before/after
        counts = {}
        _, want = _batches(walk_root, num_workers=2)
        for name in ("walk", "indexed"):
            start = len(proxy.log)
            _, got = _batches(f"s3://{bucket}/{name}", num_workers=2, storage_options=via, block_size=4096)
            _same(want, got)
            counts[name] = len(proxy.log) - start
    print("requests per epoch (30 samples, 5 shards, block_size 4096):", counts)
    assert counts["indexed"] < counts["walk"]


def test_large_block_is_cut_into_bounded_range_reads(pair, monkeypatch):
    walk_root, indexed_root, _ = pair
    monkeypatch.setattr(BlockReader, "MAX_RANGE_BYTES", 3 * 4096)
    walk, idx = _reader(walk_root, indexed=False), _reader(indexed_root, indexed=True)
    got, want = idx.read(np.arange(0, 30)), walk.read(np.arange(0, 30))
    assert _named(got) == _named(want)
    assert idx.range_reads > 5 and idx.shards_withheld == 0


def test_http_with_index_equals_walk(pair, http_root):
    walk_root, indexed_root, _ = pair
    base, directory = http_root
    shutil.copytree(indexed_root, os.path.join(directory, "indexed"))
    _, want = _batches(walk_root, num_workers=2)
    _, got = _batches(f"{base}/indexed", num_workers=2)
    _same(want, got)
    _, cached = _batches(f"{base}/indexed", num_workers=2, cache_dir=os.path.join(directory, "..", "cache"))
    _same(want, cached)
