"""When each request of an epoch is sent: the consumers' pace, the read-ahead and the request limiter.

The model (every assumption here is also on the "Scaling out" page):

* **Consumption.** The ranks step together (DDP): batch ``t`` is taken when every rank has it, and no sooner
  than ``batch_size / img_per_s_per_rank`` after batch ``t - 1``. Batch ``t`` of a rank is made by worker
  ``t % W`` from its ``t // W``-th batch of samples (:mod:`shardkit.plan.split`); it is ready when the worker
  has read the block holding that batch's last sample (decoding is free).
* **Read-ahead** (:func:`shardkit.loader.read.reader.read_blocks`): a worker reads its first block at the epoch's start
  and starts reading block ``k + 1`` once block ``k`` is read and the worker starts emitting block ``k``: when
  the DataLoader asks it for the batch holding block ``k``'s first sample, which it does ``2 * W`` batches
  ahead of the consumer (``prefetch_factor=2``; without workers, when the batch is taken). The asking time is
  the consumer's nominal pace from its first batch (open loop: after a stall the workers read back to back).
* **Requests.** A process sends its requests one after another (one read in flight); each takes
  ``latency_s`` plus its bytes at ``bytes_per_s_per_process``; a ``HEAD`` takes ``latency_s``.
* **Limiter.** With a budget each process has its own :class:`shardkit.storage.budget.RequestLimiter` (the
  real one, on a virtual clock), made at the epoch's start with :func:`shardkit.storage.budget.process_phase`,
  and every request waits for it (no ``503 SlowDown`` in the model: the store never pushes back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from shardkit.simulate.schedule import HEAD, NOOP, EpochSchedule
from shardkit.storage.budget import RequestLimiter, process_phase


@dataclass(frozen=True, eq=False)
class Timing:
    """When the requests of one epoch were sent, and what the ranks saw."""

    send: np.ndarray  #: per request (NOOP entries included, at the time their read happened)
    first_batch: np.ndarray  #: per rank: seconds from the epoch's start until its first batch was ready
    end: float  #: when the last batch has been consumed (the next epoch starts then)
    waited: float  #: seconds the processes waited for the limiter, all together


class _Limiters:
    """Every process's :class:`~shardkit.storage.budget.RequestLimiter` on one virtual clock, each made when its
    process first sends (on the clock at the epoch's start); ``waited`` sums the seconds they made processes wait."""

    def __init__(self, rate: Optional[float], *, start: float, world_size: int, W: int, phase_workers: int) -> None:
        self.rate, self.start, self.world_size, self.W, self.phase_workers = rate, start, world_size, W, phase_workers
        self.now = start
        self.waited = 0.0
        self.limiters: dict[int, RequestLimiter] = {}

    def sleep(self, s: float) -> None:
        """The limiter's sleep: counted, not slept."""
        self.waited += s

    def clock(self) -> float:
        """The virtual clock the limiters read."""
        return self.now

    def delay(self, p: int, at: float) -> float:
        """Seconds process ``p``'s limiter holds back a request it would send at ``at``."""
        self.now = at
        if p not in self.limiters:
            W = self.W
            self.now = self.start
            phase = process_phase(p // W, p % W, self.world_size, self.phase_workers)
            self.limiters[p] = RequestLimiter(self.rate, phase=phase, clock=self.clock, sleep=self.sleep)
            self.now = at
        return self.limiters[p].acquire()


class _Sender:
    """The send times of an epoch's requests, request after request in schedule order.

    A process's read starts when the worker may read it (:meth:`gate`), each further request of the read when
    the one before it is done; a read whose start depends on when the consumer takes its first batch is left
    for a second pass (:meth:`run_pass`), made once every rank's first batch time is known.
    """

    def __init__(
        self,
        sched: EpochSchedule,
        *,
        start: float,
        dt: float,
        pull_t: np.ndarray,
        cost: list[float],
        limiters: Optional[_Limiters],
    ) -> None:
        nreq = len(sched.proc)
        self.proc, self.read, self.kind = sched.proc.tolist(), sched.read.tolist(), sched.kind.tolist()
        self.first_read = np.searchsorted(sched.read_proc, np.arange(sched.processes), side="left")
        self.start, self.dt, self.pull_t, self.cost, self.limiters = start, dt, pull_t, cost, limiters
        self.done = np.full(len(sched.read_proc), np.nan)  #: when each read is done
        self.send = np.zeros(nreq)
        self.finish = np.zeros(nreq)
        self.todo = np.zeros(nreq, bool)
        self.t0 = np.nan  #: when the consumer takes its first batch (NaN: not known yet)

    def gate(self, k: int, p: int) -> Optional[float]:
        """When read ``k`` may start (None: not known before the first batch's time)."""
        start, done, t0 = self.start, self.done, self.t0
        if k == self.first_read[p]:
            return start
        t = int(self.pull_t[k - 1])
        if t <= 0:
            return max(float(done[k - 1]), start)
        if np.isnan(t0):
            return None
        return max(float(done[k - 1]), t0 + t * self.dt)

    def run_pass(self, phase: int) -> None:
        """Pass ``phase`` over the requests: 0, every request whose time is known; 1, the ones left over."""
        proc, read, kind, send, finish, todo = self.proc, self.read, self.kind, self.send, self.finish, self.todo
        blocked = -1
        for i in range(len(proc)):
            p, k = proc[i], read[i]
            if phase == 1 and not todo[i]:
                continue
            if blocked == p:
                todo[i] = True
                continue
            if i == 0 or read[i - 1] != k or proc[i - 1] != p:
                ready = self.gate(k, p)
                if ready is None:
                    blocked = p
                    todo[i] = True
                    continue
            else:
                ready = finish[i - 1]
            if kind[i] != NOOP and self.limiters is not None:
                ready += self.limiters.delay(p, ready)
            send[i], finish[i] = ready, ready + self.cost[i]
            self.done[k] = finish[i]


def epoch_timing(
    sched: EpochSchedule,
    *,
    world_size: int,
    num_workers: int,
    batch_size: int,
    img_per_s_per_rank: float,
    start: float = 0.0,
    rate: Optional[float] = None,
    latency_s: float = 0.03,
    bytes_per_s_per_process: float = 100e6,
    phase_workers: Optional[int] = None,
) -> Timing:
    """Send times of ``sched``'s requests for an epoch starting at ``start`` (see the module docstring).

    Args:
        rate: GET/s each process may send (:func:`shardkit.storage.budget.process_rate`); None: no limit.
        phase_workers: workers per rank the phases spread over (the budget's reading workers,
            ``ReadBudget.processes // world_size``); None: ``num_workers``.
    """
    W = max(1, num_workers)
    dt = batch_size / img_per_s_per_rank
    lead = 2 * W if num_workers > 0 else 0
    # the consumer's batch index at which read k's block starts being emitted (<= 0: at the epoch's start)
    pull_t = (sched.read_start // batch_size) * W + (sched.read_proc % W) - lead
    limiters = None
    if rate is not None:
        workers = num_workers if phase_workers is None else phase_workers
        limiters = _Limiters(rate, start=start, world_size=world_size, W=W, phase_workers=workers)
    sender = _Sender(
        sched,
        start=start,
        dt=dt,
        pull_t=pull_t,
        cost=_costs(sched, latency_s, bytes_per_s_per_process),
        limiters=limiters,
    )
    sender.run_pass(0)
    avail = _availability(sched, sender.done, world_size, W, batch_size)
    sender.t0 = float(avail[:, 0].max()) if avail.size else start
    sender.run_pass(1)
    waited = limiters.waited if limiters is not None else 0.0
    avail = _availability(sched, sender.done, world_size, W, batch_size)
    if avail.size == 0:
        return Timing(sender.send, np.zeros(world_size), start, waited)
    ready_all = np.nanmax(avail, axis=0)  # lockstep: a step waits for the slowest rank
    t = np.arange(ready_all.size)
    taken = t * dt + np.maximum.accumulate(ready_all - t * dt)
    return Timing(sender.send, avail[:, 0] - start, float(taken[-1] + dt), waited)


def _costs(sched: EpochSchedule, latency_s: float, bytes_per_s_per_process: float) -> list[float]:
    """Seconds each request takes: ``latency_s`` plus its bytes at ``bytes_per_s_per_process`` (a ``HEAD``: the
    latency; a NOOP entry: none)."""
    cost = (np.where(sched.kind == HEAD, 0, sched.hi - sched.lo) / bytes_per_s_per_process + latency_s).tolist()
    return [0.0 if k == NOOP else c for k, c in zip(sched.kind.tolist(), cost)]


def _availability(sched: EpochSchedule, done: np.ndarray, world_size: int, W: int, batch_size: int) -> np.ndarray:
    """``[rank, batch]``: when each batch of each rank is ready (its last sample's block read; NaN: not yet known)."""
    nb = -(-sched.chunk_len // batch_size)  # batches per process
    steps = int(nb.reshape(world_size, W).sum(axis=1).max()) if len(nb) else 0
    out = np.full((world_size, steps), np.nan)
    total = int(nb.sum())
    if not total:
        return out
    p = np.repeat(np.arange(len(nb)), nb)
    j = np.arange(total) - np.repeat(np.cumsum(nb) - nb, nb)
    last = np.minimum((j + 1) * batch_size, sched.chunk_len[p]) - 1
    big = int(sched.chunk_len.max()) + 1
    k = np.searchsorted(sched.read_proc * big + sched.read_start, p * big + last, side="right") - 1
    out[p // W, j * W + p % W] = done[k]
    return out
