"""The same keys, order and pixels from moto's S3 server and a local HTTP server as from disk; cache limit."""

from __future__ import annotations

import os
import shutil

import pytest

import shardkit
from tests.support.batches import assert_same_batches, keyed_batches
from tests.support.data import write_dataset

KW = dict(
    batch_size=4, size=16, num_workers=2, pin_memory=False, seed=4, with_keys=True, multiprocessing_context="fork"
)


def _batches(url, **kw):
    return keyed_batches(url, **{**KW, **kw})


_same = assert_same_batches


@pytest.fixture()
def local_ds(tmp_path):
    return write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=4, size=(24, 20))


@pytest.mark.slow
def test_s3_through_moto_equals_disk(local_ds, s3, tmp_path):
    import s3fs

    opts, bucket = s3
    fs = s3fs.S3FileSystem(**opts)
    fs.put(local_ds.url + "/", f"{bucket}/ds/", recursive=True)
    _, disk = _batches(local_ds.url)
    loader, remote = _batches(f"s3://{bucket}/ds", storage_options=opts)
    _same(disk, remote)
    assert loader.stats.bytes_read > 0
    # through the local cache, with a limit smaller than the dataset
    limit = 3 * max(s.bytes for s in local_ds.manifest.shards)
    cache = str(tmp_path / "cache")
    for _ in range(2):
        _, cached = _batches(f"s3://{bucket}/ds", storage_options=opts, cache_dir=cache, cache_size=limit, seed=4)
        assert sorted(k for _, ks in cached for k in ks) == sorted(local_ds.keys)
        used = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
        assert 0 < used <= limit


def test_http_server_equals_disk(local_ds, http_root):
    base, directory = http_root
    shutil.copytree(local_ds.url, os.path.join(directory, "ds"))
    _, disk = _batches(local_ds.url)
    _, remote = _batches(f"{base}/ds")
    _same(disk, remote)
    _, cached = _batches(f"{base}/ds", cache_dir=os.path.join(directory, "..", "cache"))
    _same(disk, cached)


def test_missing_remote_dataset_is_one_clear_error(http_root):
    base, _ = http_root
    with pytest.raises(shardkit.ShardkitError, match="manifest"):
        shardkit.load(f"{base}/nothing", num_workers=0)
