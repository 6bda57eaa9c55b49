"""Guards for the storage layer's older promises, fast and in-process, each against a simple reference.

* the shard cache: a hit refreshes the LRU stamp; a shard that cannot fit evicts nothing;
* remote reads: a fake flaky file, every byte once, resumed at the failed offset, bounded waits.

The mutant gate (``tests/mutants/loader_core.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import io
import os
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardkit.errors import StorageError

# ----------------------------------------------------------------------------- the shard cache


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _put(cache, name: str, data: bytes):
    """Cache ``data`` (a download that writes it) and return the cache file's path (or None)."""
    f = cache.fetch(f"s3://b/{name}", len(data), _sha(data), lambda sink: sink.write(data))
    if f is None:
        return None
    f.close()
    return f.name


def test_a_cache_hit_refreshes_the_lru_stamp(tmp_path):
    """LRU, not FIFO: a shard read again (through ``fetch``) outlives one fetched after it but not read since."""
    from shardkit.storage.cache import ShardCache

    cache = ShardCache(str(tmp_path), 3000)
    p0 = _put(cache, "0.tar", b"a" * 1000)
    past = time.time() - 100
    os.utime(p0, (past, past))
    p1 = _put(cache, "1.tar", b"b" * 1000)
    os.utime(p1, (past + 10, past + 10))
    hit = cache.fetch("s3://b/0.tar", 1000, _sha(b"a" * 1000), lambda f: pytest.fail("a hit must not download"))
    assert hit is not None and hit.name == p0  # 0 is now the newest
    hit.close()
    _put(cache, "2.tar", b"c" * 1500)
    assert os.path.exists(p0) and not os.path.exists(p1)


def test_a_shard_too_large_for_the_cache_evicts_nothing(tmp_path):
    """A shard larger than the whole cache is streamed (``None``) and the cached shards stay."""
    from shardkit.storage.cache import ShardCache

    cache = ShardCache(str(tmp_path), 3000)
    kept = [_put(cache, f"{i}.tar", bytes([i]) * 1000) for i in range(2)]
    assert cache.fetch("s3://b/huge.tar", 5000, "0" * 64, lambda f: pytest.fail("must not download")) is None
    assert all(os.path.exists(p) for p in kept) and cache.usage() == 2000


# ----------------------------------------------------------------------------- remote reads (RetryingFile)


class _Flaky(io.BytesIO):
    """A remote file that fails (``ConnectionError``) on the reads whose numbers are in ``fail``, shared across reopens."""

    def __init__(self, data: bytes, plan: dict, log: list):
        super().__init__(data)
        self.plan, self.log = plan, log

    def read(self, n=-1):
        self.plan["reads"] += 1
        if self.plan["reads"] in self.plan["fail"]:
            raise self.plan.get("exc", ConnectionError)("connection reset")
        start = self.tell()
        b = super().read(n)
        self.log.append((start, start + len(b)))
        return b


def _retrying(data: bytes, fail: set, *, max_retries: int = 5, budget: float = 60.0, exc=ConnectionError, sleeps=None):
    from shardkit.storage.retry import RetryingFile

    plan, log = {"reads": 0, "fail": fail, "exc": exc}, []
    f = RetryingFile(
        "s3://b/s.tar",
        lambda: _Flaky(data, plan, log),
        max_retries=max_retries,
        retry_budget_s=budget,
        sleep=(sleeps.append if sleeps is not None else lambda s: None),
    )
    return f, log


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=12), st.sets(st.integers(1, 14), max_size=4))
@example([10, 10, 10], {2})
def test_flaky_reads_deliver_every_byte_once_resumed_at_the_failed_offset(chunks, fail):
    """Reads of any sizes with failures anywhere: the bytes are the file's, and after each failure the next
    request starts at the offset of the failed read (nothing before it is fetched again)."""
    data = bytes(range(256)) * 20
    f, log = _retrying(data, fail)
    got = b"".join(f.read(n) for n in chunks)
    assert got == data[: len(got)] and len(got) == min(sum(chunks), len(data))
    assert sum(b - a for a, b in log) == len(got)  # every byte fetched once


def test_exactly_max_retries_retries_then_success():
    """``max_retries=3``: three failures of one read are retried and the read succeeds; four give up naming URL and offset."""
    f, _ = _retrying(b"abcdef", {1, 2, 3}, max_retries=3)
    assert f.read(3) == b"abc" and f.retries == 3
    f, _ = _retrying(b"abcdef", set(), max_retries=3)
    f.read(2)
    f._f.plan["fail"] = {2, 3, 4, 5}
    with pytest.raises(StorageError, match=r"s3://b/s.tar: read at byte 2 still failing after 3 retries"):
        f.read(2)


def test_denied_access_and_bugs_are_not_retried():
    """``PermissionError`` is a :class:`StorageError` at once; an error that is not I/O (a bug) is raised as itself."""
    f, _ = _retrying(b"abcdef", set())
    f._f.plan.update(fail={1}, exc=PermissionError)
    with pytest.raises(StorageError, match="cannot read"):
        f.read(2)
    assert f.retries == 0
    f, _ = _retrying(b"abcdef", set())
    f._f.plan.update(fail={1}, exc=KeyError)
    with pytest.raises(KeyError):
        f.read(2)
    assert f.retries == 0


def test_waits_never_pass_the_budget():
    """Each wait is at most the budget left: giving up comes within ``retry_budget_s`` plus one attempt."""
    sleeps: list[float] = []
    f, _ = _retrying(b"abcdef", set(range(1, 40)), max_retries=30, budget=0.02, sleeps=sleeps)
    with pytest.raises(StorageError):
        f.read(2)
    assert sleeps and max(sleeps) <= 0.02
