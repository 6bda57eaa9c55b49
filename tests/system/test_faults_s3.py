"""Object storage that fails mid-stream: errors, resets, cut responses and outages, injected by a proxy.

Guarantees checked: reads retry with backoff and resume with a range request at the byte offset
where they broke; the epoch completes with every sample exactly once; the retry count is in the
loader stats; an outage longer than the budget is one clear error naming the URL, not a hang.
"""

from __future__ import annotations

import io
import re
import threading
import types

import pytest

import shardkit
from shardkit.errors import ManifestError, StorageError
from shardkit.storage.retry import RetryingFile, backend_options, is_transient
from tests.support.data import write_dataset
from tests.support.faults import FaultProxy, free_port
from tests.support.probes import wait_for
from tests.support.s3 import remote_dataset

BLOCK = 8192  # small read-ahead blocks: each shard takes several range requests
KW = dict(
    batch_size=5,
    size=16,
    pin_memory=False,
    with_keys=True,
    multiprocessing_context="fork",
    block_size=BLOCK,
    shuffle_buffer=5,
    shuffle_initial=5,
)


@pytest.fixture(autouse=True)
def _collect_clients():
    """Collect this test's loaders and fsspec clients now: collected later (by chance, in another
    test) their session finalizers cost that test seconds."""
    yield
    import gc

    gc.collect()


# ----------------------------------------------------------------------------- RetryingFile alone


class FlakyFile(io.BytesIO):
    """A file that raises ``ConnectionResetError`` on the reads listed in ``fail_at`` (read number)."""

    def __init__(self, data: bytes, plan: dict, log: list):
        super().__init__(data)
        self.plan, self.log = plan, log

    def read(self, n=-1):
        self.plan["reads"] += 1
        self.log.append(("read", self.tell(), n))
        if self.plan["reads"] in self.plan["fail_at"]:
            raise ConnectionResetError("connection reset by peer")
        return super().read(n)


def _flaky(data: bytes, fail_at: set[int]):
    plan, log, opens = {"reads": 0, "fail_at": fail_at}, [], []

    def open_fn():
        opens.append(1)
        return FlakyFile(data, plan, log)

    return open_fn, log, opens


def test_retry_resumes_at_the_failed_offset_not_the_start():
    data = bytes(range(256)) * 40
    open_fn, log, opens = _flaky(data, fail_at={3, 4})
    seen = []
    f = RetryingFile(
        "s3://b/x.tar",
        open_fn,
        max_retries=5,
        retry_budget_s=10,
        on_retry=lambda u, o, e: seen.append(o),
        sleep=lambda s: None,
    )
    out = f.read(1000) + f.read(1000)
    f.seek(5000)
    out += f.read(3000)  # fails twice (reads 3 and 4), then succeeds on a fresh file
    assert out == data[:2000] + data[5000:8000]
    assert seen == [5000, 5000] and f.retries == 2 and len(opens) == 3
    assert [entry[1] for entry in log] == [0, 1000, 5000, 5000, 5000]  # every retry starts at the failed read's offset
    assert f.read() == data[8000:] and f.tell() == len(data)


def test_gives_up_after_max_retries_naming_url_and_offset():
    open_fn, _, _ = _flaky(b"x" * 100, fail_at=set(range(2, 100)))
    f = RetryingFile(
        "s3://bucket/ds/train-000003.tar", open_fn, max_retries=3, retry_budget_s=100, sleep=lambda s: None
    )
    f.read(10)
    with pytest.raises(
        StorageError, match=r"s3://bucket/ds/train-000003.tar: read at byte 10 still failing after 3 retries"
    ):
        f.read(10)


