"""How long planning a mixed epoch takes at scale (pure planning: no data, no processes).

    python tools/bench_mixture_plan.py                      # 10 sources, 100,000 shards, 1,024 ranks x 8 workers
    python tools/bench_mixture_plan.py --sources 3 --shards 20000 --ranks 64 --workers 4

Times, for one epoch: building the mixture (validation, per-source counts), each source's
sample selection (its shards in a seeded order, a window of its infinite stream), the
split of the mixed epoch over every rank x worker, and one worker's full plan (its shuffle
blocks with the global sample ids to read, in order). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from shardkit.plan import Mixture, Source, mixed_epoch, worker_plan
from shardkit.plan.epoch import PlanConfig, partition_ranges, rank_split
from shardkit.plan.world import World


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", type=int, default=10)
    p.add_argument("--shards", type=int, default=100_000, help="shards over all sources")
    p.add_argument("--shard-samples", type=int, default=1000)
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epoch", type=int, default=3)
    a = p.parse_args()

    rng = np.random.default_rng(0)
    per = a.shards // a.sources
    sizes = [np.where(rng.random(per) < 0.1, a.shard_samples - 3, a.shard_samples) for _ in range(a.sources)]
    kinds = [{"weight": float(rng.integers(1, 10))}, {"repeat": 0.5}, {"choose": per * a.shard_samples // 3}]
    specs = tuple(Source(f"s{i}", **kinds[i % 3]) for i in range(a.sources))
    cfg = PlanConfig(batch_size=a.batch_size, seed=0)
    t = {}
    t0 = time.perf_counter()
    m = Mixture(specs, tuple(sizes))
    t["mixture_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    stream = mixed_epoch(m, seed=0, epoch=a.epoch)
    t["selection_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    starts, stops = partition_ranges(len(stream), a.ranks, a.workers, cfg)
    t["split_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    wp = worker_plan(stream, cfg, World(a.ranks // 2, a.ranks, a.workers - 1, a.workers), epoch=a.epoch)
    t["worker_plan_s"] = time.perf_counter() - t0
    t["total_s"] = sum(t.values())
    split = rank_split(len(stream), a.ranks, cfg)
    assert (
        stops[-1] == split.per_rank * a.ranks
        and wp.num_samples
        == stops[(a.ranks // 2) * a.workers + a.workers - 1] - starts[(a.ranks // 2) * a.workers + a.workers - 1]
    )
    print(
        json.dumps(
            {
                "sources": a.sources,
                "shards": a.sources * per,
                "epoch_samples": len(stream),
                "readers": a.ranks * a.workers,
                "worker_samples": wp.num_samples,
                "worker_blocks": len(wp.blocks),
                **{k: round(v, 4) for k, v in t.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
