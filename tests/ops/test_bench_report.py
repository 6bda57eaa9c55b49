"""`shardkit bench`'s best figure carries its uncertainty (half the difference of the last two timed windows) and
names the stage that limits it (the one that took the most worker time)."""

from __future__ import annotations

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.loader.doctor import measure
from shardkit.loader.stats import LoaderStats
from shardkit.ops.bench import BenchReport, SweepPoint

STAGES = ("read", "decode", "resize", "collate")


@settings(phases=[Phase.explicit, Phase.generate], max_examples=40, deadline=None)
@given(
    times=st.lists(st.floats(0.01, 100), min_size=4, max_size=4),
    rate=st.floats(10, 1e5),
    spread=st.floats(0, 500),
)
@example(times=[1.0, 5.0, 2.0, 0.5], rate=1000.0, spread=25.0)
@example(times=[9.0, 5.0, 2.0, 0.5], rate=800.0, spread=0.0)
def test_best_line_gives_the_spread_and_the_limiting_stage(times, rate, spread):
    stats = LoaderStats(read_s=times[0], decode_s=times[1], resize_s=times[2], collate_s=times[3])
    report = BenchReport(url="u", batch_size=64)
    report.points.append(SweepPoint(2, rate, 1.0, stats, 0.1, True, "stable", spread))
    best = next(line for line in report.format().splitlines() if line.startswith("best: "))
    stage = STAGES[max(range(4), key=times.__getitem__)]  # the reference: the largest share of worker time
    share = max(times) / sum(times)
    assert best.startswith(f"best: {rate:.0f} ± {spread:.0f} img/s with 2 workers")
    assert f"the stage that limits it: {stage} ({share:.0%} of worker time)" in best


@settings(phases=[Phase.explicit, Phase.generate], max_examples=40, deadline=None)
@given(durations=st.lists(st.floats(0.5, 2.0), min_size=3, max_size=12))
@example(durations=[1.0, 2.0, 1.5])
def test_the_spread_is_half_the_last_two_windows_difference(durations):
    """Windows of one batch of 10 images each, taking the given seconds (a fake clock): the spread is half the
    difference of the last two windows' rates, whatever came before."""
    t = [0.0]
    ticks = iter([0.0, 0.0, 0.0] + [sum(durations[: i + 1]) for i in range(len(durations))])

    def clock() -> float:
        t[0] = next(ticks, t[0])
        return t[0]

    r = measure((10 for _ in range(len(durations) + 1)), warm=1, window=1, tolerance=0.0, clock=clock)
    rates = [10 / d for d in durations][: len(r.windows)]
    assert list(r.windows) == pytest.approx(rates)
    assert r.spread == pytest.approx(abs(rates[-1] - rates[-2]) / 2 if len(rates) >= 2 else 0.0)
