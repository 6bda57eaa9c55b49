"""The local shard cache: content-addressed, checked against the manifest, LRU under a byte limit,
safe with several processes sharing the directory."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import multiprocessing as mp
import os
import random
import threading
import time

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.errors import StorageError
from shardkit.storage.cache import ShardCache


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _payload(i: int) -> bytes:
    return bytes([i % 251]) * (1000 + 137 * i)


def _download(data: bytes):
    def write(sink):
        for k in range(0, len(data), 300):  # slow-ish, chunked writes
            sink.write(data[k : k + 300])

    return write


def _fetch(cache: ShardCache, url: str, data: bytes, served: "bytes | None" = None):
    """``cache.fetch`` of the shard ``data`` whose download delivers ``served`` (default: ``data``)."""
    return cache.fetch(url, len(data), _sha(data), _download(data if served is None else served))


def _put(cache: ShardCache, url: str, data: bytes) -> str:
    f = _fetch(cache, url, data)
    assert f is not None
    f.close()
    return f.name


def _worker(cache_dir: str, limit: int, seed: int, n: int, bad: "mp.Value", shards: int) -> None:
    cache = ShardCache(cache_dir, limit)
    rng = random.Random(seed)
    for _ in range(n):
        i = rng.randrange(shards)
        f = _fetch(cache, f"s3://bucket/shard-{i}.tar", _payload(i))
        if f is None:
            continue  # no room while the others download: streamed
        with f:
            if f.read() != _payload(i):
                bad.value += 1


def test_lru_eviction_and_limit(tmp_path):
    cache = ShardCache(str(tmp_path), 5000)
    p0 = _put(cache, "s3://b/0.tar", b"a" * 1000)
    p1 = _put(cache, "s3://b/1.tar", b"b" * 2000)
    past = time.time() - 100
    os.utime(p1, (past, past))  # 0 is now the most recently used
    _put(cache, "s3://b/2.tar", b"c" * 2500)
    assert os.path.exists(p0) and not os.path.exists(p1)
    assert cache.usage() <= 5000
    assert _fetch(cache, "s3://b/huge.tar", b"x" * 6000) is None  # never fits: streamed


def test_download_size_mismatch_leaves_nothing(tmp_path):
    cache = ShardCache(str(tmp_path), 10_000)
    with pytest.raises(StorageError, match="has 5 bytes, the manifest says 100; the shard changed since conversion"):
        cache.fetch("s3://b/x.tar", 100, "0" * 64, lambda f: f.write(b"short"))
    assert cache.usage() == 0 and os.listdir(tmp_path) == [".lock"]


def _changed(data: bytes, kind: str, where: float) -> bytes:
    """``data`` changed by ``kind`` near fraction ``where`` of its length (the reference for what a store may serve)."""
    at = min(len(data) - 1, int(where * len(data)))
    if kind == "truncate":
        return data[:at]
    if kind == "zero":
        return b""
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
    if kind == "append":
        return data + b"\0garbage"
    if kind == "replace":  # same size, other bytes from ``at`` on
        return data[:at] + bytes((b + 7) % 256 for b in data[at:])
    return data


KINDS = st.sampled_from(["same", "truncate", "zero", "flip", "append", "replace"])


@settings(phases=[Phase.explicit, Phase.generate], max_examples=25, deadline=None)
@given(kind=KINDS, where=st.floats(0, 1), size=st.integers(1, 5000), limit=st.sampled_from([None, 20_000]))
@example(kind="flip", where=0.5, size=1000, limit=None)
@example(kind="replace", where=0.0, size=1000, limit=None)
@example(kind="truncate", where=0.5, size=1000, limit=None)
@example(kind="same", where=0.0, size=1000, limit=None)
def test_the_cache_keeps_only_the_manifests_bytes(tmp_path_factory, kind, where, size, limit):
    """Whatever the store serves, the cache hands out exactly the manifest's bytes or raises the clear
    error and keeps nothing; the next fetch of a good download is served, the bad one never."""
    d = str(tmp_path_factory.mktemp("cache"))
    cache = ShardCache(d, limit)
    data = random.Random(size).randbytes(size)
    served = _changed(data, kind, where)
    if served == data:
        with _fetch(cache, "s3://b/s.tar", data, served) as f:
            assert f.read() == data
    else:
        with pytest.raises(StorageError, match="the shard changed since conversion: reconvert, or check with"):
            _fetch(cache, "s3://b/s.tar", data, served)
        assert sorted(os.listdir(d)) == [".lock"]
    with _fetch(cache, "s3://b/s.tar", data) as f:  # a good download afterwards is served and kept
        assert f.read() == data


def test_entries_are_keyed_by_content_not_url(tmp_path):
    """A dataset converted again at the same URL gets the new shard, never the stale cached one."""
    cache = ShardCache(str(tmp_path))
    old, new = b"old shard" * 100, b"new shard" * 100
    with _fetch(cache, "s3://b/ds/train-0.tar", old) as f:
        assert f.read() == old
    with _fetch(cache, "s3://b/ds/train-0.tar", new) as f:
        assert f.read() == new
    with cache.fetch("s3://b/ds/train-0.tar", len(old), _sha(old), lambda s: pytest.fail("a hit")) as f:
        assert f.read() == old


@pytest.mark.parametrize("cut", [0, 500])
def test_an_entry_cut_short_is_dropped_and_fetched_again(tmp_path, caplog, cut):
    """A cache file cut short (a crash or a power loss after the rename) is dropped with a warning naming it."""
    cache = ShardCache(str(tmp_path))
    data = random.Random(1).randbytes(1000)
    path = _put(cache, "s3://b/s.tar", data)
    os.truncate(path, cut)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"), _fetch(cache, "s3://b/s.tar", data) as f:
        assert f.read() == data
    assert path in caplog.text and f"{cut} bytes, the manifest says 1000" in caplog.text


def test_a_shard_evicted_after_the_lock_is_released_is_still_read(tmp_path, monkeypatch):
    """Another process may evict an entry the moment the lock is released: the file was opened before."""
    cache = ShardCache(str(tmp_path), 10_000)
    data = random.Random(2).randbytes(1000)
    _put(cache, "s3://b/s.tar", data)
    real = cache._locked

    @contextlib.contextmanager
    def then_evict():
        with real():
            yield
        for name in os.listdir(tmp_path):  # what an evicting process does next (downloads are not evicted)
            if name != ".lock" and not name.startswith(".tmp-"):
                os.unlink(os.path.join(tmp_path, name))

    monkeypatch.setattr(cache, "_locked", then_evict)
    for _ in range(2):  # a hit, then a miss (downloaded, published, evicted)
        with _fetch(cache, "s3://b/s.tar", data) as f:
            assert f.read() == data


def test_a_download_is_fsynced_before_it_is_published(tmp_path, monkeypatch):
    """A power loss after the rename must not leave a published entry whose bytes never reached the disk."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.fspath(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    _put(ShardCache(str(tmp_path)), "s3://b/s.tar", b"d" * 100)
    [(_, tmp)] = [e for e in events if e[0] == "replace"]
    assert ("fsync", tmp) in events and events.index(("fsync", tmp)) < events.index(("replace", tmp)), events


