"""The read path delivers only bytes the manifest vouches for, through moto's S3 server and local HTTP servers.

Guarantees checked: every open checks the manifest's size (remote as local, a cache hit too); the
cache keeps a download only when its sha256 is the manifest's; an object replaced during a read is
one clear error, never spliced (s3fs's ``FileExpired``, and a reopen after a transient error that
finds another object); a second epoch over a cached dataset sends no shard GET; the index fetch
keeps to ``retry_budget_s``.
"""

from __future__ import annotations

import hashlib
import io
import random

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.errors import StorageError
from shardkit.storage.opener import ShardOpener, StorageConfig
from shardkit.storage.retry import RetryingFile, is_transient
from tests.support.faults import FaultProxy

BLOCK = 4096
DATA = random.Random(7).randbytes(5 * BLOCK + 123)
SHA = hashlib.sha256(DATA).hexdigest()


def _changed(data: bytes, kind: str, where: float) -> bytes:
    """``data`` changed by ``kind`` near fraction ``where`` of it: what a rewritten store may serve."""
    at = min(len(data) - 1, int(where * len(data)))
    return {
        "same": data,
        "truncate": data[:at],
        "zero": b"",
        "flip": data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :],
        "append": data + b"\0garbage",
        "replace": data[:at] + bytes((b + 7) % 256 for b in data[at:]),
    }[kind]


def _read_all(f) -> bytes:
    with f:
        out = io.BytesIO()
        while b := f.read(BLOCK):
            out.write(b)
        return out.getvalue()


def _fs(opts):
    import s3fs

    return s3fs.S3FileSystem(**opts)


# ----------------------------------------------------------------------------- changed objects, unit level


class _Obj(io.BytesIO):
    """A remote file as fsspec opens it: ``size`` and ``details`` (with an ETag)."""

    def __init__(self, data: bytes, etag: str, fail_reads: set, counter: list):
        super().__init__(data)
        self.size, self.details = len(data), {"ETag": etag}
        self._fail, self._n = fail_reads, counter

    def read(self, n=-1):
        self._n[0] += 1
        if self._n[0] in self._fail:
            raise ConnectionResetError("reset")
        return super().read(n)


@pytest.mark.parametrize("change", ["size", "etag", "none"])
def test_a_reopen_after_a_transient_error_must_find_the_same_object(change):
    """The object is replaced while a read is retried: the reopen finds it and raises, never splices."""
    versions = [(DATA, '"a"')]
    if change == "size":
        versions.append((DATA + b"x", '"a"'))
    elif change == "etag":
        versions.append((bytes(len(DATA)), '"b"'))
    counter = [0]

    def open_fn():
        data, etag = versions[min(len(versions) - 1, opens[0])]
        opens[0] += 1
        return _Obj(data, etag, {2}, counter)

    opens = [0]
    f = RetryingFile("s3://b/x.tar", open_fn, max_retries=3, retry_budget_s=60, sleep=lambda s: None)
    if change == "none":
        assert _read_all(f) == DATA
    else:
        with pytest.raises(StorageError, match=r"^s3://b/x.tar: changed while reading; was the dataset rewritten\?$"):
            _read_all(f)


def test_file_expired_is_not_transient():
    from s3fs.utils import FileExpired

    exc = FileExpired(filename="b/x.tar", e_tag='"a"')
    assert not is_transient(exc) and is_transient(ConnectionResetError())


class _Raising(io.BytesIO):
    """A remote file whose reads raise ``exc`` (counted in ``calls``)."""

    def __init__(self, exc: BaseException, calls: list):
        super().__init__(DATA)
        self.size, self.details, self._exc, self._calls = len(DATA), {"ETag": '"a"'}, exc, calls

    def read(self, n=-1):
        self._calls.append(n)
        raise self._exc


def test_an_object_that_expired_during_a_read_is_one_error_never_retried():
    """A backend read through fsspec's own file (not S3's or HTTP's ranged reads): ``FileExpired`` is the
    "changed while reading" error at once, without a retry."""
    from s3fs.utils import FileExpired

    calls: list = []
    f = RetryingFile(
        "gs://b/x.tar",
        lambda: _Raising(FileExpired(filename="b/x.tar", e_tag='"a"'), calls),
        max_retries=5,
        retry_budget_s=60,
        sleep=lambda s: None,
    )
    with pytest.raises(StorageError, match=r"^gs://b/x.tar: changed while reading; was the dataset rewritten\?$"):
        f.read(10)
    assert len(calls) == 1 and f.retries == 0


