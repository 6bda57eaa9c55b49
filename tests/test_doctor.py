"""The doctor's measurement and verdict, with a fake clock and stub loaders (no timing in tests).

Guarantees checked: the rate excludes start-up and the first batch of every worker; a loader
whose start is slow gives the same rate with a short and a long batch limit (the issue's 20 vs
60 batches); time to the first batch is reported on its own; a verdict names input-bound or not,
the milliseconds and the slowest stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from shardkit.doctor import epoch_report, measure, slowest_stage, verdict


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def stub_loader(clock: FakeClock, *, workers: int, startup_s: float, block_every: int, block_s: float,
                per_batch_s: float, batch: int = 64, n: int = 10_000):
    """Batches as a DataLoader over ``workers`` workers delivers them: a slow start, then steady
    batches every ``per_batch_s`` with a pause of ``block_s`` every ``block_every`` batches
    (a worker reading its next shuffle block)."""
    clock.t += startup_s
    for i in range(n):
        clock.t += per_batch_s
        if block_every and i % block_every == block_every - 1:
            clock.t += block_s
        yield batch


@pytest.mark.parametrize("max_batches", [20, 60])
def test_rate_does_not_depend_on_the_window_count(max_batches):
    c = FakeClock()
    r = measure(stub_loader(c, workers=2, startup_s=3.0, block_every=0, block_s=0, per_batch_s=0.02),
                warm=2, window=5, max_batches=max_batches, clock=c)
    assert r.images_per_s == pytest.approx(64 / 0.02)
    assert r.first_batch_s == pytest.approx(3.02)  # start-up is reported, not averaged in
    assert r.stable and r.stop == "stable"


def test_slow_start_and_block_pauses_are_excluded_until_stable():
    """A naive rate over 20 batches including start-up would be ~1/2 the steady one."""
    c = FakeClock()
    gen = stub_loader(c, workers=2, startup_s=1.5, block_every=16, block_s=0.08, per_batch_s=0.02)
    r = measure(gen, warm=2, window=16, tolerance=0.05, clock=c)
    steady = 16 * 64 / (16 * 0.02 + 0.08)  # one block pause per window
    assert r.images_per_s == pytest.approx(steady, rel=1e-6)
    naive = 20 * 64 / (1.5 + 20 * 0.02 + 0.08)
    assert naive < 0.6 * r.images_per_s


def test_unstable_rate_stops_at_the_limit_and_says_so():
    c = FakeClock()

    def wobbly():
        for i in range(1000):
            c.t += 0.01 if (i // 5) % 2 else 0.03  # windows of 5 alternate fast/slow
            yield 64

    r = measure(wobbly(), warm=1, window=5, tolerance=0.05, max_batches=50, clock=c)
    assert not r.stable and r.stop == "batch limit" and len(r.windows) == 10


def test_time_limit():
    c = FakeClock()

    def slow():
        while True:
            c.t += 1.0
            yield 64

    r = measure(slow(), warm=1, window=1000, max_s=10, clock=c)
    assert r.stop == "time limit" and r.seconds == pytest.approx(10)


def test_end_of_data_before_warm_up():
    c = FakeClock()
    r = measure(iter([64]), warm=2, clock=c)
    assert r.images_per_s == 0 and r.stop == "end of data" and r.batches == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="warm and window"):
        measure(iter([]), warm=0)


@dataclass
class Stats:
    read_s: float = 0.1
    decode_s: float = 3.0
    resize_s: float = 1.0
    collate_s: float = 0.2
    samples: int = 6400
    skipped: int = 2
    retries: int = 1
    wait_s: float = 5.0
    elapsed_s: float = 10.0


def test_verdict_input_bound_names_ms_and_the_stage():
    v = verdict(images_per_s=64 / 0.018, batch_size=64, step_ms=12, stats=Stats(), workers=2, cpus=8)
    assert v.startswith("input-bound: the loader gives a batch of 64 every 18.0 ms, your step takes 12.0 ms")
    assert "slowest stage: decode (70 % of worker time)" in v and "GPU" in v and "more workers will help" in v


def test_verdict_not_input_bound():
    v = verdict(images_per_s=64 / 0.010, batch_size=64, step_ms=12, stats=Stats())
    assert v.startswith("not input-bound: the loader gives a batch of 64 every 10.0 ms, your step takes 12.0 ms (1.2x headroom)")


def test_slowest_stage_and_epoch_report():
    assert slowest_stage(Stats(read_s=5)) == ("read", pytest.approx(5 / 9.2))
    line = epoch_report(3, Stats())
    assert line == "shardkit epoch 3: waited 50 % of 10.0 s for data, 640 img/s, 2 skipped, 1 retries, slowest stage decode (70 %)"
