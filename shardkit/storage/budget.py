"""Request budgets: how many GETs a reading process may send, and how large each read should be.

Object stores throttle per key prefix: S3 documents about 5,500 GET/HEAD and 3,500 PUT requests per
second per partitioned prefix before answering ``503 SlowDown`` (re-partitioning takes 30-60 minutes);
GCS starts near 5,000 reads per second per bucket. A cluster of a thousand nodes reaches that with
small reads, and retrying with backoff keeps it alive but slow exactly when it is most expensive.

Everything here is a pure function of its arguments (the limiter's clock and sleep are injected), so
``shardkit simulate`` replays the same rules the loader applies:

* :func:`process_rate`: the GET/s one reading process may send: the budget per prefix times the
  prefixes it spreads over, shared by every reading process of the world.
* :func:`auto_block_size`: the read size that keeps the expected byte rate under that request rate,
  a power of two within ``[MIN_BLOCK, MAX_BLOCK]`` (memory: a reader holds about one block).
* :func:`process_phase`: where in the first request interval a process starts (evenly spread over the
  world, so the first requests of a thousand nodes do not land in the same second).
* :class:`RequestLimiter`: spaces one process's requests at least ``1 / rate`` apart; a ``503
  SlowDown`` or ``429`` (:func:`is_slowdown`) halves the rate (:meth:`RequestLimiter.slow_down`) and
  it recovers additively.
* :func:`read_budget`: the three above resolved for one reading process of a world (its
  :class:`ReadBudget`: read size, rate, phase), from the storage options and the dataset's bytes
  per sample and prefixes: what the loader gives each worker's opener and what ``shardkit simulate``
  assumes for each simulated process.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Optional, Union

#: default request budget: GET/s per prefix for the whole world (S3 documents 5,500 GET/HEAD per partitioned prefix;
#: 3,500, its write figure, leaves room for other readers, listings and the writers of a running job)
REQUEST_BUDGET = 3500.0
#: expected images per second per rank when the loader sizes reads for a budget (the loader's measured speed on two
#: cores is about 3,900; a rank that consumes less sends fewer requests than planned, never more)
EXPECTED_IMG_PER_S = 3000.0
#: smallest and largest read size ``block_size="auto"`` chooses
MIN_BLOCK = 1 << 20
MAX_BLOCK = 64 << 20
#: the read size of a fixed configuration before budgets (and of ``shardkit simulate --block-size`` "before" tables)
LEGACY_BLOCK = 8 << 20
#: a slowed limiter never goes below this fraction of its configured rate
FLOOR_FRACTION = 1 / 64
#: seconds without a slow-down signal before the rate grows again by ``1 / RECOVER_STEPS`` of the configured rate
RECOVER_S = 1.0
RECOVER_STEPS = 16


def process_rate(request_budget: float, prefixes: int, processes: int) -> float:
    """GET/s one reading process may send: ``request_budget`` per prefix over ``prefixes`` prefixes,
    shared evenly by ``processes`` reading processes (DataLoader workers, or ranks without workers)."""
    if request_budget <= 0:
        raise ValueError(f"request_budget must be > 0 GET/s, got {request_budget}")
    return request_budget * max(1, prefixes) / max(1, processes)


def auto_block_size(
    *,
    processes: int,
    bytes_per_s_per_process: float,
    request_budget: float,
    prefixes: int,
    lo: int = MIN_BLOCK,
    hi: int = MAX_BLOCK,
) -> int:
    """The smallest power of two in ``[lo, hi]`` whose reads keep ``bytes_per_s_per_process`` within
    :func:`process_rate` (``hi`` when none does: the limiter then holds the budget and the reader waits)."""
    rate = process_rate(request_budget, prefixes, processes)
    need = bytes_per_s_per_process / rate
    size = lo
    while size < need and size < hi:
        size *= 2
    return min(size, hi)


def process_phase(rank: int, worker: int, world_size: int, num_workers: int) -> float:
    """The fraction of a request interval process ``(rank, worker)`` waits before its first request:
    the processes of the world spread evenly over ``[0, 1)`` (worker-major within a rank's slot)."""
    workers = max(1, num_workers)
    index = rank * workers + max(0, worker)
    return (index % (max(1, world_size) * workers)) / (max(1, world_size) * workers)


#: error codes that ask the client to send fewer requests (S3, and the names other stores and SDKs use)
SLOWDOWN_CODES = frozenset(
    {"SlowDown", "503", "429", "TooManyRequests", "Throttling", "ThrottlingException", "RequestLimitExceeded"}
)
_SLOWDOWN_STATUS = (429, 503)


def is_slowdown(exc: BaseException) -> bool:
    """True when ``exc`` (or an error in its cause/context chain) says the store wants fewer requests:
    S3's ``SlowDown`` code, an HTTP ``503`` or ``429`` (botocore's ``response``, aiohttp's ``status``,
    gcsfs's ``code``), or S3's message "reduce your request rate"."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = str((response.get("Error") or {}).get("Code", ""))
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in SLOWDOWN_CODES or status in _SLOWDOWN_STATUS:
                return True
        status = getattr(e, "status", None)  # aiohttp
        if status is None:
            status = getattr(e, "code", None)  # gcsfs's HttpError
        if status in _SLOWDOWN_STATUS:
            return True
        text = str(e)
        if "SlowDown" in text or "reduce your request rate" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


#: ``StorageConfig.block_size``'s choice for a size from the budget
AUTO: Literal["auto"] = "auto"


@dataclass(frozen=True)
class ReadBudget:
    """What one reading process applies to its remote reads (:func:`read_budget`).

    Attributes:
        block_size: bytes per read-ahead request (the header walk's buffer; index range reads are planned).
        rate: GET/s this process may send (:func:`process_rate`); ``None``: no limiter.
        phase: :func:`process_phase` of the process.
        prefixes: prefixes the dataset's shards spread over (at least 1).
        processes: reading processes of the world (``world_size * max(1, num_workers)``).
    """

    block_size: int
    rate: Optional[float]
    phase: float
    prefixes: int
    processes: int

    def limiter(
        self, *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> Optional["RequestLimiter"]:
        """A fresh :class:`RequestLimiter` for this process (``None`` without a rate)."""
        if self.rate is None:
            return None
        return RequestLimiter(self.rate, phase=self.phase, clock=clock, sleep=sleep)

    def describe(self) -> str:
        """One line: the read size and request rate chosen, and what they come from."""
        rate = "no request limit" if self.rate is None else f"{self.rate:.3g} GET/s per process"
        size = self.block_size
        size_text = f"{size / (1 << 20):g} MiB" if size >= 1 << 20 else f"{size / 1024:g} KiB"
        return (
            f"reads of {size_text}, {rate} "
            f"({self.processes} reading process{'es' if self.processes != 1 else ''} over {self.prefixes} "
            f"prefix{'es' if self.prefixes != 1 else ''})"
        )


def read_budget(
    *,
    block_size: Union[int, Literal["auto"]],
    request_budget: Optional[float],
    expected_img_per_s: float,
    bytes_per_sample: float,
    prefixes: int,
    world_size: int,
    num_workers: int,
    rank: int = 0,
    worker: int = 0,
    batches_per_rank: Optional[int] = None,
) -> ReadBudget:
    """The :class:`ReadBudget` of reading process ``(rank, worker)`` of a world.

    ``processes = world_size * max(1, num_workers)``; ``rate = process_rate(request_budget, prefixes,
    processes)`` (``None`` without a budget); ``block_size="auto"`` is :func:`auto_block_size` for
    ``expected_img_per_s * bytes_per_sample / max(1, num_workers)`` bytes/s per process (a rank's
    expected rate shared by its workers), or :data:`LEGACY_BLOCK` without a budget; an int wins as given.

    ``batches_per_rank`` (the epoch's batches of every rank; None: unknown): a DataLoader hands a rank's
    batches to its workers in turn, so only ``min(num_workers, batches_per_rank)`` of them read anything; the
    budget is shared by those (a large world reading a small dataset would otherwise leave most of it unused),
    and "workers" above means them.
    """
    workers = max(1, num_workers)
    if batches_per_rank is not None:
        workers = max(1, min(workers, batches_per_rank))
    processes = max(1, world_size) * workers
    prefixes = max(1, prefixes)
    rate = None if request_budget is None else process_rate(request_budget, prefixes, processes)
    if block_size != AUTO:
        size = int(block_size)
    elif request_budget is None:
        size = LEGACY_BLOCK
    else:
        per_process = expected_img_per_s * max(0.0, bytes_per_sample) / workers
        size = auto_block_size(
            processes=processes, bytes_per_s_per_process=per_process, request_budget=request_budget, prefixes=prefixes
        )
    return ReadBudget(size, rate, process_phase(rank, worker, world_size, workers), prefixes, processes)


class RequestLimiter:
    """Grants one process's requests on a lattice ``1 / rate`` seconds apart (no bursts).

    The grants lie on the points ``start + (phase + k) / rate``: a request waits for the next point not yet
    granted, and after an idle spell for the first point after now. So every process's grants are at least
    ``1 / rate`` apart, and processes of equal rate whose phases are spread evenly over ``[0, 1)``
    (:func:`process_phase`) grant on one common lattice of ``1 / (their summed rate)``: however they are
    busy or idle, a 1 s window of the world holds at most the summed rate (the budget), not one request per
    process more. The points are computed from a count (no drift) and stretched by ``1e-9`` so that
    rounding never fits one more into a window. :meth:`slow_down` (a ``503 SlowDown`` or ``429``) halves the
    current rate, down to ``FLOOR_FRACTION`` of the configured one; after ``RECOVER_S`` seconds without one
    the rate grows by ``rate / RECOVER_STEPS`` per ``RECOVER_S`` back to the configured rate (each change
    starts a new lattice at the next point). Thread-safe (the read-ahead thread and the reader share one).
    ``waited_s`` and ``slowdowns`` count.

    Args:
        rate: configured GET/s of this process (:func:`process_rate`); ``None`` or ``inf``: no limit.
        phase: :func:`process_phase`.
        clock: seconds, monotonic (injected: ``shardkit simulate`` drives a virtual clock).
        sleep: waits that many seconds.
    """

    #: the lattice's spacing is ``STRETCH / rate``: rounding never fits ``rate + 1`` grants into 1 s
    STRETCH = 1.0 + 1e-9

    def __init__(
        self,
        rate: float | None,
        *,
        phase: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.rate = rate if rate is not None and rate > 0 else float("inf")
        self.current = self.rate
        self.clock, self.sleep = clock, sleep
        now = clock()
        self._period = self.STRETCH / self.rate if self.rate != float("inf") else 0.0
        self._base, self._k = now + phase * self._period, 0  # the next point is base + k * period
        self._calm_since = now
        self._lock = threading.Lock()
        self.waited_s = 0.0  #: seconds spent waiting for the budget
        self.slowdowns = 0  #: slow-down signals seen

    def _slot(self) -> float:
        return self._base + self._k * self._period

    def _rebase(self, at: float) -> None:
        """A new lattice at the current rate whose first point is ``at``."""
        self._base, self._k, self._period = at, 0, self.STRETCH / self.current

    def _recover(self, now: float) -> None:
        if self.current < self.rate and now - self._calm_since >= RECOVER_S:
            steps = int((now - self._calm_since) / RECOVER_S)
            self.current = min(self.rate, self.current + steps * self.rate / RECOVER_STEPS)
            self._calm_since += steps * RECOVER_S
            self._rebase(self._slot())

    def acquire(self) -> float:
        """Wait until this process may send one request; returns the seconds waited."""
        if self.rate == float("inf"):
            return 0.0
        with self._lock:
            now = self.clock()
            self._recover(now)
            if self._slot() < now:  # idle: the first point after now
                self._k = max(self._k, math.ceil((now - self._base) / self._period - 1e-9))
                if self._slot() < now:
                    self._k += 1
            at = self._slot()
            self._k += 1
            wait = at - now
            if wait > 0:
                self.waited_s += wait
        if wait > 0:
            self.sleep(wait)
        return max(0.0, wait)

    def slow_down(self) -> None:
        """The store said slow down (``503 SlowDown``, ``429``): halve the rate (not below the floor)."""
        if self.rate == float("inf"):
            return
        with self._lock:
            self.slowdowns += 1
            now = self.clock()
            self._recover(now)  # the calm seconds since the last signal count even when nothing was sent
            self.current = max(self.rate * FLOOR_FRACTION, self.current / 2)
            self._calm_since = now
            self._rebase(max(self._slot(), now + self.STRETCH / self.current))
