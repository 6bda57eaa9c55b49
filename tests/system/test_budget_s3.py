"""Request budgets on object storage, measured at the wire: moto behind the fault proxy, which stamps every request.

Guarantees checked: with ``request_budget`` set, the requests of all reading processes of a run stay within the
budget in every 1 s window AT THE PROXY (every request counts: size probes, read-ahead fills, retries) and every
sample arrives exactly once; a burst of ``503 SlowDown`` lowers the request rate after it (the limiter halves, then
recovers slowly) instead of multiplying it, the epoch still delivers every sample once, and the slow-downs and the
time spent waiting for the budget are in ``loader.stats``.
"""

from __future__ import annotations

import threading

import pytest

import shardkit
from shardkit.storage.budget import RequestLimiter
from shardkit.storage.opener import ShardOpener, StorageConfig
from tests.support.data import write_dataset
from tests.support.faults import FaultProxy, per_window
from tests.support.s3 import put_dir, remote_dataset

KW = dict(
    batch_size=5,
    size=16,
    pin_memory=False,
    with_keys=True,
    multiprocessing_context="fork",
    shuffle_buffer=5,
    shuffle_initial=5,
)


@pytest.fixture(autouse=True)
def _collect_clients():
    """Collect this test's loaders and fsspec clients now (their finalizers would cost a later test seconds)."""
    yield
    import gc

    gc.collect()


def test_budget_options_are_flat_keywords_and_local_files_are_not_limited(tmp_path, monkeypatch):
    from shardkit.loader.config import option_names

    names = option_names()
    assert {names[k] for k in ("block_size", "request_budget", "expected_img_per_s")} == {"source"}
    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=10)
    asked = []  # every request a limiter was asked to let through (num_workers=0: all in this process)
    acquire = RequestLimiter.acquire
    monkeypatch.setattr(RequestLimiter, "acquire", lambda self: asked.append(self) or acquire(self))
    loader = shardkit.load(ds.url, num_workers=0, request_budget=0.5, block_size="auto", **KW)
    keys = [k for _, _, ks in loader for k in ks]
    assert sorted(keys) == sorted(ds.keys)
    assert loader.stats.throttled_s == 0 and asked == []  # no read of a local file waits for the budget


