"""Plans as a loader consumes them: a rank's batches in the order its DataLoader collects them from its workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardkit.plan import worker_plan
from shardkit.plan.world import World


def rank_batches(
    stream: Any,
    cfg: Any,
    R: int,
    W: int,
    r: int,
    *,
    plan_fn: Callable[..., Any] = worker_plan,
    epoch: int = 0,
    batches_done: int = 0,
    generation: int = 0,
) -> list[Any]:
    """The batches rank ``r`` of ``R`` (``W`` workers) yields, in DataLoader order: round ``j`` takes batch ``j``
    of worker 0, 1, ... ``W - 1`` in turn, passing over a worker that has no more (``plan_fn``: the worker planner,
    called as :func:`shardkit.plan.epoch.worker_plan` is)."""
    per_worker = []
    for w in range(W):
        ids = plan_fn(
            stream, cfg, World(r, R, w, W), epoch=epoch, batches_done=batches_done, generation=generation
        ).emission_order()
        per_worker.append([ids[i : i + cfg.batch_size] for i in range(0, len(ids), cfg.batch_size)])
    out, j = [], 0
    while any(j < len(p) for p in per_worker):
        out += [p[j] for p in per_worker if j < len(p)]
        j += 1
    return out