def test_outage_longer_than_budget_is_a_bounded_error(monkeypatch):
    """Given up within the budget plus one attempt: every attempt starts before the budget (counted from
    the first failure) has run out, the last failure is past it, and the error follows that failure at once.
    Time is a clock the attempts and the waits advance, so this holds exactly on any machine."""
    now = [1000.0]
    starts, ends, sleeps = [], [], []

    def open_fn():
        starts.append(now[0])
        now[0] += 0.05  # an attempt that takes a while (a connect timeout, say)
        ends.append(now[0])
        raise ConnectionRefusedError("connection refused")

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    monkeypatch.setattr("shardkit.storage.retry.time", types.SimpleNamespace(monotonic=lambda: now[0]))
    budget = 0.6
    with pytest.raises(StorageError, match=r"s3://b/x.tar: read at byte 0 still failing .* over \d") as info:
        RetryingFile("s3://b/x.tar", open_fn, max_retries=1000, retry_budget_s=budget, sleep=sleep)
    first = ends[0]
    assert len(starts) > 2 and all(t <= first + budget + 1e-9 for t in starts), (first, starts)
    assert ends[-1] - first >= budget  # not given up early
    assert len(sleeps) == len(starts) - 1 and now[0] == ends[-1]  # no wait after the last attempt
    spent = float(re.search(r"over ([\d.]+) s", str(info.value)).group(1))  # as reported, rounded to 0.1 s
    assert abs(spent - (ends[-1] - first)) <= 0.05 + 1e-9, spent


def _requested_sleeps(url: str, failures: int, budget: float = 1000.0) -> list[float]:
    """The waits RetryingFile asks for while a read of ``url`` fails ``failures`` times, then succeeds."""
    open_fn, _, _ = _flaky(b"x" * 100, fail_at=set(range(1, failures + 1)))
    sleeps: list[float] = []
    f = RetryingFile(url, open_fn, max_retries=failures + 1, retry_budget_s=budget, sleep=sleeps.append)
    assert f.read(10) == b"x" * 10 and f.retries == failures
    return sleeps


def test_retries_back_off_exponentially_capped_with_jitter():
    urls = [f"s3://b/ds/train-{i:06d}.tar" for i in range(16)]
    runs = {u: _requested_sleeps(u, 24) for u in urls}
    for u, s in runs.items():
        assert len(s) == 24 and all(x > 0 for x in s), s
        assert s == _requested_sleeps(u, 24)  # deterministic: a function of (url, attempt), no clock, no pid
        # growth: each wait doubles (within the jitter factor 2) until the cap...
        assert all(1.0 <= b / a <= 4.0 for a, b in zip(s[:5], s[1:6])), s
        assert s[5] >= 8 * s[0], s
        # ... cap: the late waits stop growing (within the jitter) and stay at most 5 s
        late = s[-8:]
        assert max(late) <= 2 * min(late) and max(s) <= 5.0, late
    # jitter: the same attempt waits differently for different shards, by at most a factor 2
    for attempt in (0, 3, 20):
        waits = [runs[u][attempt] for u in urls]
        assert len(set(waits)) > len(urls) // 2 and max(waits) <= 2 * min(waits), waits
    # and no wait outlasts the budget that is left
    assert max(_requested_sleeps(urls[0], 12, budget=0.3)) <= 0.3


def test_what_is_retried():
    from botocore.exceptions import EndpointConnectionError

    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError()) and is_transient(OSError(5, "EIO"))
    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert not is_transient(FileNotFoundError()) and not is_transient(PermissionError())
    assert not is_transient(ValueError("bug")) and not is_transient(KeyboardInterrupt())
    assert not is_transient(StorageError("x"))

    def open_fn():
        raise PermissionError("AccessDenied")

    with pytest.raises(StorageError, match="s3://b/x.tar: cannot read .*AccessDenied"):
        RetryingFile("s3://b/x.tar", open_fn, max_retries=5, retry_budget_s=5, sleep=lambda s: None)


def test_botocore_retries_off_only_where_we_own_them():
    assert backend_options("s3://b/x", {})["config_kwargs"] == {"retries": {"total_max_attempts": 1}}
    mine = {"config_kwargs": {"retries": {"max_attempts": 9}, "read_timeout": 5}}
    assert backend_options("s3://b/x", mine) is mine
    kept = backend_options("s3://b/x", {"config_kwargs": {"read_timeout": 5}, "key": "k"})
    assert kept == {"config_kwargs": {"read_timeout": 5, "retries": {"total_max_attempts": 1}}, "key": "k"}
    assert backend_options("https://h/x", {"a": 1}) == {"a": 1}


# ----------------------------------------------------------------------------- through moto + proxy


