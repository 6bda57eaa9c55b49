"""The local shard cache: LRU under a byte limit, safe with several processes sharing the directory."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import threading
import time

import pytest

from shardkit.storage.cache import ShardCache


def _payload(i: int) -> bytes:
    return bytes([i % 251]) * (1000 + 137 * i)


def _download(i):
    def write(f):
        data = _payload(i)
        for k in range(0, len(data), 300):  # slow-ish, chunked writes
            f.write(data[k : k + 300])

    return write


def _worker(cache_dir: str, limit: int, seed: int, n: int, bad: "mp.Value") -> None:
    cache = ShardCache(cache_dir, limit)
    rng = random.Random(seed)
    for _ in range(n):
        i = rng.randrange(12)
        path = cache.fetch(f"s3://bucket/shard-{i}.tar", len(_payload(i)), _download(i))
        try:
            with open(path, "rb") as f:
                if f.read() != _payload(i):
                    bad.value += 1
        except FileNotFoundError:
            pass  # evicted between fetch and open by another process: allowed, readers reopen


def test_lru_eviction_and_limit():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cache = ShardCache(d, 5000)
        p0 = cache.fetch("s3://b/0.tar", 1000, lambda f: f.write(b"a" * 1000))
        cache.fetch("s3://b/1.tar", 2000, lambda f: f.write(b"b" * 2000))
        time.sleep(0.01)
        os.utime(p0)  # 0 is now the most recently used
        cache.fetch("s3://b/2.tar", 2500, lambda f: f.write(b"c" * 2500))
        assert os.path.exists(p0) and not os.path.exists(cache.path_for("s3://b/1.tar"))
        assert cache.usage() <= 5000
        assert cache.fetch("s3://b/huge.tar", 6000, lambda f: f.write(b"x" * 6000)) is None  # never fits: streamed


def test_download_size_mismatch_leaves_nothing(tmp_path):
    from shardkit.errors import StorageError

    cache = ShardCache(str(tmp_path), 10_000)
    with pytest.raises(StorageError, match="manifest says"):
        cache.fetch("s3://b/x.tar", 100, lambda f: f.write(b"short"))
    assert cache.usage() == 0 and os.listdir(tmp_path) == [".lock"]


@pytest.mark.slow
def test_processes_sharing_cache_never_exceed_limit(tmp_path):
    limit = 8000
    d = str(tmp_path / "cache")
    os.makedirs(d)
    ctx = mp.get_context("fork")
    bad = ctx.Value("i", 0)
    procs = [ctx.Process(target=_worker, args=(d, limit, s, 40, bad)) for s in range(3)]
    peak = 0
    stop = threading.Event()

    def monitor():
        nonlocal peak
        while not stop.is_set():
            try:
                total = sum(e.stat().st_size for e in os.scandir(d) if e.name != ".lock")
            except FileNotFoundError:
                continue
            peak = max(peak, total)

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    stop.set()
    t.join(timeout=5)
    assert all(p.exitcode == 0 for p in procs)
    assert bad.value == 0
    assert 0 < peak <= limit
    assert ShardCache(d, limit).usage() <= limit
