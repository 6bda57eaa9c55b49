"""One download per node: processes sharing a cache folder that miss the same shard at once send one GET for it
(the others wait for the downloader's claim, an ``flock`` the OS releases when its holder dies), and a downloader
killed mid-download is taken over. Real processes, moto's S3 server behind the counting proxy."""

from __future__ import annotations

import hashlib
import io
import multiprocessing as mp
import os
import queue
import random
import signal
import time

import pytest

from shardkit.storage.opener import ShardOpener, StorageConfig
from tests.support.faults import FaultProxy

DATA = random.Random(11).randbytes(3 << 20)  # under one download block: a download is one GET
SHA = hashlib.sha256(DATA).hexdigest()


def _open_and_read(opts: dict, url: str, cache_dir: str, start: "mp.Barrier", out: "mp.Queue") -> None:
    opener = ShardOpener(StorageConfig(storage_options=opts, cache_dir=cache_dir))
    start.wait(60)
    with opener.open(url, len(DATA), SHA) as f:
        data = f.read()
    out.put((os.getpid(), data == DATA, opener.cache_waits, opener.cache_path_of(f) is not None))


def _results(ps: list, out: "mp.Queue", timeout_s: float) -> list:
    """What processes ``ps`` put in ``out`` (one each): fewer once every one of them has exited (one that failed
    puts nothing), or when ``timeout_s`` runs out."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < len(ps) and time.monotonic() < deadline:
        exited = not any(p.is_alive() for p in ps)  # before the get: what an exited process put is in the pipe
        try:
            got.append(out.get(timeout=0.2))
        except queue.Empty:
            if exited:
                break
    return got


def _shard_gets(proxy: FaultProxy, name: str) -> list:
    return [r for r in list(proxy.log) if r.path.endswith(name) and r.method == "GET"]


@pytest.mark.timeout(120)
def test_four_processes_missing_one_shard_download_it_once(s3, s3_endpoint, tmp_path):
    """4 processes open the same missing shard at once through one cache folder: one GET of the shard at the
    proxy (its answer is held 2 s, so every process arrives while it is in flight), all 4 read the manifest's
    bytes from the cache, and the 3 that did not download each count one wait."""
    import s3fs

    opts, bucket = s3
    url = f"s3://{bucket}/claims/four.tar"
    s3fs.S3FileSystem(**opts).pipe_file(url, DATA)
    ctx = mp.get_context("fork")
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/claims/four.tar", "slow", times=1, method="GET", delay_s=2.0)
        via = proxy.storage_options(opts)
        start, out = ctx.Barrier(4), ctx.Queue()
        ps = [ctx.Process(target=_open_and_read, args=(via, url, str(tmp_path / "c"), start, out)) for _ in range(4)]
        for p in ps:
            p.start()
        results = _results(ps, out, 90)
        for p in ps:
            p.join(30)
        gets = _shard_gets(proxy, "/claims/four.tar")
    assert [p.exitcode for p in ps] == [0, 0, 0, 0]
    assert len(gets) == 1, gets
    assert all(ok and cached for _, ok, _, cached in results), results
    assert sorted(w for _, _, w, _ in results) == [0, 1, 1, 1], results
    assert not [n for n in os.listdir(tmp_path / "c") if n.startswith(".tmp-")]


def _download_slowly(opts: dict, url: str, cache_dir: str, claimed: "mp.Event") -> None:
    opener = ShardOpener(StorageConfig(storage_options=opts, cache_dir=cache_dir))
    claimed.set()  # about to claim: the test waits for the in-flight file before it starts the second process
    opener.open(url, len(DATA), SHA)


def _wait_then_read(opts: dict, url: str, cache_dir: str, out: "mp.Queue") -> None:
    opener = ShardOpener(StorageConfig(storage_options=opts, cache_dir=cache_dir))
    with opener.open(url, len(DATA), SHA) as f:
        out.put((f.read() == DATA, opener.cache_waits, opener.cache_path_of(f) is not None))


def _waiting_on_a_lock(pid: int) -> bool:
    with open("/proc/locks") as f:
        return any("->" in line and "FLOCK" in line and f" {pid} " in line for line in f)


@pytest.mark.timeout(120)
def test_a_downloader_killed_mid_download_is_taken_over(s3, s3_endpoint, tmp_path):
    """The downloader's GET is held at the proxy and the process is killed (SIGKILL: no cleanup runs) while a
    second process waits for its claim: the OS releases the claim, the second takes it over, downloads the
    shard itself and reads the manifest's bytes; no temporary file is left."""

    import s3fs

    opts, bucket = s3
    url = f"s3://{bucket}/claims/killed.tar"
    s3fs.S3FileSystem(**opts).pipe_file(url, DATA)
    cache_dir = str(tmp_path / "c")
    ctx = mp.get_context("fork")
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("/claims/killed.tar", "slow", times=1, method="GET", delay_s=60.0)
        via = proxy.storage_options(opts)
        claimed, out = ctx.Event(), ctx.Queue()
        first = ctx.Process(target=_download_slowly, args=(via, url, cache_dir, claimed))
        first.start()
        assert claimed.wait(60)
        for _ in range(600):  # the first GET reached the proxy: the claim is held, the download in flight
            if _shard_gets(proxy, "/claims/killed.tar"):
                break
            time.sleep(0.05)
        assert [n for n in os.listdir(cache_dir) if n.startswith(".tmp-")]
        second = ctx.Process(target=_wait_then_read, args=(via, url, cache_dir, out))
        second.start()
        for _ in range(600):  # it finds the claim and waits on it: a blocked flock of its own in /proc/locks
            if _waiting_on_a_lock(second.pid):
                break
            time.sleep(0.05)
        assert _waiting_on_a_lock(second.pid)
        os.kill(first.pid, signal.SIGKILL)
        first.join(30)
        results = _results([second], out, 60)
        second.join(30)
        gets = _shard_gets(proxy, "/claims/killed.tar")
    assert second.exitcode == 0 and len(results) == 1, (second.exitcode, results)
    ok, waits, cached = results[0]
    assert ok and cached
    assert waits == 1 and len(gets) == 2, (waits, gets)
    assert not [n for n in os.listdir(cache_dir) if n.startswith(".tmp-")]


