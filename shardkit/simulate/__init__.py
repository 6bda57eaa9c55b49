"""``shardkit simulate``: what a cluster's loaders ask the object store for, replayed from the plan.

:func:`simulate` is a pure function of a dataset's manifest (:class:`Dataset`; nothing else is read) and the
settings (:class:`SimSettings`): the real planner and the real read schedule
(:mod:`shardkit.simulate.schedule`, built on :mod:`shardkit.loader.read.ranges`) give every reading process's
requests in order, the timing model (:mod:`shardkit.simulate.clock`, with the real
:class:`~shardkit.storage.budget.RequestLimiter` on a virtual clock) when each is sent, and
:mod:`shardkit.simulate.report` the rates per prefix. The budget rules (auto block size, per-process rate,
phases) are :mod:`shardkit.storage.budget`'s, never a copy.

Assumptions (also on the "Scaling out" page): one source, fresh epochs, every sample of a shard the same
size (its bytes / samples), ranks stepping together, decoding free, requests sequential per process with a
fixed latency and bandwidth, the store never answering ``503 SlowDown``, a node cache of unlimited size
filled by the first process (in rank-major order) that opens a shard (the node's other processes wait for that
one download), sample indexes through the node cache when there is one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from shardkit.simulate.report import PrefixRow, SimReport, peak_rate
from shardkit.simulate.settings import SimSettings
from shardkit.storage.budget import ReadBudget, read_budget

if TYPE_CHECKING:
    from shardkit.simulate.clock import Timing
    from shardkit.simulate.schedule import Dataset, EpochSchedule

__all__ = ["Dataset", "EpochSchedule", "SimReport", "SimSettings", "Timing", "peak_rate", "simulate"]

#: names served from the modules that import the loader's read plan (imported when first used: the command's
#: options and ``--help`` stay light)
_LAZY = {"Dataset": "schedule", "EpochSchedule": "schedule", "Timing": "clock"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"shardkit.simulate.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'shardkit.simulate' has no attribute {name!r}")


def batches_per_rank(data: "Dataset", s: SimSettings) -> int:
    """Batches every rank yields in an epoch of ``data`` (the planner's rank split)."""
    from shardkit.plan import PlanConfig
    from shardkit.plan.split import rank_split

    cfg = PlanConfig(batch_size=s.batch_size, seed=s.seed, node_affinity=s.node_affinity)
    return rank_split(int(np.sum(data.samples)), s.world_size, cfg).num_batches


def read_budget_for(data: "Dataset", s: SimSettings) -> "ReadBudget":
    """The :class:`~shardkit.storage.budget.ReadBudget` the loader gives every reading process of ``s``'s world
    for ``data`` (the loader's own rule, :func:`shardkit.storage.budget.read_budget`, shared by the workers with
    batches to read; the phase is per process: ``ReadBudget.processes // world_size`` workers per rank)."""
    per_sample = float(np.sum(data.nbytes)) / max(1, int(np.sum(data.samples)))
    expected = s.expected_img_per_s if s.expected_img_per_s is not None else s.img_per_s_per_rank
    return read_budget(
        block_size="auto" if s.block_size == "auto" else int(s.block_size),
        request_budget=s.request_budget,
        expected_img_per_s=expected,
        bytes_per_sample=per_sample,
        prefixes=len(data.prefixes),
        world_size=s.world_size,
        num_workers=s.workers,  # the reading processes of the world: every worker of every rank
        batches_per_rank=batches_per_rank(data, s),
    )


def block_size_for(data: "Dataset", s: SimSettings) -> int:
    """The buffered read size ``s`` implies for ``data`` (``"auto"``: the budget's rule)."""
    return read_budget_for(data, s).block_size


@dataclass
class _Replay:
    """What the epochs of a replay sent and how long they took, epoch after epoch.

    Attributes:
        times, prefix, kinds, nbytes: per epoch, per request sent (no-op entries left out): its send time,
            prefix, kind and bytes read from the store.
        per_epoch: bytes read from the store in each epoch.
        epochs: each epoch's duration.
        first: each rank's first batch time in the first epoch.
        end: when the last epoch's last batch was consumed.
        waited: seconds the processes waited for the limiter, all together.
        opens, hits: shard opens in the epochs after the first, and those the node cache served.
        waits: shard opens that waited for (or found done) another process's download of the node.
    """

    times: list[np.ndarray] = field(default_factory=list)
    prefix: list[np.ndarray] = field(default_factory=list)
    kinds: list[np.ndarray] = field(default_factory=list)
    nbytes: list[np.ndarray] = field(default_factory=list)
    per_epoch: list[int] = field(default_factory=list)
    epochs: list[float] = field(default_factory=list)
    first: Optional[np.ndarray] = None
    end: float = 0.0
    waited: float = 0.0
    opens: int = 0
    hits: int = 0
    waits: int = 0


def _replay(data: "Dataset", s: SimSettings, budget: "ReadBudget") -> _Replay:
    """Schedule and time ``s.epochs`` epochs one after another (the node caches carry over)."""
    from shardkit.plan import PlanConfig
    from shardkit.simulate.clock import epoch_timing
    from shardkit.simulate.schedule import HEAD, NOOP, epoch_schedule

    block, rate = budget.block_size, budget.rate
    cfg = PlanConfig(batch_size=s.batch_size, seed=s.seed, node_affinity=s.node_affinity)
    cache: Optional[list[set[int]]] = [set() for _ in range(s.nodes)] if s.cache else None
    index_cache: Optional[list[set[int]]] = [set() for _ in range(s.nodes)] if s.cache else None
    run = _Replay()
    times, prefix, kinds, nbytes, per_epoch = run.times, run.prefix, run.kinds, run.nbytes, run.per_epoch
    start = 0.0
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
            index_cache=index_cache,
        )
        tm = epoch_timing(
            sched,
            world_size=s.world_size,
            num_workers=s.workers,
            batch_size=s.batch_size,
            img_per_s_per_rank=s.img_per_s_per_rank,
            start=start,
            rate=rate,
            phase_workers=budget.processes // s.world_size,
            latency_s=s.latency_s,
            bytes_per_s_per_process=s.bytes_per_s_per_process,
        )
        real = sched.kind != NOOP
        times.append(tm.send[real])
        prefix.append(data.shard_prefix[sched.shard[real]])
        kinds.append(sched.kind[real])
        nbytes.append(np.where(sched.kind[real] == HEAD, 0, (sched.hi - sched.lo)[real]))
        per_epoch.append(int(nbytes[-1].sum()))
        run.waits += sched.cache_waits
        run.epochs.append(tm.end - start)
        if run.first is None:
            run.first = tm.first_batch
        if e > 0:
            run.opens, run.hits = run.opens + sched.opens, run.hits + sched.cache_hits
        run.waited += tm.waited
        start = tm.end
    run.end = start
    return run