def test_a_server_without_range_requests_is_named_through_fsspecs_file():
    """fsspec's error for a server that answers a range request with the whole file: one line naming the cure."""
    calls: list = []
    exc = ValueError(
        "The HTTP server doesn't appear to support range requests. Only reading this file from the beginning"
    )
    f = RetryingFile(
        "https://h/x.tar", lambda: _Raising(exc, calls), max_retries=5, retry_budget_s=60, sleep=lambda s: None
    )
    with pytest.raises(StorageError, match=r"does not support Range requests.*cache_dir="):
        f.read(10)
    assert len(calls) == 1


# ----------------------------------------------------------------------------- through moto


@settings(
    phases=[Phase.explicit, Phase.generate],
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(["same", "truncate", "zero", "flip", "append", "replace"]),
    where=st.floats(0, 1),
    how=st.sampled_from(["stream", "ranges", "cache", "cache-ranges", "local", "memory"]),
)
@example(kind="truncate", where=0.5, how="memory")  # a backend read through fsspec's own file (not S3 or HTTP)
@example(kind="truncate", where=0.5, how="stream")
@example(kind="append", where=0.5, how="ranges")
@example(kind="truncate", where=0.5, how="local")
@example(kind="append", where=0.0, how="local")
@example(kind="flip", where=0.5, how="cache")
@example(kind="replace", where=0.9, how="cache-ranges")
@example(kind="truncate", where=0.5, how="cache")
def test_what_an_open_delivers_is_the_manifests_or_a_clear_error(s3, tmp_path_factory, kind, where, how):
    """Reference: a size that differs from the manifest's is the clear error on every path; a cached
    shard is exactly the manifest's bytes or the clear error; a streamed one of the right size is what
    the store holds (the loader's sample checksums judge its content)."""
    opts, bucket = s3
    tmp = tmp_path_factory.mktemp("t")
    served = _changed(DATA, kind, where)
    if how == "local":
        url = str(tmp / "s.tar")
        with open(url, "wb") as f:
            f.write(served)
    elif how == "memory":
        import fsspec

        url = f"memory://{tmp.name}/s.tar"
        fsspec.filesystem("memory").pipe_file(url, served)
    else:
        url = f"s3://{bucket}/{tmp.name}/s.tar"
        _fs(opts).pipe_file(url, served)
    cached = how.startswith("cache")
    cfg = StorageConfig(storage_options=opts, block_size=BLOCK, cache_dir=str(tmp / "c") if cached else None)
    opener = ShardOpener(cfg)
    open_fn = opener.open_ranges if how.endswith("ranges") else opener.open
    if served == DATA or (len(served) == len(DATA) and not cached):
        assert _read_all(open_fn(url, len(DATA), SHA)) == served
        return
    with pytest.raises(StorageError) as err:
        _read_all(open_fn(url, len(DATA), SHA))
    msg = str(err.value)
    assert msg.startswith(f"{url}: ") and "the shard changed since conversion: reconvert" in msg, msg
    if len(served) != len(DATA) and not cached:
        assert f"has {len(served)} bytes, the manifest says {len(DATA)}" in msg, msg


@pytest.mark.parametrize("where", ["s3", "local"])
def test_check_sizes_off_serves_what_is_readable(s3, tmp_path, where):
    opts, bucket = s3
    cut = DATA[: 2 * BLOCK]
    if where == "local":
        url = str(tmp_path / "s.tar")
        (tmp_path / "s.tar").write_bytes(cut)
    else:
        url = f"s3://{bucket}/cut/s.tar"
        _fs(opts).pipe_file(url, cut)
    opener = ShardOpener(StorageConfig(storage_options=opts, block_size=BLOCK, check_sizes=False))
    assert _read_all(opener.open(url, len(DATA))) == cut
    assert _read_all(opener.open_ranges(url, len(DATA))) == cut


def test_a_cache_hit_is_checked_against_the_size(s3, tmp_path, caplog):
    """An entry cut short after it was published is dropped (a warning names it) and fetched again."""
    import logging
    import os

    opts, bucket = s3
    url = f"s3://{bucket}/hit/s.tar"
    _fs(opts).pipe_file(url, DATA)
    opener = ShardOpener(StorageConfig(storage_options=opts, block_size=BLOCK, cache_dir=str(tmp_path / "c")))
    f = opener.open(url, len(DATA), SHA)
    path = opener.cache_path_of(f)
    assert path is not None and _read_all(f) == DATA
    os.truncate(path, 10)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        assert _read_all(opener.open(url, len(DATA), SHA)) == DATA
    assert path in caplog.text
    assert opener.cache_path_of(opener.open(url, len(DATA))) is None  # no content key: streamed


