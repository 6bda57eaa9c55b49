"""Request budgets, pure: the limiter on a virtual clock against a brute-force replay of its rule, the auto block
size against its definition, phases spread evenly, what counts as "slow down", and a RetryingFile that waits for
the limiter before exactly the requests its file sends.
"""

from __future__ import annotations

import errno
import io
import math

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.storage import budget as B
from shardkit.storage.budget import is_slowdown
from shardkit.storage.opener import ShardOpener, StorageConfig
from shardkit.storage.retry import RetryingFile

SETTINGS = settings(derandomize=True, deadline=None, max_examples=60, phases=[Phase.explicit, Phase.generate])


class VirtualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.now += s


def reference_grants(rate: float, phase: float, start: float, events: list[tuple[str, float]]) -> list[float]:
    """The limiter's rule, replayed step by step (the rate recomputed from the whole history at every event).

    ``events``: ("acquire" | "slow", time), in order, each at or after the previous one's end. The rate after
    events ``[:i]`` at time ``t``: the configured rate, halved at each slow-down (not below ``rate *
    FLOOR_FRACTION``) and grown by ``rate / RECOVER_STEPS`` for every whole ``RECOVER_S`` without a slow-down
    (not above ``rate``). Grants lie on a lattice of spacing ``STRETCH / rate`` starting at ``start + phase *
    spacing``: a request takes the next point not yet granted, skipping the points already past when it is asked
    for; a change of rate keeps the next point and changes the spacing from there; a slow-down moves the next
    point to at least one new spacing after it.
    """
    stretch = B.RequestLimiter.STRETCH

    def grown(r: float, calm: float, t: float) -> float:
        return min(rate, r + int((t - calm) / B.RECOVER_S) * rate / B.RECOVER_STEPS)

    def current(upto: int, t: float) -> float:
        r, calm = rate, start
        for kind, s in events[:upto]:
            if kind == "slow":
                r, calm = max(rate * B.FLOOR_FRACTION, grown(r, calm, s) / 2), s
        return grown(r, calm, t)

    grants: list[float] = []
    r_now, period = rate, stretch / rate
    slot = start + phase * period
    for i, (kind, t) in enumerate(events):
        r = current(i, t)
        if r != r_now:  # grown since the last event: the next point stays, the spacing changes
            r_now, period = r, stretch / r
        if kind == "slow":
            r_now = current(i + 1, t)
            period = stretch / r_now
            slot = max(slot, t + period)
            continue
        while slot < t - 1e-9 * period:  # points already past are skipped
            slot += period
        grants.append(slot)
        slot += period
    return grants


events_st = st.lists(
    st.tuples(st.sampled_from(["acquire"] * 5 + ["slow"]), st.floats(0, 0.6)),  # (kind, idle gap before it)
    min_size=1,
    max_size=40,
)


@SETTINGS
@given(rate=st.floats(1, 200), phase=st.floats(0, 0.999), script=events_st)
@example(rate=64.0, phase=0.0, script=[("slow", 0.0), ("slow", 3.0), ("acquire", 0.0), ("acquire", 0.0)])
def test_limiter_grants_match_the_rule(rate, phase, script):
    clock = VirtualClock()
    lim = B.RequestLimiter(rate, phase=phase, clock=clock, sleep=clock.sleep)
    start = clock.now
    events, grants, waited = [], [], 0.0
    for kind, gap in script:
        clock.now += gap
        events.append((kind, clock.now))
        if kind == "slow":
            lim.slow_down()
        else:
            waited += lim.acquire()
            grants.append(clock.now)
    ref = reference_grants(rate, phase, start, events)
    assert grants == pytest.approx(ref, abs=1e-6)
    assert lim.slowdowns == sum(1 for k, _ in script if k == "slow")
    assert lim.waited_s == pytest.approx(waited) and waited >= 0
    # the promise itself: never more than the configured rate over any window (one interval apart at least)
    assert all(b - a >= 1 / rate - 1e-9 for a, b in zip(grants[:-1], grants[1:]))


