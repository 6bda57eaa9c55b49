"""``shardkit simulate``: what a cluster's loaders ask the object store for, replayed from the plan.

:func:`simulate` is a pure function of a dataset's manifest (:class:`Dataset`; nothing else is read) and the
settings (:class:`SimSettings`): the real planner and the real read schedule
(:mod:`shardkit.simulate.schedule`, built on :mod:`shardkit.loader.readplan`) give every reading process's
requests in order, the timing model (:mod:`shardkit.simulate.clock`, with the real
:class:`~shardkit.storage.budget.RequestLimiter` on a virtual clock) when each is sent, and
:mod:`shardkit.simulate.report` the rates per prefix. The budget rules (auto block size, per-process rate,
phases) are :mod:`shardkit.storage.budget`'s, never a copy.

Assumptions (also on the "Scaling out" page): one source, fresh epochs, every sample of a shard the same
size (its bytes / samples), ranks stepping together, decoding free, requests sequential per process with a
fixed latency and bandwidth, the store never answering ``503 SlowDown``, a node cache of unlimited size
filled by the first process (in rank-major order) that opens a shard.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Union

import numpy as np

from shardkit.choices import check_types
from shardkit.plan import PlanConfig
from shardkit.simulate.clock import Timing, epoch_timing
from shardkit.simulate.report import PrefixRow, SimReport, peak_rate
from shardkit.simulate.schedule import HEAD, INDEX, KINDS, NOOP, Dataset, EpochSchedule, epoch_schedule
from shardkit.storage.budget import EXPECTED_IMG_PER_S, REQUEST_BUDGET, auto_block_size, process_rate

__all__ = ["Dataset", "EpochSchedule", "SimReport", "SimSettings", "Timing", "peak_rate", "simulate"]


@dataclass(frozen=True)
class SimSettings:
    """A cluster and its loader settings.

    Attributes:
        nodes, ranks_per_node, workers: the topology (``workers``: DataLoader workers per rank, 0: none).
        img_per_s_per_rank: what each rank consumes.
        epochs: epochs to replay (the node cache carries over).
        batch_size, seed: plan options (the rest are :class:`~shardkit.plan.PlanConfig`'s defaults).
        block_size: the buffered read size in bytes, or ``"auto"`` (:func:`shardkit.storage.budget.auto_block_size`
            for ``expected_img_per_s``, the budget (``REQUEST_BUDGET`` when none) and the prefixes).
        request_budget: GET/s per prefix for the whole world (None: no limiter).
        expected_img_per_s: the rate the auto block size is sized for (None: ``img_per_s_per_rank``).
        index: read through sample indexes where the dataset has them (False: the header walk, as ``--no-index``).
        cache: a node-local shard cache (``cache_dir``), kept across epochs.
        latency_s: seconds to the first byte of each request (model constant).
        bytes_per_s_per_process: a process's transfer rate (model constant).
    """

    nodes: int = 1
    ranks_per_node: int = 8
    workers: int = 8
    img_per_s_per_rank: float = EXPECTED_IMG_PER_S
    epochs: int = 1
    batch_size: int = 64
    seed: int = 0
    block_size: Union[int, str] = "auto"
    request_budget: Optional[float] = REQUEST_BUDGET
    expected_img_per_s: Optional[float] = None
    index: bool = True
    cache: bool = False
    latency_s: float = 0.03
    bytes_per_s_per_process: float = 100e6

    def __post_init__(self) -> None:
        check_types(self)
        if min(self.nodes, self.ranks_per_node, self.epochs, self.batch_size) < 1 or self.workers < 0:
            raise ValueError("--nodes, --ranks-per-node, --epochs and --batch-size must be >= 1, --workers >= 0")
        if self.img_per_s_per_rank <= 0 or self.latency_s < 0 or self.bytes_per_s_per_process <= 0:
            raise ValueError("--img-per-s-per-rank must be > 0 (and the model's latency >= 0, bandwidth > 0)")
        if isinstance(self.block_size, str) and self.block_size != "auto":
            raise ValueError(f"--block-size must be a size in bytes or 'auto', not {self.block_size!r}")
        if isinstance(self.block_size, int) and self.block_size < 1:
            raise ValueError(f"--block-size must be >= 1 byte, got {self.block_size}")
        if self.request_budget is not None and self.request_budget <= 0:
            raise ValueError(f"--request-budget must be > 0 GET/s (or none), got {self.request_budget}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def processes(self) -> int:
        """Reading processes of the world: ``world_size * max(1, workers)``."""
        return self.world_size * max(1, self.workers)


def block_size_for(data: Dataset, s: SimSettings) -> int:
    """The buffered read size ``s`` implies for ``data`` (``"auto"``: the budget's rule)."""
    if s.block_size != "auto":
        return int(s.block_size)
    per_sample = float(np.sum(data.nbytes)) / max(1, int(np.sum(data.samples)))
    expected = s.expected_img_per_s if s.expected_img_per_s is not None else s.img_per_s_per_rank
    return auto_block_size(
        processes=s.processes,
        bytes_per_s_per_process=expected * per_sample / max(1, s.workers),
        request_budget=s.request_budget if s.request_budget is not None else REQUEST_BUDGET,
        prefixes=len(data.prefixes),
    )


def simulate(data: Dataset, settings: SimSettings) -> SimReport:
    """Replay ``settings.epochs`` epochs of ``data`` on the cluster of ``settings`` (see the module docstring)."""
    s = settings
    block = block_size_for(data, s)
    rate = process_rate(s.request_budget, len(data.prefixes), s.processes) if s.request_budget is not None else None
    cfg = PlanConfig(batch_size=s.batch_size, seed=s.seed)
    cache: Optional[list[set[int]]] = [set() for _ in range(s.nodes)] if s.cache else None
    times, prefix, kinds, nbytes = [], [], [], []
    epochs, first = [], None
    start, waited, opens, hits = 0.0, 0.0, 0, 0
    for e in range(s.epochs):
        sched = epoch_schedule(
            data,
            cfg,
            world_size=s.world_size,
            num_workers=s.workers,
            epoch=e,
            block_size=block,
            index=s.index,
            cache=cache,
            ranks_per_node=s.ranks_per_node,
        )
        tm = epoch_timing(
            sched,
            world_size=s.world_size,
            num_workers=s.workers,
            batch_size=s.batch_size,
            img_per_s_per_rank=s.img_per_s_per_rank,
            start=start,
            rate=rate,
            latency_s=s.latency_s,
            bytes_per_s_per_process=s.bytes_per_s_per_process,
        )
        real = sched.kind != NOOP
        times.append(tm.send[real])
        prefix.append(data.shard_prefix[sched.shard[real]])
        kinds.append(sched.kind[real])
        nbytes.append(np.where(sched.kind[real] == HEAD, 0, (sched.hi - sched.lo)[real]))
        epochs.append(tm.end - start)
        if first is None:
            first = tm.first_batch
        if e > 0:
            opens, hits = opens + sched.opens, hits + sched.cache_hits
        waited += tm.waited
        start = tm.end
    t, pf, kd, nb = (np.concatenate(x) for x in (times, prefix, kinds, nbytes))
    duration = max(start, 1e-9)
    rows = []
    for i, name in enumerate(data.prefixes):
        sel = pf == i
        rows.append(PrefixRow(name, int(sel.sum()), peak_rate(t[sel]), float(sel.sum()) / duration, int(nb[sel].sum())))
    total_bytes = int(nb.sum())
    assert first is not None
    samples = int(np.sum(data.samples))
    used = {
        **asdict(s),
        "block_size": block,
        "block_size_auto": s.block_size == "auto",
        "num_prefixes": len(data.prefixes),
        "process_rate": rate,
        "processes": s.processes,
        "world_size": s.world_size,
        "samples": samples,
        "shards": len(data.names),
        "index": s.index and data.indexed,
    }
    return SimReport(
        settings=used,
        prefixes=tuple(rows),
        requests=len(t),
        by_kind={KINDS[k]: int((kd == k).sum()) for k in (HEAD, INDEX, 2)},
        peak_get_per_s=peak_rate(t),
        mean_get_per_s=len(t) / duration,
        duration_s=duration,
        bytes=total_bytes,
        bytes_per_s_per_node=total_bytes / duration / s.nodes,
        requests_per_gib=len(t) / max(total_bytes / 2**30, 1e-12),
        first_batch_s=(float(first.min()), float(np.median(first)), float(first.max())),
        epoch_s=tuple(epochs),
        img_per_s_per_rank=samples / s.world_size / (sum(epochs) / len(epochs)),
        cache_hit_rate=(hits / opens if opens else None) if s.cache else None,
        startup_requests=2 * s.world_size,
        waited_s=waited,
    )