def test_drop_cached_then_open_downloads_again(s3, tmp_path, caplog):
    import logging

    opts, bucket = s3
    url = f"s3://{bucket}/drop/s.tar"
    _fs(opts).pipe_file(url, DATA)
    opener = ShardOpener(StorageConfig(storage_options=opts, block_size=BLOCK, cache_dir=str(tmp_path / "c")))
    path = opener.cache_path_of(opener.open(url, len(DATA), SHA))
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        assert opener.drop_cached(url, len(DATA), SHA, "sample 2's checksum failed")
    assert path in caplog.text and "sample 2's checksum failed" in caplog.text
    assert _read_all(opener.open(url, len(DATA), SHA)) == DATA


def test_an_object_replaced_mid_read_is_an_error_not_a_splice(s3, tmp_path):
    """s3fs asks for the ETag of the open (``If-Match``): a replaced object is ``FileExpired``, one clear error."""
    opts, bucket = s3
    url = f"s3://{bucket}/mid/s.tar"
    fs = _fs(opts)
    fs.pipe_file(url, DATA)
    opener = ShardOpener(StorageConfig(storage_options=opts, block_size=BLOCK, max_retries=3))
    f = opener.open_ranges(url, len(DATA))
    assert f.read(BLOCK) == DATA[:BLOCK]
    fs.pipe_file(url, bytes(len(DATA)))  # same size, other bytes
    with pytest.raises(StorageError, match=r"changed while reading; was the dataset rewritten\?"):
        f.read(BLOCK)
    assert opener.retries == 0


def test_a_retry_after_the_object_was_replaced_is_an_error_not_a_splice(s3, s3_endpoint, tmp_path):
    opts, bucket = s3
    url = f"s3://{bucket}/retry/s.tar"
    fs = _fs(opts)
    fs.pipe_file(url, DATA)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        opener = ShardOpener(StorageConfig(storage_options=via, block_size=BLOCK, max_retries=3))
        f = opener.open_ranges(url, len(DATA))
        assert f.read(BLOCK) == DATA[:BLOCK]
        fs.pipe_file(url, bytes(len(DATA)))  # same size, another ETag
        proxy.fail("/retry/s.tar", "reset", times=1, method="GET")  # the next read breaks: a reopen follows
        with pytest.raises(StorageError, match=r"changed while reading"):
            f.read(BLOCK)


# ----------------------------------------------------------------------------- requests counted at the proxy


def test_a_second_pass_over_cached_ranges_sends_no_shard_get(s3, s3_endpoint, tmp_path):
    """``open_ranges`` with a cache and a content key reads the cached file: the second pass sends no GET."""
    opts, bucket = s3
    url = f"s3://{bucket}/ranges/s.tar"
    _fs(opts).pipe_file(url, DATA)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        opener = ShardOpener(StorageConfig(storage_options=via, block_size=BLOCK, cache_dir=str(tmp_path / "c")))
        offsets = [(3 * BLOCK, 100), (10, 2000), (len(DATA) - 50, 50)]
        for epoch in range(2):
            if epoch == 1:
                proxy.log.clear()
            with opener.open_ranges(url, len(DATA), SHA) as f:
                for lo, n in offsets:
                    f.seek(lo)
                    assert f.read(n) == DATA[lo : lo + n]
        gets = [r for r in proxy.log if r.method == "GET" and "/ranges/s.tar" in r.path]
    assert gets == [], gets


def test_the_index_fetch_keeps_to_the_retry_budget(s3, s3_endpoint, monkeypatch):
    """An endpoint that stays down: ``fetch`` gives up once ``retry_budget_s`` is spent, not after ``max_retries``."""
    import shardkit.storage.opener as opener_mod

    opts, bucket = s3
    clock = [0.0]

    class FakeTime:
        @staticmethod
        def monotonic() -> float:
            return clock[0]

        @staticmethod
        def sleep(s: float) -> None:
            clock[0] += s

    monkeypatch.setattr(opener_mod, "time", FakeTime)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        opener = ShardOpener(StorageConfig(storage_options=via, max_retries=1000, retry_budget_s=3.0))
        proxy.down()
        with pytest.raises(StorageError, match="still failing after"):
            opener.fetch(f"s3://{bucket}/idx/s.idx")
    assert clock[0] <= 3.0 + 5.0  # the budget, plus at most one capped backoff
    assert opener.retries < 100


# ----------------------------------------------------------------------------- a server that never answers


@pytest.fixture()
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields (url, accepted count)."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    conns: list = []

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}", conns
    srv.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept() (a close alone leaves it waiting)
    srv.close()
    t.join(5)
    for c in conns:
        c.close()


