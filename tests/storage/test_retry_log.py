"""Retry logs tell one story per outage: the first failure once, rare reminders, then the recovery.

Guarantees checked: a read that fails N times and then succeeds logs exactly two lines (the first
failure and "recovered after N retries over T s"), whatever N; a long outage adds at most one
reminder per ``repeat_s``; giving up ends the story with the error, not a log line; through moto and
a proxy that refuses connections for ~2 s, the loader logs two lines per shard URL that was hit,
and the retries are all counted in ``loader.stats.retries``.
"""

from __future__ import annotations

import io
import logging
import threading

import pytest

import shardkit
from shardkit.errors import StorageError
from shardkit.storage.retry import RetryingFile, RetryLog
from tests.support.faults import FaultProxy
from tests.support.s3 import remote_dataset

LOGGER = "shardkit.loader"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _logger(name: str) -> tuple[logging.Logger, _Lines]:
    lg = logging.getLogger(name)
    lg.propagate = False
    h = _Lines()
    lg.handlers[:] = [h]
    return lg, h


def _failing_opens(data: bytes, failures: int):
    """An ``open_fn`` whose first ``failures`` opens raise ConnectionRefusedError (an outage)."""
    n = {"opens": 0}

    def open_fn():
        n["opens"] += 1
        if n["opens"] <= failures:
            raise ConnectionRefusedError("connection refused")
        return io.BytesIO(data)

    return open_fn


@pytest.mark.parametrize("failures", [1, 7, 25])
def test_an_outage_that_recovers_is_two_lines(failures):
    lg, h = _logger("test.retrylog.recover")
    clock = _Clock()
    f = RetryingFile(
        "s3://b/x.tar",
        _failing_opens(b"abc" * 10, failures),
        max_retries=100,
        retry_budget_s=1e9,
        log=RetryLog(lg, repeat_s=1e9, clock=clock),
        sleep=clock.sleep,
    )
    assert f.read(3) == b"abc" and f.retries == failures
    assert len(h.lines) == 2, h.lines
    assert h.lines[0].startswith("shardkit: s3://b/x.tar: read at byte 0 failed (ConnectionRefusedError")
    assert f"recovered after {failures} {'retry' if failures == 1 else 'retries'} over" in h.lines[1]
    f.read(3)
    assert len(h.lines) == 2  # a later good read says nothing


def test_a_long_outage_gets_one_reminder_per_repeat_s():
    lg, h = _logger("test.retrylog.long")
    clock = _Clock()
    log = RetryLog(lg, repeat_s=10.0, clock=clock)
    # 30 failures of 1 s each (fake clock): first line at t=0, reminders at t>=10, >=20, then the recovery
    for attempt in range(1, 31):
        log.failed("u", 0, attempt, ConnectionResetError("x"))
        clock.t += 1.0
    log.recovered("u", 30, clock.t)
    assert len(h.lines) == 1 + 2 + 1, h.lines
    assert [ln.split(":")[2].strip().split(" ")[0] for ln in h.lines[1:3]] == ["still", "still"]
    assert "recovered after 30 retries over 30.0 s" in h.lines[-1]


def test_giving_up_is_the_error_not_a_log_line():
    lg, h = _logger("test.retrylog.giveup")
    clock = _Clock()
    log = RetryLog(lg, repeat_s=1e9, clock=clock)
    with pytest.raises(StorageError, match="still failing after 3 retries"):
        RetryingFile(
            "s3://b/y.tar", _failing_opens(b"", 100), max_retries=3, retry_budget_s=1e9, log=log, sleep=clock.sleep
        )
    assert len(h.lines) == 1, h.lines
    # the story ended: a new failure later starts a new one (logged again)
    log.failed("s3://b/y.tar", 0, 1, ConnectionResetError("x"))
    assert len(h.lines) == 2


def test_urls_have_separate_stories():
    lg, h = _logger("test.retrylog.urls")
    log = RetryLog(lg, repeat_s=1e9, clock=_Clock())
    for attempt in (1, 2, 3):
        log.failed("a", 0, attempt, OSError("x"))
        log.failed("b", 0, attempt, OSError("x"))
    log.recovered("a", 3, 1.0)
    log.recovered("b", 3, 1.0)
    log.recovered("b", 3, 1.0)  # nothing was failing any more: silent
    assert len(h.lines) == 4, h.lines


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_loader_logs_an_s3_outage_as_one_story_per_shard(tmp_path, s3, s3_endpoint, caplog):
    """moto behind a proxy that refuses connections for ~2 s mid-epoch: two lines per shard URL hit, not one per attempt."""
    ds, bucket, opts = remote_dataset(tmp_path, s3, 40)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with FaultProxy(s3_endpoint, seed=0) as proxy:
        loader = shardkit.load(
            f"s3://{bucket}/ds",
            storage_options=proxy.storage_options(opts),
            num_workers=0,
            shuffle=False,
            batch_size=5,
            size=16,
            pin_memory=False,
            with_keys=True,
            block_size=8192,
            shuffle_buffer=5,
            shuffle_initial=5,
            max_retries=1000,
            retry_budget_s=60,
        )
        keys, outage = [], None
        for i, (_, _, ks) in enumerate(loader):
            keys += ks
            if i == 2:
                proxy.down()
                outage = threading.Timer(2.0, proxy.up)
                outage.start()
        outage.join()
    assert sorted(keys) == sorted(ds.keys) and len(keys) == len(set(keys))
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and "shardkit: s3://" in r.getMessage()]
    failed = [ln for ln in lines if "failed" in ln]
    recovered = [ln for ln in lines if "recovered after" in ln]
    assert loader.stats.retries > len(failed), (loader.stats.retries, lines)  # many attempts ...
    assert failed and len(failed) == len(recovered) == len({ln.split(":")[1] + ln.split(":")[2] for ln in failed}), (
        lines
    )
    assert len(lines) == len(failed) + len(recovered), lines  # ... two lines per URL, no per-attempt lines