def _settings_used(data: "Dataset", s: SimSettings, budget: "ReadBudget") -> dict[str, Any]:
    """``s`` as the replay applied it to ``data``: the block size, rate and processes of ``budget``, the dataset's
    prefixes, samples and shards."""
    return {
        **asdict(s),
        "block_size": budget.block_size,
        "block_size_auto": s.block_size == "auto",
        "num_prefixes": len(data.prefixes),
        "process_rate": budget.rate,
        "processes": budget.processes,  # the reading processes sharing the budget (workers with batches)
        "world_size": s.world_size,
        "samples": int(np.sum(data.samples)),
        "shards": len(data.names),
        "index": s.index and data.indexed,
    }


def simulate(data: "Dataset", settings: SimSettings) -> SimReport:
    """Replay ``settings.epochs`` epochs of ``data`` on the cluster of ``settings`` (see the module docstring)."""
    from shardkit.simulate.schedule import HEAD, INDEX, KINDS

    s = settings
    budget = read_budget_for(data, s)
    run = _replay(data, s, budget)
    t, pf, kd, nb = (np.concatenate(x) for x in (run.times, run.prefix, run.kinds, run.nbytes))
    # rates over at least one second: a run shorter than the peak's 1 s window must not show a mean above its peak
    duration = max(run.end, 1.0)
    rows = []
    for i, name in enumerate(data.prefixes):
        sel = pf == i
        rows.append(PrefixRow(name, int(sel.sum()), peak_rate(t[sel]), float(sel.sum()) / duration, int(nb[sel].sum())))
    total_bytes = int(nb.sum())
    first = run.first
    assert first is not None
    samples = int(np.sum(data.samples))
    startup = s.world_size  # the manifest: one GET per rank (no size probe)
    return SimReport(
        settings=_settings_used(data, s, budget),
        prefixes=tuple(rows),
        requests=len(t),
        by_kind={KINDS[k]: int((kd == k).sum()) for k in (HEAD, INDEX, 2)},
        peak_get_per_s=peak_rate(t),
        mean_get_per_s=len(t) / duration,
        duration_s=duration,
        bytes=total_bytes,
        bytes_per_s_per_node=total_bytes / duration / s.nodes,
        requests_per_gib=(len(t) + startup) / max(total_bytes / 2**30, 1e-12),
        store_bytes_per_epoch=tuple(run.per_epoch),
        cache_waits=run.waits if s.cache else None,
        first_batch_s=(float(first.min()), float(np.median(first)), float(first.max())),
        epoch_s=tuple(run.epochs),
        img_per_s_per_rank=samples / s.world_size / (sum(run.epochs) / len(run.epochs)),
        cache_hit_rate=(run.hits / run.opens if run.opens else None) if s.cache else None,
        startup_requests=startup,
        waited_s=run.waited,
    )