def test_drop_removes_the_entry_and_names_it(tmp_path, caplog):
    cache = ShardCache(str(tmp_path))
    data = b"x" * 100
    path = _put(cache, "s3://b/s.tar", data)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        assert cache.drop(_sha(data), len(data), "sample 3 failed its checksum")
    assert not os.path.exists(path) and path in caplog.text and "sample 3 failed its checksum" in caplog.text
    assert not cache.drop(_sha(data), len(data), "again")


def test_a_full_disk_streams_without_the_cache(tmp_path, caplog):
    """ENOSPC while downloading: a warning naming the cache folder, no temporary file, None (the caller streams)."""
    cache = ShardCache(str(tmp_path))
    data = b"y" * 1000

    def fill(sink):
        sink.write(data[:300])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        assert cache.fetch("s3://b/s.tar", len(data), _sha(data), fill) is None
    assert str(tmp_path) in caplog.text and "full" in caplog.text
    assert os.listdir(tmp_path) == [".lock"]


def _stalled_download(cache_dir: str, started: "mp.Event") -> None:
    def stall(sink):
        sink.write(b"z" * 10)
        started.set()
        time.sleep(600)  # killed before it ends

    ShardCache(cache_dir).fetch("s3://b/slow.tar", 1000, "1" * 64, stall)


def test_temporary_files_of_dead_downloaders_are_removed_without_a_limit(tmp_path):
    """A live downloader's temporary file stays; once it is killed, the next miss removes it (no cache_size)."""
    d = str(tmp_path)
    ctx = mp.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_stalled_download, args=(d, started))
    p.start()
    try:
        assert started.wait(60)
        tmp = [n for n in os.listdir(d) if n.startswith(".tmp-")]
        assert len(tmp) == 1
        cache = ShardCache(d)
        _put(cache, "s3://b/a.tar", b"a" * 10)
        assert tmp[0] in os.listdir(d)  # its downloader is alive: kept
    finally:
        p.kill()
        p.join(30)
    _put(cache, "s3://b/b.tar", b"b" * 10)
    assert not [n for n in os.listdir(d) if n.startswith(".tmp-")]


def _run_sharing(d: str, limit: int, procs: int, n: int, shards: int) -> tuple[int, int, list]:
    ctx = mp.get_context("fork")
    bad = ctx.Value("i", 0)
    ps = [ctx.Process(target=_worker, args=(d, limit, s, n, bad, shards)) for s in range(procs)]
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
    for p in ps:
        p.start()
    for p in ps:
        p.join(timeout=120)
    stop.set()
    t.join(timeout=5)
    return bad.value, peak, [p.exitcode for p in ps]


def test_processes_racing_eviction_always_read_whole_shards(tmp_path):
    """Room for one shard, four processes: every open returns the shard (never FileNotFoundError)."""
    d = str(tmp_path / "cache")
    os.makedirs(d)
    bad, _, codes = _run_sharing(d, len(_payload(3)), 4, 60, 3)
    assert codes == [0, 0, 0, 0] and bad == 0


@pytest.mark.slow
def test_processes_sharing_cache_never_exceed_limit(tmp_path):
    limit = 8000
    d = str(tmp_path / "cache")
    os.makedirs(d)
    bad, peak, codes = _run_sharing(d, limit, 3, 40, 12)
    assert codes == [0, 0, 0] and bad == 0
    assert 0 < peak <= limit
    assert ShardCache(d, limit).usage() <= limit