@pytest.mark.timeout(45)  # the budget ends the read in seconds; a request without a read timeout hangs to here
@pytest.mark.parametrize("scheme", ["s3", "http"])
def test_a_server_that_never_answers_is_bounded_and_named(silent_server, scheme):
    """Every request has a read timeout; after a silent attempt the read stops when another could not
    finish inside the budget, and the error says the server did not answer (not "raise the budget")."""
    base, conns = silent_server
    if scheme == "s3":
        url = "s3://bkt/ds/s.tar"
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": base, "region_name": "us-east-1"}}
        per_attempt, attempt_s = 5, 5 * 0.5 + 2.0  # s3fs's own tries of one request, and its sleeps
    else:
        url = f"{base}/ds/s.tar"
        opts, per_attempt, attempt_s = {}, 2, 2 * 0.5  # a size probe (HEAD), then a GET
    cfg = StorageConfig(storage_options=opts, retry_budget_s=3.0, request_timeout_s=0.5, max_retries=1000)
    with pytest.raises(StorageError, match=r"did not answer within 0.5 s") as err:
        ShardOpener(cfg).open(url, 100).read(1)  # the open sends nothing: the first read is the first request
    assert "retry_budget_s does not help" in str(err.value)
    fit = max(1, int(3.0 // attempt_s))  # the attempts that fit in the budget (at least one)
    assert len(conns) <= per_attempt * fit, len(conns)


# ----------------------------------------------------------------------------- HTTP without Range requests


def test_a_server_without_range_requests_is_named_and_the_cache_works(http_root, tmp_path):
    """``http.server`` ignores Range: a ranged read says so in one line; a cache download streams the
    whole shard, restarting it after a connection cut mid-way, and holds exactly the manifest's bytes."""
    base, directory = http_root
    big = random.Random(3).randbytes(3 * (8 << 20) // 2)  # more than one download block
    sha = hashlib.sha256(big).hexdigest()
    with open(f"{directory}/s.tar", "wb") as f:
        f.write(big)
    url = f"{base}/s.tar"
    plain = ShardOpener(StorageConfig(block_size=BLOCK, max_retries=2))
    with pytest.raises(StorageError, match=r"^\S+: the server does not support Range requests .*cache_dir="):
        _read_all(plain.open(url, len(big)))
    with FaultProxy(base) as proxy:
        proxy.fail("/s.tar", "cut", times=1, method="GET")
        cached = ShardOpener(StorageConfig(block_size=BLOCK, cache_dir=str(tmp_path / "c"), max_retries=5))
        f = cached.open(f"{proxy.url}/s.tar", len(big), sha)
        assert cached.cache_path_of(f) is not None and _read_all(f) == big
        assert "cut" in [r.outcome for r in proxy.log]


# ----------------------------------------------------------------------------- no size probe


@pytest.mark.parametrize("how", ["stream", "ranges", "cache"])
@pytest.mark.parametrize("kind", ["same", "truncate", "append", "zero"])
def test_an_open_sends_no_size_probe_and_a_changed_size_is_caught_at_the_first_read(
    s3, s3_endpoint, tmp_path, kind, how
):
    """The manifest's size is trusted for the open (no HEAD at the proxy); the first ranged GET's
    ``Content-Range`` total (or a range past the end) tells a changed size at once: one line naming the
    URL, the received and the expected size, after one GET (never retried, never served)."""
    opts, bucket = s3
    served = _changed(DATA, kind, 0.5)
    url = f"s3://{bucket}/probe-{kind}-{how}/s.tar"
    if served:
        _fs(opts).pipe_file(url, served)
    else:
        _fs(opts).touch(url)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        cfg = StorageConfig(
            storage_options=via, block_size=BLOCK, cache_dir=str(tmp_path / "c") if how == "cache" else None
        )
        opener = ShardOpener(cfg)
        open_fn = opener.open_ranges if how == "ranges" else opener.open
        if kind == "same":
            assert _read_all(open_fn(url, len(DATA), SHA)) == DATA
        else:
            with pytest.raises(StorageError) as err:
                _read_all(open_fn(url, len(DATA), SHA))
            assert str(err.value) == (
                f"{url}: has {len(served)} bytes, the manifest says {len(DATA)}; the shard changed since "
                f"conversion: reconvert, or check with `shardkit verify s3://{bucket}/probe-{kind}-{how}`"
            )
        shard = [r for r in proxy.log if f"/probe-{kind}-{how}/s.tar" in r.path]
    assert [r for r in shard if r.method != "GET"] == [], shard
    if kind != "same":
        assert len(shard) == 1, shard  # the first GET (S3 names the real size of a range past the end)
    assert opener.retries == 0
