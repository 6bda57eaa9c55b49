"""The loader doctor's judgement: steady-state rate, time to first batch, and a verdict.

A loader's first batches pay for worker start-up and the first shuffle block,
so a short window says little about steady state. :func:`measure` times an
iterator of batches the way the benchmarks do: the clock for the rate starts
once every worker has delivered its first batch (DataLoader hands batches out
round-robin, so that is after ``warm = max(1, num_workers)`` batches), then
the rate is taken over consecutive windows until two in a row agree within
``tolerance`` (or a time or batch limit is hit, which the result says). Time
to the first batch is reported separately: it is what every epoch start and
every resume pays.

:func:`verdict` turns a rate and a training step time into an answer to "is
my input pipeline the bottleneck?", with the stage that explains it;
:func:`epoch_report` is the same diagnosis in one line per epoch of training, and
:func:`storage_report` says what request budget each reading process got (read size, GET/s) and
what it cost (time waited for the budget, slow-downs from the store).
Everything here is pure (the clock is injected), so it is tested with a fake
clock and stub loaders.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from shardkit.storage.budget import ReadBudget


@dataclass(frozen=True)
class SteadyRate:
    """What :func:`measure` found.

    ``images_per_s`` is the rate over the last two windows (the stable pair when
    ``stable``); ``windows`` the rate of every window, in order.
    """

    images_per_s: float
    first_batch_s: float
    windows: tuple[float, ...]
    stable: bool
    batches: int  #: batches timed (after the warm-up)
    seconds: float  #: seconds timed (after the warm-up)
    stop: str  #: why it stopped: "stable", "time limit", "batch limit", "end of data"

    @property
    def spread(self) -> float:
        """img/s: half the difference between the last two windows (the uncertainty of ``images_per_s``)."""
        return abs(self.windows[-1] - self.windows[-2]) / 2 if len(self.windows) >= 2 else 0.0


def measure(
    batch_sizes: Iterable[int],
    *,
    warm: int,
    window: int = 10,
    tolerance: float = 0.05,
    max_batches: int = 10_000,
    min_batches: int = 0,
    max_s: float = 60.0,
    clock: Callable[[], float] = time.perf_counter,
) -> SteadyRate:
    """Time ``batch_sizes`` (the size of each batch, as the loader yields them) to a steady rate.

    Args:
        batch_sizes: one int per batch, produced lazily (e.g. ``(len(x) for x, _ in loader)``).
        warm: batches to take before the rate clock starts (``max(1, num_workers)``).
        window: batches per window (at least 1).
        tolerance: two consecutive windows within this relative difference are stable.
        max_batches: at most this many timed batches.
        min_batches: at least this many timed batches before a stable pair may end the measurement.
        max_s: at most this many timed seconds (checked after each batch).
        clock: seconds (tests pass a fake clock).
    """
    if warm < 1 or window < 1:
        raise ValueError(f"warm and window must be >= 1, got {warm}, {window}")
    it = iter(batch_sizes)
    start = clock()
    first = None
    for i in range(warm):
        if next(it, None) is None:
            return SteadyRate(0.0, (clock() - start) if first is None else first, (), False, 0, 0.0, "end of data")
        if i == 0:
            first = clock() - start
    t0 = clock()
    windows: list[float] = []
    win_n, win_t0, stop = 0, t0, "end of data"
    last_two: list[tuple[int, float]] = []  # (images, seconds) of the last two windows
    batches = 0
    for b in it:
        batches += 1
        win_n += b
        now = clock()
        if batches % window == 0:
            dt = now - win_t0
            windows.append(win_n / dt if dt > 0 else float("inf"))
            last_two = (last_two + [(win_n, dt)])[-2:]
            win_n, win_t0 = 0, now
            if len(windows) >= 2 and batches >= min_batches and _close(windows[-2], windows[-1], tolerance):
                stop = "stable"
                break
        if batches >= max_batches:
            stop = "batch limit"
            break
        if now - t0 >= max_s:
            stop = "time limit"
            break
    seconds = clock() - t0
    if last_two:
        imgs, secs = sum(x for x, _ in last_two), sum(t for _, t in last_two)
        rate = imgs / secs if secs > 0 else 0.0
    else:  # fewer batches than one window: the rate over what there was
        rate = win_n / seconds if seconds > 0 else 0.0
    return SteadyRate(rate, first or 0.0, tuple(windows), stop == "stable", batches, seconds, stop)


def _close(a: float, b: float, tolerance: float) -> bool:
    hi = max(a, b)
    return hi > 0 and abs(a - b) / hi <= tolerance


class StageTimes(Protocol):
    """What :func:`verdict` and :func:`epoch_report` read of ``loader.stats`` (read-only)."""

    @property
    def read_s(self) -> float: ...
    @property
    def decode_s(self) -> float: ...
    @property
    def resize_s(self) -> float: ...
    @property
    def collate_s(self) -> float: ...


_STAGES = ("read", "decode", "resize", "collate")


def slowest_stage(stats: StageTimes) -> tuple[str, float]:
    """``(stage, share of worker time)`` of the stage that took the most worker time."""
    times = [float(getattr(stats, f"{s}_s")) for s in _STAGES]
    total = sum(times)
    i = max(range(len(times)), key=times.__getitem__)
    return _STAGES[i], (times[i] / total if total > 0 else 0.0)


_ADVICE = {
    "decode": "add CPU workers or convert at a smaller --short-side",
    "resize": "add CPU workers or convert at a size closer to the training size (--short-side)",
    "read": "cache shards on local disk (cache_dir=...) or move the data closer; reads are the slowest stage",
    "collate": "add CPU workers; collation is the slowest stage (check pin_memory and the batch hook)",
}


_THROTTLED = (
    "reads spent {pct:.0f} % of their time waiting for the request budget: spread the shards over more prefixes "
    "(shardkit convert --prefixes N), or raise request_budget if your store allows more GET/s per prefix"
)


def verdict(
    *,
    images_per_s: float,
    batch_size: int,
    step_ms: float,
    stats: Optional[StageTimes] = None,
    workers: int = 0,
    cpus: Optional[int] = None,
    gpu: bool = False,
) -> str:
    """One paragraph: is a training step of ``step_ms`` per batch input-bound at ``images_per_s``?"""
    if images_per_s <= 0:
        return "no batches were measured: the loader delivered nothing (check the dataset with `shardkit verify`)"
    loader_ms = 1000.0 * batch_size / images_per_s
    if loader_ms <= step_ms:
        head = (
            f"not input-bound: the loader gives a batch of {batch_size} every {loader_ms:.1f} ms, your step takes "
            f"{step_ms:.1f} ms ({step_ms / loader_ms:.1f}x headroom)"
        )
        return head
    head = (
        f"input-bound: the loader gives a batch of {batch_size} every {loader_ms:.1f} ms, your step takes {step_ms:.1f} ms "
        f"(the GPU would wait {loader_ms - step_ms:.1f} ms per step, {100 * (1 - step_ms / loader_ms):.0f} % of the time)"
    )
    if stats is None:
        return head
    stage, share = slowest_stage(stats)
    advice = _ADVICE[stage]
    throttled = float(getattr(stats, "throttled_s", 0.0))
    if stage == "read" and throttled >= 0.5 * stats.read_s > 0:
        advice = _THROTTLED.format(pct=100 * throttled / stats.read_s)
    if stage in ("decode", "resize") and gpu:
        advice = 'decode on the GPU (decode_on="device": nvJPEG, no CPU decode), or ' + advice
    more = ""
    if cpus is not None and workers < cpus and stage != "read":
        more = f"; {workers} workers on {cpus} CPUs: more workers will help"
    return f"{head}; slowest stage: {stage} ({100 * share:.0f} % of worker time): {advice}{more}"


class EpochStats(StageTimes, Protocol):
    @property
    def samples(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def retries(self) -> int: ...
    @property
    def wait_s(self) -> float: ...
    @property
    def elapsed_s(self) -> float: ...


def epoch_report(epoch: int, stats: EpochStats) -> str:
    """One line about an epoch of training: how much of it the loop waited for data, and why."""
    wall = stats.elapsed_s
    waited = 100.0 * stats.wait_s / wall if wall > 0 else 0.0
    rate = stats.samples / wall if wall > 0 else 0.0
    stage, share = slowest_stage(stats)
    slowdowns, throttled = int(getattr(stats, "slowdowns", 0)), float(getattr(stats, "throttled_s", 0.0))
    budget = (
        f", {slowdowns} slow-downs, {throttled:.1f} s waiting for the request budget" if slowdowns or throttled else ""
    )
    return (
        f"shardkit epoch {epoch}: waited {waited:.0f} % of {wall:.1f} s for data, {rate:.0f} img/s, "
        f"{stats.skipped} skipped, {stats.retries} retries{budget}, slowest stage {stage} ({100 * share:.0f} %)"
    )


def storage_report(budget: "ReadBudget", stats: Optional[StageTimes] = None) -> str:
    """One line: the read size and request rate of each reading process (``budget``), and, given a pass's
    ``stats``, the time its workers waited for the budget and the slow-downs the store sent."""
    line = "storage: " + budget.describe()
    if stats is None:
        return line
    slowdowns, throttled = int(getattr(stats, "slowdowns", 0)), float(getattr(stats, "throttled_s", 0.0))
    read = float(stats.read_s)
    share = f" ({100 * throttled / read:.0f} % of read time)" if read > 0 else ""
    line += f"; waited {throttled:.2f} s for the budget{share}, {slowdowns} slow-downs from the store"
    if slowdowns:
        line += " (each halved that worker's rate): spread shards over more prefixes or lower request_budget"
    return line


def ticks(workers: Sequence[int]) -> list[int]:
    """Integer worker-count ticks for the plot (every count measured, sorted)."""
    return sorted(set(int(w) for w in workers))
