"""The loader through a node cache on moto's S3 server, against the same dataset read from disk.

* A dataset reconverted to the same URL (other labels, same layout) is read fresh: the cache is keyed by
  content, so an entry of the old dataset is never served for the new one.
* A cache entry damaged after it was written (one flipped bit in a sample) is dropped, named in a warning, and the
  range read again from the store: every sample delivered is the converted one, none skipped.
* A second epoch over a cached, indexed dataset sends no shard GET (requests counted at a proxy).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

import shardkit
from shardkit.format.index import SampleIndex, index_url
from shardkit.format.manifest import load_manifest
from tests.support.data import add_index, write_dataset
from tests.support.faults import FaultProxy

KW = dict(batch_size=4, size=16, pin_memory=False, seed=5, with_keys=True, num_workers=0, shuffle_buffer=8)


def _dataset(root: str, num_classes: int = 3) -> str:
    write_dataset(root, num_samples=12, shard_size=4, size=(24, 20), distinct_images=3, num_classes=num_classes)
    add_index(root)
    return root


def _upload(opts: dict, local: str, url: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    if fs.exists(url):
        fs.rm(url, recursive=True)
    fs.put(local, url, recursive=True)
    fs.invalidate_cache()


def _epoch(url: str, **kw) -> tuple[dict, shardkit.LoaderStats]:
    loader = shardkit.load(url, **{**KW, **kw})
    try:
        got = {k: (im, lab) for images, labels, keys in loader for im, lab, k in zip(images, labels.tolist(), keys)}
        return got, loader.stats
    finally:
        loader.close()


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k][0], b[k][0]) and a[k][1] == b[k][1] for k in a)


@pytest.mark.slow
def test_a_dataset_reconverted_to_the_same_url_is_read_fresh(s3, tmp_path):
    opts, bucket = s3
    url = f"s3://{bucket}/ds"
    old, new = _dataset(str(tmp_path / "old"), 3), _dataset(str(tmp_path / "new"), 4)  # same layout, other labels
    cache = str(tmp_path / "cache")
    _upload(opts, old, url)
    got_old, _ = _epoch(url, storage_options=opts, cache_dir=cache)
    _same(got_old, _epoch(old)[0])
    _upload(opts, new, url)
    got_new, _ = _epoch(url, storage_options=opts, cache_dir=cache)
    _same(got_new, _epoch(new)[0])


@pytest.mark.slow
def test_a_damaged_cache_entry_is_dropped_and_read_again_from_the_store(s3, tmp_path, caplog):
    opts, bucket = s3
    url = f"s3://{bucket}/ds"
    local = _dataset(str(tmp_path / "local"))
    _upload(opts, local, url)
    cache = str(tmp_path / "cache")
    want, _ = _epoch(local)
    _epoch(url, storage_options=opts, cache_dir=cache)  # fills the cache
    m = load_manifest(local)
    entries = {os.path.getsize(os.path.join(cache, f)): f for f in os.listdir(cache) if f.endswith(".tar")}
    victim = os.path.join(cache, entries[m.shards[1].bytes])
    idx = SampleIndex.from_bytes(open(index_url(m.shard_url(1)), "rb").read())
    at = int(idx.starts[2]) + int(idx.offsets[2, idx.exts.index("jpg")]) + 40  # inside sample 2's JPEG
    data = bytearray(open(victim, "rb").read())
    data[at] ^= 0x10
    open(victim, "wb").write(bytes(data))
    with caplog.at_level(logging.WARNING, logger="shardkit"):
        got, stats = _epoch(url, storage_options=opts, cache_dir=cache)
    _same(got, want)
    assert stats.skipped == 0 and stats.cache_refetches == 1
    assert any(victim in r.getMessage() for r in caplog.records), "the warning names the cache file"
    assert open(victim, "rb").read() == open(m.shard_url(1), "rb").read(), "the entry is the store's bytes again"


@pytest.mark.slow
def test_a_second_epoch_over_a_cached_indexed_dataset_sends_no_shard_get(s3, s3_endpoint, tmp_path):
    opts, bucket = s3
    url = f"s3://{bucket}/ds"
    local = _dataset(str(tmp_path / "local"))
    _upload(opts, local, url)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        loader = shardkit.load(url, **KW, storage_options=via, cache_dir=str(tmp_path / "cache"))
        try:
            first = [k for _, _, ks in loader for k in ks]
            proxy.log.clear()
            second = [k for _, _, ks in loader for k in ks]
        finally:
            loader.close()
        gets = [r for r in proxy.log if r.method == "GET" and r.path.split("?")[0].endswith(".tar")]
    assert sorted(first) == sorted(second) and len(np.unique(first)) == 12
    assert gets == [], gets