def test_limiter_halves_then_recovers():
    clock = VirtualClock()
    lim = B.RequestLimiter(64.0, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        lim.slow_down()
    assert lim.current == 8.0
    for _ in range(10):
        lim.slow_down()
    assert lim.current == 64 * B.FLOOR_FRACTION  # the floor
    clock.now += 5 * B.RECOVER_S
    lim.acquire()
    assert lim.current == pytest.approx(1 + 5 * 64 / B.RECOVER_STEPS)
    clock.now += 100
    lim.acquire()
    assert lim.current == 64.0


def test_unlimited_limiter_never_waits():
    lim = B.RequestLimiter(None, clock=lambda: 0.0, sleep=lambda s: pytest.fail("slept"))
    assert all(lim.acquire() == 0.0 for _ in range(100))
    lim.slow_down()
    assert lim.slowdowns == 0 and lim.rate == math.inf


@SETTINGS
@given(
    processes=st.integers(1, 100_000),
    bps=st.floats(0, 1e9),
    budget=st.floats(1, 1e5),
    prefixes=st.integers(1, 64),
    lo_exp=st.integers(10, 22),
    span=st.integers(0, 8),
)
def test_auto_block_size_is_the_smallest_fitting_power_of_two(processes, bps, budget, prefixes, lo_exp, span):
    lo, hi = 1 << lo_exp, 1 << (lo_exp + span)
    rate = budget * prefixes / processes
    candidates = [lo << i for i in range(span + 1)]
    fitting = [c for c in candidates if bps / c <= rate * (1 + 1e-12)]
    want = fitting[0] if fitting else hi
    got = B.auto_block_size(
        processes=processes, bytes_per_s_per_process=bps, request_budget=budget, prefixes=prefixes, lo=lo, hi=hi
    )
    assert got == want


@SETTINGS
@given(world=st.integers(1, 40), workers=st.integers(0, 12))
def test_phases_spread_evenly_over_the_world(world, workers):
    n = world * max(1, workers)
    phases = sorted(B.process_phase(r, w, world, workers) for r in range(world) for w in range(max(1, workers)))
    assert phases == pytest.approx([i / n for i in range(n)])


@SETTINGS
@given(
    world=st.integers(1, 1024),
    workers=st.integers(0, 16),
    prefixes=st.integers(1, 64),
    budget=st.one_of(st.none(), st.floats(1, 1e5)),
    img=st.floats(1, 1e4),
    per_sample=st.floats(0, 1e6),
    fixed=st.one_of(st.just("auto"), st.integers(1, 1 << 30)),
    batches=st.one_of(st.none(), st.integers(0, 40)),
)
@example(world=4, workers=8, prefixes=1, budget=100.0, img=3000.0, per_sample=28000.0, fixed="auto", batches=3)
def test_read_budget_is_the_rules_composed(world, workers, prefixes, budget, img, per_sample, fixed, batches):
    cfg = StorageConfig(block_size=fixed, request_budget=budget, expected_img_per_s=img)
    rank, worker = world - 1, max(0, workers - 1)
    rb = cfg.read_budget(
        bytes_per_sample=per_sample,
        prefixes=prefixes,
        world_size=world,
        num_workers=workers,
        rank=rank,
        worker=worker,
        batches_per_rank=batches,
    )
    # the workers that read: a rank's batches go to its workers in turn, so only the first `batches` of them read
    readers = max(1, workers) if batches is None else max(1, min(max(1, workers), batches))
    workers = readers
    processes = world * readers
    assert rb.processes == processes and rb.prefixes == prefixes
    assert rb.phase == B.process_phase(rank, worker, world, readers)
    if budget is None:
        assert rb.rate is None and rb.limiter() is None
        assert rb.block_size == (B.LEGACY_BLOCK if fixed == "auto" else fixed)
        return
    assert rb.rate == pytest.approx(budget * prefixes / processes)
    if fixed != "auto":
        assert rb.block_size == fixed
    else:
        need = img * per_sample / max(1, workers) / rb.rate  # bytes per request at the process's share
        assert B.MIN_BLOCK <= rb.block_size <= B.MAX_BLOCK
        assert rb.block_size >= min(need, B.MAX_BLOCK) * (1 - 1e-9)
        assert rb.block_size == B.MIN_BLOCK or rb.block_size / 2 < need


def test_storage_config_options():
    assert StorageConfig().block_size == "auto" and StorageConfig().request_budget == B.REQUEST_BUDGET
    assert StorageConfig(block_size=4096).block_size == 4096
    for bad in (0, -1, "big", 2.5, True):
        with pytest.raises(ValueError, match="block_size"):
            StorageConfig(block_size=bad)
    for bad in (0, -5.0):
        with pytest.raises(ValueError, match="request_budget"):
            StorageConfig(request_budget=bad)
    with pytest.raises(ValueError, match="expected_img_per_s"):
        StorageConfig(expected_img_per_s=0)
    # a lone opener: the whole budget for itself, 8 MiB reads when nothing says how large a sample is
    op = ShardOpener(StorageConfig())
    assert op.block_size == B.LEGACY_BLOCK and op.limiter is not None and op.limiter.rate == B.REQUEST_BUDGET
    assert ShardOpener(StorageConfig(request_budget=None)).limiter is None


# ----------------------------------------------------------------------------- what says "slow down"


class ClientError(Exception):
    """Shaped like botocore's: a ``response`` dict."""

    def __init__(self, code: str, status: int):
        super().__init__(f"An error occurred ({code}) when calling the GetObject operation")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class StatusError(Exception):
    def __init__(self, status: int):
        super().__init__(f"{status}, message='...'")
        self.status = status


def _translated(inner: BaseException) -> OSError:
    """What s3fs raises: an OSError with the client error as its cause."""
    out = OSError(errno.EBUSY, "injected")
    out.__cause__ = inner
    return out


@pytest.mark.parametrize(
    "exc, slow",
    [
        (_translated(ClientError("SlowDown", 503)), True),
        (_translated(ClientError("503", 503)), True),  # a HEAD's 503 has no body: the code is the status
        (_translated(ClientError("TooManyRequests", 429)), True),
        (_translated(ClientError("InternalError", 500)), False),
        (_translated(ClientError("AccessDenied", 403)), False),
        (StatusError(503), True),
        (StatusError(429), True),
        (StatusError(500), False),
        (OSError("Please reduce your request rate."), True),
        (ConnectionResetError("connection reset by peer"), False),
        (TimeoutError(), False),
    ],
)
def test_what_says_slow_down(exc, slow):
    assert is_slowdown(exc) is slow


def test_slowdown_found_through_a_suppressed_context():
    """fsspec's HTTP backend reports a failed probe as FileNotFoundError; shardkit re-raises ConnectionError
    ``from None`` (the context stays, suppressed): the 503 is still found."""
    try:
        try:
            raise FileNotFoundError("x") from StatusError(503)
        except FileNotFoundError:
            raise ConnectionError("cannot open") from None
    except ConnectionError as exc:
        assert is_slowdown(exc)


# ----------------------------------------------------------------------------- RetryingFile x limiter


class CountingLimiter(B.RequestLimiter):
    def __init__(self) -> None:
        super().__init__(1000.0, clock=lambda: 0.0, sleep=lambda s: None)
        self.acquired = 0

    def acquire(self) -> float:
        self.acquired += 1
        return 0.0


class Remote(io.BytesIO):
    """A remote file that logs each request it would send (reads before its end) and fails on schedule."""

    def __init__(self, data: bytes, log: list, failures: list):
        super().__init__(data)
        self.size = len(data)
        self.log, self.failures = log, failures

    def read(self, n=-1):
        if self.tell() >= self.size or n == 0:
            return b""
        self.log.append("GET")
        if self.failures:
            raise self.failures.pop(0)
        return super().read(n)


@SETTINGS
@given(
    reads=st.lists(st.integers(0, 400), min_size=1, max_size=30),
    fails=st.lists(st.sampled_from(["slow", "reset"]), max_size=6),
    open_sends=st.booleans(),
)
def test_retrying_file_waits_before_each_request_it_sends(reads, fails, open_sends):
    data = bytes(range(256)) * 4
    log: list = []
    failures = [
        _translated(ClientError("SlowDown", 503)) if f == "slow" else ConnectionResetError("reset") for f in fails
    ]

    def open_fn():
        if open_sends:
            log.append("HEAD")
        return Remote(data, log, failures)

    lim = CountingLimiter()
    f = RetryingFile(
        "s3://b/x.tar",
        open_fn,
        max_retries=10,
        retry_budget_s=100,
        sleep=lambda s: None,
        limiter=lim,
        open_sends=open_sends,
    )
    out = b"".join(f.read(n) for n in reads)
    assert out == data[: sum(reads)]
    assert lim.acquired == len(log)  # one wait per request sent, no more, no fewer (retries included)
    consumed = fails[: len(fails) - len(failures)]
    assert lim.slowdowns == consumed.count("slow")  # each slow-down seen told the limiter, nothing else did


@SETTINGS
@given(
    world=st.integers(1, 4),
    workers=st.integers(0, 3),
    budget=st.sampled_from([7.0, 12.0, 20.0, 35.0]),
    gaps=st.lists(st.lists(st.floats(0, 0.4), min_size=1, max_size=30), min_size=12, max_size=12),
)
def test_the_world_never_exceeds_the_budget_in_any_second(world, workers, budget, gaps):
    """Every process of a world (equal shares, phases from ``process_phase``), busy or idle in any pattern: the
    world's grants in any half-open 1 s window never exceed the budget (one lattice; no extra request per process)."""
    processes = world * max(1, workers)
    rate = B.process_rate(budget, 1, processes)
    grants: list[float] = []
    for p in range(processes):
        clock = VirtualClock()
        phase = B.process_phase(p // max(1, workers), p % max(1, workers), world, workers)
        lim = B.RequestLimiter(rate, phase=phase, clock=clock, sleep=clock.sleep)
        for gap in gaps[p % len(gaps)]:
            clock.now += gap  # the process works (or idles) between requests
            lim.acquire()
            grants.append(clock.now)
    grants.sort()
    j = 0
    for i, t in enumerate(grants):  # the window [t, t + 1) opening at each grant
        while j < len(grants) and grants[j] < t + 1.0:
            j += 1
        assert j - i <= budget, (j - i, budget, t)