@pytest.mark.timeout(120)
def test_a_sample_index_is_fetched_once_per_node_and_checked_on_every_hit(s3, s3_endpoint, tmp_path, caplog):
    """Two openers sharing a cache folder (two processes of a node) read a shard's index: one GET at the proxy.
    A cached index damaged on disk fails its own CRC-32: dropped (a warning names it) and fetched again; an
    index of other bytes from the store (it names another shard digest) is an error and never cached."""
    import logging

    import s3fs

    from shardkit.format.index import IndexDamage, SampleIndex, index_url
    from shardkit.format.indexio import index_from_walk
    from tests.support.data import write_dataset

    opts, bucket = s3
    ds = write_dataset(str(tmp_path / "ds"), num_samples=6, shard_size=6, size=(16, 12))
    info = ds.manifest.shards[0]
    shard = (tmp_path / "ds" / info.name).read_bytes()
    idx = index_from_walk(io.BytesIO(shard), info.name, len(shard), info.sha256).to_bytes()
    fs = s3fs.S3FileSystem(**opts)
    url = f"s3://{bucket}/idx/{info.name}"
    fs.pipe_file(index_url(url), idx)

    def check(data: bytes) -> SampleIndex:
        return SampleIndex.from_bytes(data, index_url(url), shard_bytes=info.bytes, shard_sha256=info.sha256)

    cache_dir = str(tmp_path / "c")
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        a, b = (ShardOpener(StorageConfig(storage_options=via, cache_dir=cache_dir)) for _ in range(2))
        assert len(a.fetch_sidecar(index_url(url), info.sha256, check)) == 6
        assert len(b.fetch_sidecar(index_url(url), info.sha256, check)) == 6
        assert len([r for r in proxy.log if r.path.endswith(".idx")]) == 1
        entry = os.path.join(cache_dir, f"{info.sha256}.idx")
        raw = bytearray(open(entry, "rb").read())
        raw[-3] ^= 0xFF
        open(entry, "wb").write(bytes(raw))
        with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
            assert len(b.fetch_sidecar(index_url(url), info.sha256, check)) == 6
        assert entry in caplog.text
        assert len([r for r in proxy.log if r.path.endswith(".idx")]) == 2
        assert open(entry, "rb").read() == idx  # fetched again, checked, kept
        other = "0" * 64  # an index that names other shard bytes: the store's copy is rejected, not cached
        with pytest.raises(IndexDamage):
            a.fetch_sidecar(
                index_url(url),
                other,
                lambda d: SampleIndex.from_bytes(d, index_url(url), shard_bytes=info.bytes, shard_sha256=other),
            )
        assert not os.path.exists(os.path.join(cache_dir, f"{other}.idx"))