@pytest.fixture()
def remote_ds(tmp_path, s3):
    """A 60-sample dataset (6 shards of ~28 KB) on moto; yields (dataset, bucket, storage options)."""
    return remote_dataset(tmp_path, s3, 60)


def _via(proxy: FaultProxy, opts: dict) -> dict:
    return proxy.storage_options(opts)


def _ranges(proxy: FaultProxy, path_part: str):
    out = []
    for r in proxy.log:
        if r.method == "GET" and path_part in r.path:
            m = re.match(r"bytes=(\d+)-(\d+)", r.range)
            out.append((r.path, int(m.group(1)) if m else None, int(m.group(2)) if m else None, r.outcome))
    return out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_flaky_endpoint_every_sample_once_with_retries_counted(remote_ds, s3_endpoint):
    ds, bucket, opts = remote_ds
    with FaultProxy(s3_endpoint, seed=3, error_rate=0.15, reset_rate=0.1, cut_rate=0.1) as proxy:
        loader = shardkit.load(f"s3://{bucket}/ds", storage_options=proxy.storage_options(opts), num_workers=2, **KW)
        keys = [k for _, _, ks in loader for k in ks]
        outcomes = proxy.outcomes()
        gets = _ranges(proxy, "/ds/train-")
    assert sorted(keys) == sorted(ds.keys)  # every sample exactly once
    assert (
        outcomes.get("500", 0) + outcomes.get("503", 0) > 0
        and outcomes.get("reset", 0) > 0
        and outcomes.get("cut", 0) > 0
    )
    assert loader.stats.retries > 0 and loader.stats.skipped == 0
    assert all(start is not None for _, start, _, _ in gets), "a shard was fetched without a range request"
    # no shard is re-read from its start: the bytes fetched successfully stay close to the shard's size
    for s in ds.manifest.shards:
        ok = sum(end - start + 1 for p, start, end, o in gets if p.endswith(s.name) and o == "ok")
        failed = sum(1 for p, _, _, o in gets if p.endswith(s.name) and o != "ok")
        assert ok <= s.bytes + failed * BLOCK, (s.name, ok, s.bytes, failed)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_outage_mid_epoch_resumes_at_offset(remote_ds, s3_endpoint):
    """The endpoint goes down for ~2 s in the middle of a shard (longer than s3fs's own retries), then comes back."""
    ds, bucket, opts = remote_ds
    with FaultProxy(s3_endpoint, seed=0) as proxy:
        loader = shardkit.load(
            f"s3://{bucket}/ds",
            storage_options=proxy.storage_options(opts),
            num_workers=0,
            shuffle=False,
            max_retries=100,
            retry_budget_s=30,
            **KW,
        )
        keys, outage = [], None
        for i, (_, _, ks) in enumerate(loader):
            keys += ks
            if i == 2:  # batch 2 = the first half of shard 1: the next read continues it mid-file
                proxy.down()
                outage = threading.Timer(2.0, proxy.up)
                outage.start()
        outage.join()
        gets = _ranges(proxy, "/ds/train-")
    assert keys == ds.keys  # in order, all of them, once
    assert loader.stats.retries > 0, (proxy.outcomes(), gets)
    down = [i for i, g in enumerate(gets) if g[3] == "down"]
    assert down, "the outage hit no read"
    path, start, _, _ = gets[down[0]]
    after = next(g for g in gets[down[-1] + 1 :] if g[0] == path)
    assert start > 0 and after[1] == start, (gets[down[0]], after)  # resumed exactly at the broken read
    _assert_each_byte_fetched_once(gets, ds.manifest.shards)