def _rate(times: list) -> float:
    gaps = sorted(b - a for a, b in zip(times[:-1], times[1:]))
    return 1.0 / gaps[len(gaps) // 2]


def _shard_requests(proxy: FaultProxy) -> list:
    return [r for r in list(proxy.log) if "/ds/train-" in r.path]


def _budgeted_epoch(s3_endpoint: str, bucket: str, opts: dict, *, workers: int, budget: float, **kw) -> tuple:
    """One epoch of the remote dataset through a proxy, ``workers`` worker processes under ``request_budget=budget``
    (``kw`` over :data:`KW`): the loader, the keys it delivered and the shard requests the proxy saw."""
    with FaultProxy(s3_endpoint) as proxy:
        loader = shardkit.load(
            f"s3://{bucket}/ds",
            storage_options=proxy.storage_options(opts),
            num_workers=workers,
            block_size=4096,
            request_budget=budget,
            **{**KW, **kw},
        )
        keys = [k for _, _, ks in loader for k in ks]
        reqs = _shard_requests(proxy)
    return loader, keys, reqs


#: s3fs's own attempts of one request that the store answers ``503 SlowDown``
S3FS_TRIES = 5


class CountingLimiter(RequestLimiter):
    """A limiter that lets everything through and counts the requests it was asked for."""

    def __init__(self) -> None:
        super().__init__(1e9)
        self.asked = 0

    def acquire(self) -> float:
        self.asked += 1
        return 0.0


@pytest.mark.timeout(60)
def test_every_request_an_opener_sends_waits_for_its_limiter(tmp_path, s3, s3_endpoint):
    """Counted at the proxy: the opener's limiter is asked exactly once per request that reaches the store, for
    streamed reads (read-ahead fills; no size probe), range reads, whole-object fetches and retries after a 503."""
    ds, bucket, opts = remote_dataset(tmp_path, s3, 20)
    names = [s.name for s in ds.manifest.shards]
    with FaultProxy(s3_endpoint) as proxy:
        opener = ShardOpener(StorageConfig(storage_options=proxy.storage_options(opts), block_size=4096, max_retries=3))
        opener.limiter = lim = CountingLimiter()
        url = f"s3://{bucket}/ds/"
        with opener.open(url + names[0]) as f:
            walked = f.read()
        # a first read retried: s3fs retries a SlowDown itself (its attempts of one request, not asked of the
        # limiter), then the opener slows down and retries
        proxy.fail("/ds/" + names[1], "503", times=S3FS_TRIES, method="GET")
        with opener.open_ranges(url + names[1]) as f:
            f.seek(1000)
            ranged = f.read(5000)
            f.seek(0)
            ranged0 = f.read(512)
        fetched = opener.fetch(url + "manifest.json")
        sent = [r for r in list(proxy.log) if f"/{bucket}/ds/" in r.path]
    local = tmp_path / "ds"
    assert walked == (local / names[0]).read_bytes() and fetched == (local / "manifest.json").read_bytes()
    assert ranged == (local / names[1]).read_bytes()[1000:6000] and ranged0 == (local / names[1]).read_bytes()[:512]
    assert lim.asked == len(sent) - (S3FS_TRIES - 1), (
        lim.asked,
        [(r.method, r.path, r.range, r.outcome) for r in sent],
    )
    assert lim.slowdowns == 1 and any(r.outcome == "503" for r in sent)


@pytest.mark.timeout(60)
def test_budget_holds_at_the_proxy_across_workers(tmp_path, s3, s3_endpoint):
    """2 worker processes share 12 GET/s (6 each, the first 1/12 s apart): no 1 s window at the proxy holds more
    than the budget plus 2 per process. The spacing rule itself allows one: a window may open on one process's
    request and close just after its 7th, 1/6 s apart; network jitter one more: a process's requests leave at
    least 1/6 s apart but may arrive a little closer. (Each worker taking a whole rank's share, 24 GET/s, shows
    peaks of 24 and more.)"""
    ds, bucket, opts = remote_dataset(tmp_path, s3, 30)
    budget, workers = 12.0, 2
    loader, keys, reqs = _budgeted_epoch(s3_endpoint, bucket, opts, workers=workers, budget=budget)
    assert sorted(keys) == sorted(ds.keys)  # every sample exactly once
    assert len(reqs) > 1.5 * budget, len(reqs)  # long enough for the windows to mean something
    peak = max(per_window([r.t for r in reqs]))
    print(
        f"\nbudget {budget:g} GET/s, {workers} workers: {len(reqs)} requests, peak {peak} in a 1 s window at the proxy"
    )
    assert peak <= budget + 2 * workers, (peak, len(reqs))
    assert loader.stats.throttled_s > 0 and loader.stats.slowdowns == 0
    # the doctor says what each worker got and that the budget, not the store, set the pace
    from shardkit.loader.doctor import storage_report, verdict
    from shardkit.loader.stages import process_budget
    from shardkit.plan.world import World

    got = process_budget(ds.manifest, loader.config.source, World(0, 1, 1, workers))
    assert (got.rate, got.block_size, got.phase) == (budget / workers, 4096, 0.5)
    assert "6 GET/s per process (2 reading processes over 1 prefix)" in storage_report(got, loader.stats)
    assert "waiting for the request budget" in verdict(images_per_s=1, batch_size=5, step_ms=1, stats=loader.stats)


@pytest.mark.timeout(60)
def test_slowdown_burst_lowers_the_rate_and_every_sample_arrives_once(tmp_path, s3, s3_endpoint):
    """One reading process at 40 GET/s; once it has read steadily for a second, the proxy answers the next 5 shard
    GETs ``503 SlowDown`` (S3's XML body). s3fs retries a SlowDown itself (5 attempts over ~1.9 s: the burst),
    then the loader sees it: the limiter halves the rate (and recovers slowly), so the requests in the second
    after the burst are well below those in the second before it."""
    ds, bucket, opts = remote_dataset(tmp_path, s3, 40)
    budget, burst = 40.0, 5
    with FaultProxy(s3_endpoint) as proxy:
        loader = shardkit.load(
            f"s3://{bucket}/ds",
            storage_options=proxy.storage_options(opts),
            num_workers=0,
            block_size=3072,
            request_budget=budget,
            **KW,
        )
        armed = threading.Event()

        def arm() -> None:  # inject once 40 shard requests were seen (a second of steady reading)
            while not armed.is_set():
                if len(_shard_requests(proxy)) >= 40:
                    proxy.fail("/ds/train-", "503", times=burst, method="GET")
                    armed.set()
                    return
                armed.wait(0.005)

        watcher = threading.Thread(target=arm, daemon=True)
        watcher.start()
        keys = [k for _, _, ks in loader for k in ks]
        armed.set()
        watcher.join(5)
        reqs = _shard_requests(proxy)
    assert sorted(keys) == sorted(ds.keys)  # exactly once through the burst
    bad = [r for r in reqs if r.outcome == "503"]
    assert len(bad) == burst, [r.outcome for r in reqs]
    t0, t1 = bad[0].t, bad[-1].t
    # the rate while reading: 1 / the median spacing of consecutive requests (robust to the pauses between
    # shards, when the loader decodes rather than reads), over the 15 requests before and after the burst
    before = _rate([r.t for r in reqs if r.t < t0][-15:])
    after = _rate([r.t for r in reqs if r.t > t1][1:16])  # from the retry on (its own wait is the retry's)
    during = len(bad) / max(t1 - t0, 1e-9)
    st = loader.stats
    print(
        f"\nGET/s while reading: {before:.1f} before the SlowDown burst, {during:.1f} during, {after:.1f} after; "
        f"{st.slowdowns} slow-downs, {st.retries} retries"
    )
    assert 0.7 * budget <= before <= 1.1 * budget, (before, after)  # the budget set the pace before the burst
    assert after <= 0.7 * before, (before, after)  # lowered, not multiplied
    assert during <= budget, during  # the burst's own retries (s3fs's) did not multiply the rate either
    assert loader.stats.slowdowns >= 1 and loader.stats.retries >= 1
    assert loader.stats.throttled_s > 0
    assert f"{loader.stats.slowdowns} slow-downs" in loader.report()


@pytest.mark.timeout(60)
def test_the_budget_is_shared_by_the_workers_that_read(tmp_path, s3, s3_endpoint, monkeypatch):
    """30 samples in batches of 16 on one rank: 2 batches, so only 2 of 4 workers read, and they share the budget
    (10 GET/s each of 20), not a quarter each. Recorded where each worker builds its opener; every sample once, and
    the proxy still sees at most the budget (plus the spacing rule's one per process) in any 1 s window."""
    import json
    import os

    from shardkit.loader import stages

    record = tmp_path / "budgets.jsonl"
    real = stages.process_budget

    def spy(manifest, cfg, world, batches_per_rank=None):
        got = real(manifest, cfg, world, batches_per_rank)
        with open(record, "a") as f:
            f.write(json.dumps([world.worker, got.processes, got.rate]) + "\n")
        return got

    monkeypatch.setattr(stages, "process_budget", spy)  # the workers are forked: they call the spy
    ds, bucket, opts = remote_dataset(tmp_path, s3, 30)
    budget, workers = 20.0, 4
    _, keys, reqs = _budgeted_epoch(s3_endpoint, bucket, opts, workers=workers, budget=budget, batch_size=16)
    assert sorted(keys) == sorted(ds.keys)
    seen = [json.loads(line) for line in open(record)] if os.path.exists(record) else []
    assert seen and all((p, r) == (2, budget / 2) for _, p, r in seen), seen
    assert max(per_window([r.t for r in reqs])) <= budget + 2


@pytest.mark.timeout(60)
def test_a_slowdown_on_a_sample_index_is_retried_not_walked(tmp_path, s3, s3_endpoint):
    """Six 503 SlowDowns on one shard's sample index (more than s3fs's own five attempts): the loader backs off
    and fetches the index again instead of falling back to the header walk (which would send many more requests
    while the store asks for fewer); every sample once, the slow-down counted."""
    from tests.support.data import add_index

    opts, bucket = s3
    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=10, size=(64, 48))
    add_index(ds.url)
    put_dir(opts, ds.url, f"{bucket}/ds")
    with FaultProxy(s3_endpoint) as proxy:
        proxy.fail("train-000001.idx", "503", times=6, method="GET")
        loader = shardkit.load(
            f"s3://{bucket}/ds", storage_options=proxy.storage_options(opts), num_workers=0, block_size=4096, **KW
        )
        keys = [k for _, _, ks in loader for k in ks]
        log = list(proxy.log)
    assert sorted(keys) == sorted(ds.keys)
    assert loader.stats.shards_withheld == 0 and loader.stats.slowdowns >= 1
    idx_gets = [r for r in log if r.path.endswith("train-000001.idx") and r.method == "GET"]
    assert [r.outcome for r in idx_gets] == ["503"] * 6 + ["ok"]
    tar_gets = [r for r in log if r.path.endswith("train-000001.tar") and r.method == "GET"]
    assert len(tar_gets) <= 2, [r.range for r in tar_gets]  # range reads of its blocks, not a 4 KiB header walk
