"""Speed checks that hold on any machine: how a cost grows with its input, measured twice in one run.

A test never compares a duration with a fixed number of seconds (that fails on a slower or busier machine
and passes a regression on a faster one); it compares the same operation on a small and a large input, so
the machine's speed cancels out. Absolute figures belong to the benchmarks under ``tools/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def best_seconds(fn: Callable[[], object], repeat: int = 3) -> float:
    """The shortest of ``repeat`` wall-clock runs of ``fn()`` (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def check_scales_linearly(what: str, small: tuple[int, float], large: tuple[int, float], room: float = 10.0) -> None:
    """AssertionError unless ``what`` took at most ``room`` times longer per item on the ``large`` input than on
    the ``small`` one (each ``(items, seconds)``): linear, or n log n, passes with room to spare for a busy
    machine; quadratic over 1,000 -> 100,000 items (10,000 times longer) fails by a factor of 10."""
    (n_small, s_small), (n_large, s_large) = small, large
    limit = room * (n_large / n_small)
    ratio = s_large / max(s_small, 1e-9)
    assert ratio <= limit, (
        f"{what}: {n_large:,} items took {s_large:.4f} s, {ratio:.0f}x the {s_small:.4f} s of {n_small:,} items "
        f"(linear growth would be {n_large / n_small:.0f}x; allowed {limit:.0f}x)"
    )