def _assert_each_byte_fetched_once(gets, shards) -> None:
    """The successful range requests of every shard tile it from byte 0: no byte fetched twice, none missing."""
    for s in shards:
        ranges = sorted(
            (start, min(end, s.bytes - 1)) for p, start, end, o in gets if p.endswith("/" + s.name) and o == "ok"
        )
        assert ranges and ranges[0][0] == 0, (s.name, ranges)
        for (_, e0), (s1, _) in zip(ranges, ranges[1:]):
            assert s1 == e0 + 1, (s.name, "overlap or gap", ranges)  # an overlap is a re-read


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_endpoint_down_longer_than_budget_raises_naming_url(remote_ds, s3_endpoint):
    ds, bucket, opts = remote_ds
    with FaultProxy(s3_endpoint, seed=0) as proxy:
        loader = shardkit.load(
            f"s3://{bucket}/ds",
            storage_options=proxy.storage_options(opts),
            num_workers=2,
            max_retries=1000,
            retry_budget_s=1.5,
            **KW,
        )
        it = iter(loader)
        next(it)
        proxy.down()
        with pytest.raises(
            StorageError,
            match=rf"s3://{bucket}/ds/train-\d+\.tar: read at byte \d+ still failing .*raise max_retries / retry_budget_s",
        ) as info:
            for _ in it:
                pass
    # not a hang (the test's timeout) and not a retry storm: the backoff doubles from 0.05 s, so a 1.5 s budget
    # holds a handful of retries per read, whatever the machine's speed (the exact schedule, on a clock the
    # retries advance: test_outage_longer_than_budget_is_a_bounded_error)
    retries = int(re.search(r"still failing after (\d+) retries", str(info.value)).group(1))
    assert 1 <= retries <= 12, str(info.value)
    spent = float(re.search(r"over ([\d.]+) s", str(info.value)).group(1))
    assert spent >= 1.5 - 0.05, str(info.value)  # given up by the budget, not early


@pytest.mark.timeout(60)
def test_botocore_does_not_retry_behind_our_back(remote_ds, s3_endpoint):
    """Counted on the wire: the one failed request is the one retry the loader counts (botocore sent it once)."""
    ds, bucket, opts = remote_ds
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail(
            "/ds/train-000002.tar", "500", times=1, method="GET"
        )  # InternalError: botocore would retry it, s3fs does not
        loader = shardkit.load(
            f"s3://{bucket}/ds", storage_options=proxy.storage_options(opts), num_workers=0, shuffle=False, **KW
        )
        keys = [k for _, _, ks in loader for k in ks]
        log = list(proxy.log)
    assert keys == ds.keys
    failed = [r for r in log if r.outcome != "ok"]
    assert len(failed) == 1 and loader.stats.retries == 1, (failed, loader.stats.retries)
    again = [r for r in log if r.path == failed[0].path and r.method == failed[0].method and r.range == failed[0].range]
    assert len(again) == 2, again  # sent once, retried once by the loader: attempts did not multiply


@pytest.mark.timeout(60)
def test_missing_and_denied_objects_are_not_retried(remote_ds, s3_endpoint):
    """moto answers 404 for a deleted shard; the proxy answers S3's 403 AccessDenied. With retries allowed,
    the shard sees exactly the requests of one open with retries off (the backend's own probes), then the error."""
    import s3fs

    ds, bucket, opts = remote_ds
    s3fs.S3FileSystem(**opts).rm(f"{bucket}/ds/{ds.manifest.shards[2].name}")

    def requests_for(name: str, inject: "str | None", max_retries: int) -> list:
        with FaultProxy(s3_endpoint) as proxy:
            if inject:
                proxy.fail(f"/ds/{name}", inject)
            loader = shardkit.load(
                f"s3://{bucket}/ds",
                storage_options=proxy.storage_options(opts),
                num_workers=0,
                shuffle=False,
                max_retries=max_retries,
                **KW,
            )
            with pytest.raises(StorageError, match=rf"{name}: (not found|cannot read \(PermissionError)"):
                list(loader)
            assert loader.stats.retries == 0
            return [(r.method, r.range, r.outcome) for r in proxy.log if r.path.endswith("/" + name)]

    for name, inject in (("train-000001.tar", "403"), ("train-000002.tar", None)):  # denied, missing
        once = requests_for(name, inject, max_retries=0)
        assert once and requests_for(name, inject, max_retries=5) == once, once


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_moto_server_stopped_and_restarted_mid_epoch(tmp_path):
    """The literal fault: the S3 server process goes away mid-epoch (connections refused) and comes back."""
    pytest.importorskip("s3fs")
    import s3fs
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    opts = {
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
        "key": "testing",
        "secret": "testing",
        "skip_instance_cache": True,
    }
    try:
        ds = write_dataset(str(tmp_path / "ds"), num_samples=40, shard_size=10, size=(64, 48))
        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("restart-bucket")
        fs.put(ds.url + "/", "restart-bucket/ds/", recursive=True)
        loader = shardkit.load(
            "s3://restart-bucket/ds",
            storage_options=opts,
            num_workers=0,
            shuffle=False,
            max_retries=100,
            retry_budget_s=30,
            **KW,
        )
        keys = []
        for i, (_, _, ks) in enumerate(loader):
            keys += ks
            if i == 2:
                server.stop()  # moto keeps its buckets in this process: a restart serves the same data
                threading.Timer(1.5, server.start).start()
        assert keys == ds.keys
        assert loader.stats.retries > 0
    finally:
        wait_for(lambda: getattr(server, "_server", None) is not None, 5)
        server.stop()


@pytest.mark.timeout(60)
def test_http_backend_retries_too_and_cache_gets_exact_bytes(tmp_path, http_root):
    """fsspec's HTTP backend has no retries of its own: ours cover it, also when filling the shard cache."""
    import hashlib
    import os
    import shutil

    base, directory = http_root
    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=10, size=(64, 48))
    shutil.copytree(ds.url, os.path.join(directory, "ds"))
    # Which requests fail depends on the seed and on how many requests the backend makes; try a
    # few seeds (bounded) until one breaks a shard read that our layer must retry. Every run,
    # whatever broke, must deliver every key exactly once and fill the cache with exact bytes.
    digests = {s.sha256 for s in ds.manifest.shards}
    retried = False
    for seed in range(8):
        cache = str(tmp_path / f"cache{seed}")
        with FaultProxy(base, seed=seed, error_rate=0.3, reset_rate=0.15, cut_rate=0.15) as proxy:
            try:
                loader = shardkit.load(f"{proxy.url}/ds", num_workers=0, cache_dir=cache, **KW)
            except ManifestError as exc:  # the manifest read itself broke: a clear error naming the URL
                assert "manifest.json" in str(exc)
                continue
            keys = [k for _, _, ks in loader for k in ks]
        assert sorted(keys) == sorted(ds.keys), proxy.log
        cached = sorted(os.listdir(cache))
        assert len([c for c in cached if c.endswith(".tar")]) == 3 and not any(c.startswith(".tmp-") for c in cached)
        for c in cached:
            if c.endswith(".tar"):
                with open(os.path.join(cache, c), "rb") as f:
                    assert hashlib.sha256(f.read()).hexdigest() in digests
        retried = retried or loader.stats.retries > 0
        if retried:
            break
    assert retried, "no seed broke a shard read"


@pytest.mark.timeout(30)
def test_http_missing_shard_is_not_found_at_once_while_a_503_is_retried(tmp_path, http_root):
    """fsspec turns every failed HTTP size probe into FileNotFoundError; only a real 404 may end the read."""
    import os
    import shutil

    base, directory = http_root
    ds = write_dataset(str(tmp_path / "ds"), num_samples=12, shard_size=4, size=(32, 24))
    shutil.copytree(ds.url, os.path.join(directory, "ds"))
    os.remove(os.path.join(directory, "ds", ds.manifest.shards[1].name))
    kw = {k: v for k, v in KW.items() if k != "shuffle_buffer"}
    with FaultProxy(base) as proxy:
        proxy.fail("/ds/train-000000.tar", "503", times=2)  # the probe of shard 0 (HEAD, then GET) answers 503
        loader = shardkit.load(
            f"{proxy.url}/ds", num_workers=0, shuffle=False, cache_dir=str(tmp_path / "cache"), max_retries=3, **kw
        )
        with pytest.raises(
            StorageError, match="train-000001.tar: not found"
        ):  # the local server has no range requests: cache
            list(loader)
        log = list(proxy.log)
    shard0 = [r.outcome for r in log if r.path.endswith("/train-000000.tar")]
    shard1 = [(r.method, r.outcome) for r in log if r.path.endswith("/train-000001.tar")]
    assert shard0[:2] == ["503", "503"] and "ok" in shard0[2:], shard0  # the 503s were sent, then retried and read
    probe = shard0.count("503")  # the requests of one probe (the first probe of shard 0 got only 503s)
    assert len(shard1) <= probe and {o for _, o in shard1} == {"ok"}, shard1  # the 404: one probe, not retried
