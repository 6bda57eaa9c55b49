"""Stress test of the loader: many workers on few cores, a large shuffle buffer, 10,000 tiny shards; a 100,000-shard manifest.

Checks (exit status 1 if one fails): one epoch delivers every sample exactly once; memory is bounded
by the data: each worker's RSS grows (from when it is first seen to its peak) by at most what it grew
in a reference epoch with a one-batch shuffle buffer (a forked worker's own cost), plus the raw samples
the bigger buffer holds (min(buffer, its share) x the dataset's mean bytes
per sample, tar headers included, + 1 KiB of Python objects each), plus ``--slack-mib``; the main
process grows by at most the batches in flight (``prefetch_factor`` 2 per worker), the delivered keys
and ``--slack-mib``; at most a few fds are open per worker
(one shard at a time, plus batches in flight); loading a manifest of ``--manifest-shards`` shards takes under
``--manifest-s`` seconds (best of 3), and so do building the loader on it and planning an epoch of it
over 1,024 nodes x 8 ranks x 8 workers (the figure docs/guides/distributed.md quotes).

    python tools/stress.py                          # 8 workers, 10,000 shards x 2 samples, buffer 5000
    python tools/stress.py --shards 2000 --workers 4 --manifest-shards 100000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from soak import finish, make_dataset  # noqa: E402

from tests.support.probes import children, open_fds, rss_bytes  # noqa: E402


@dataclass
class StressReport:
    shards: int
    samples: int
    workers: int
    shuffle_buffer: int
    epoch_s: float = 0.0
    peak_main_mib: float = 0.0
    peak_worker_mib: float = 0.0
    ref_main_growth_mib: float = 0.0  #: growth in the reference epoch (one-batch shuffle buffer)
    ref_worker_growth_mib: float = 0.0
    main_growth_mib: float = 0.0  #: main process: peak RSS minus its RSS before the epoch
    main_limit_mib: float = 0.0
    worker_growth_mib: float = 0.0  #: largest worker RSS growth from when it is first seen to its peak
    worker_limit_mib: float = 0.0
    peak_worker_fds: int = 0
    manifest_shards: int = 0
    manifest_load_s: float = 0.0
    loader_build_s: float = 0.0
    plan_s: float = 0.0  #: planning ``manifest_shards`` shards over 1,024 x 8 ranks x 8 workers (best of 3)
    failures: list[str] = field(default_factory=list)


def plan_timing(n: int, world_size: int = 1024 * 8, workers: int = 8) -> float:
    """Best of 3 seconds to plan an epoch of ``n`` shards of ~1000 samples over ``world_size`` ranks x ``workers``:
    the shuffled stream, every reader's range, and one worker's plan (what ``tests/plan/test_epoch.py`` checks exactly)."""
    import numpy as np

    from shardkit.plan.epoch import PlanConfig, Stream, partition_ranges, worker_plan
    from shardkit.plan.world import World

    sizes = np.full(n, 1000, dtype=np.int64)
    sizes[::7] = 997
    cfg = PlanConfig(batch_size=256, seed=0)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        stream = Stream.full_epoch(sizes, seed=0, epoch=3)
        partition_ranges(len(stream), world_size, workers, cfg)
        worker_plan(
            stream,
            cfg,
            World(rank=world_size // 2, world_size=world_size, worker=workers - 1, num_workers=workers),
            epoch=3,
        )
        best = min(best, time.perf_counter() - t)
    return best


def manifest_timing(n: int, workdir: str) -> tuple[float, float]:
    """(best load_manifest seconds, best shardkit.load seconds) for a manifest of ``n`` shards."""
    import shardkit
    from shardkit.format.manifest import load_manifest

    d = tempfile.mkdtemp(prefix="manifest-", dir=workdir)
    m = {
        "format": "shardkit-manifest",
        "version": 1,
        "split": "train",
        "classes": [f"c{i}" for i in range(1000)],
        "shards": [
            {
                "name": f"train-{i:06d}.tar",
                "samples": 12,
                "bytes": 1 << 20,
                "sha256": hashlib.sha256(b"%d" % i).hexdigest(),
            }
            for i in range(n)
        ],
    }
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
    load_s, build_s = [], []
    for _ in range(3):
        t = time.perf_counter()
        load_manifest(d)
        load_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        shardkit.load(d, num_workers=0, batch_size=256, check_sizes=False)  # the shards do not exist: timing only
        build_s.append(time.perf_counter() - t)
    shutil.rmtree(d, ignore_errors=True)
    return min(load_s), min(build_s)


@dataclass
class _Epoch:
    seen: list[str]
    epoch_s: float
    peak_main: int
    peak_worker: int
    main_growth: int  #: peak RSS minus the RSS before the epoch
    worker_growth: int  #: largest growth of one worker from when it was first seen
    fds: int
    workers_seen: int


def _epoch(ds: str, batch_size: int, workers: int, shuffle_buffer: int, size: int = 16) -> _Epoch:
    """One epoch over ``ds`` with fresh workers, the RSS and fds of the main process and workers sampled every 20 ms."""
    import shardkit

    loader = shardkit.load(
        ds,
        batch_size=batch_size,
        num_workers=workers,
        size=size,
        pin_memory=False,
        with_keys=True,
        shuffle_buffer=shuffle_buffer,
        shuffle_initial=shuffle_buffer,
        multiprocessing_context="fork",
        persistent_workers=False,
    )
    me = os.getpid()
    stop = threading.Event()
    first: dict[int, int] = {}  # worker pid -> RSS when first seen
    peak: dict[int, int] = {}
    main = [rss_bytes(me), rss_bytes(me)]  # before, peak
    fds = [0]

    def monitor() -> None:
        while not stop.is_set():
            main[1] = max(main[1], rss_bytes(me))
            for c in children(me):
                rss = rss_bytes(c)
                if rss:
                    first.setdefault(c, rss)
                    peak[c] = max(peak.get(c, 0), rss)
                fds[0] = max(fds[0], open_fds(c))
            time.sleep(0.02)

    th = threading.Thread(target=monitor, daemon=True)
    th.start()
    t = time.perf_counter()
    seen = [k for _, _, ks in loader for k in ks]
    epoch_s = time.perf_counter() - t
    stop.set()
    th.join(timeout=5)
    loader.close()
    return _Epoch(
        seen,
        epoch_s,
        main[1],
        max(peak.values(), default=0),
        main[1] - main[0],
        max((peak[c] - first[c] for c in peak), default=0),
        fds[0],
        len(peak),
    )


def stress(
    *,
    shards: int = 10_000,
    per_shard: int = 2,
    workers: int = 8,
    shuffle_buffer: int = 5000,
    batch_size: int = 64,
    size: int = 64,
    manifest_shards: int = 100_000,
    manifest_s: float = 1.0,
    slack_mib: float = 8,
    workdir: Optional[str] = None,
    log=print,
) -> StressReport:  # type: ignore[no-untyped-def]
    """Run the stress test; return a report whose ``failures`` list is empty on success."""

    work = tempfile.mkdtemp(prefix="shardkit-stress-", dir=workdir)
    r = StressReport(shards, shards * per_shard, workers, shuffle_buffer, manifest_shards=manifest_shards)
    try:
        if manifest_shards:
            r.manifest_load_s, r.loader_build_s = manifest_timing(manifest_shards, work)
            log(
                f"manifest of {manifest_shards} shards: load_manifest {r.manifest_load_s:.3f} s, shardkit.load {r.loader_build_s:.3f} s (best of 3)"
            )
            r.plan_s = plan_timing(manifest_shards)
            log(f"plan of {manifest_shards} shards over 1,024 x 8 ranks x 8 workers: {r.plan_s:.3f} s (best of 3)")
            for what, s in (
                ("load_manifest", r.manifest_load_s),
                ("shardkit.load", r.loader_build_s),
                ("planning", r.plan_s),
            ):
                if s > manifest_s:
                    r.failures.append(f"{what} on {manifest_shards} shards took {s:.2f} s (limit {manifest_s} s)")
        ds = os.path.join(work, "ds")
        t = time.perf_counter()
        keys = make_dataset(ds, shards * per_shard, per_shard, image_size=(16, 12))
        log(f"wrote {shards} shards x {per_shard} samples in {time.perf_counter() - t:.1f} s")
        mib = 2**20
        ds_bytes = sum(os.path.getsize(os.path.join(ds, n)) for n in os.listdir(ds) if n.endswith(".tar"))
        per_sample = ds_bytes / len(keys) + 1024
        ref = _epoch(ds, batch_size, workers, batch_size, size)  # the reference: a one-batch shuffle buffer
        run = _epoch(ds, batch_size, workers, shuffle_buffer, size)
        r.epoch_s, r.peak_worker_fds = run.epoch_s, max(ref.fds, run.fds)
        r.peak_main_mib, r.peak_worker_mib = run.peak_main / mib, run.peak_worker / mib
        r.ref_worker_growth_mib, r.ref_main_growth_mib = ref.worker_growth / mib, ref.main_growth / mib
        r.worker_growth_mib, r.main_growth_mib = run.worker_growth / mib, run.main_growth / mib
        held = (
            min(shuffle_buffer, -(-len(keys) // workers)) - batch_size
        )  # more raw samples a worker may hold than the reference
        r.worker_limit_mib = r.ref_worker_growth_mib + max(0, held) * per_sample / mib + slack_mib
        batch_bytes = batch_size * (3 * size * size + 8 + 100)  # uint8 images, int64 labels, keys
        r.main_limit_mib = (2 * workers * batch_bytes + len(keys) * 100) / mib + slack_mib
        if not (ref.workers_seen and run.workers_seen):
            r.failures.append("no worker was seen by the memory monitor")
        if len(run.seen) != len(keys) or set(run.seen) != set(keys):
            r.failures.append(
                f"{len(run.seen)} samples delivered ({len(set(run.seen))} distinct), expected {len(keys)}"
            )
        if r.worker_growth_mib > r.worker_limit_mib:
            r.failures.append(
                f"a worker grew by {r.worker_growth_mib:.1f} MiB (limit {r.worker_limit_mib:.1f} MiB from the data)"
            )
        if r.main_growth_mib > r.main_limit_mib:
            r.failures.append(
                f"the main process grew by {r.main_growth_mib:.1f} MiB (limit {r.main_limit_mib:.1f} MiB from the data)"
            )
        if r.peak_worker_fds > 128:  # inherited fds + batches in flight (shared memory); never one per shard
            r.failures.append(f"a worker had {r.peak_worker_fds} fds open")
        log(
            f"epoch: {len(run.seen)} samples from {shards} shards with {workers} workers on {len(os.sched_getaffinity(0))} cores "
            f"in {r.epoch_s:.1f} s; RSS growth main +{r.main_growth_mib:.1f} MiB (limit {r.main_limit_mib:.1f}), "
            f"worker +{r.worker_growth_mib:.1f} MiB (limit {r.worker_limit_mib:.1f}; reference epoch +{r.ref_worker_growth_mib:.1f}); "
            f"peak RSS main {r.peak_main_mib:.0f} MiB, worker {r.peak_worker_mib:.0f} MiB; peak fds per worker {r.peak_worker_fds}"
        )
        return r
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", type=int, default=10_000)
    p.add_argument("--per-shard", type=int, default=2)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--shuffle-buffer", type=int, default=5000)
    p.add_argument("--manifest-shards", type=int, default=100_000)
    p.add_argument("--manifest-s", type=float, default=1.0)
    p.add_argument(
        "--slack-mib", type=float, default=8, help="allocator noise allowed on top of the bounds from the data"
    )
    p.add_argument("--json", help="write the report here")
    a = p.parse_args(argv)
    r = stress(
        shards=a.shards,
        per_shard=a.per_shard,
        workers=a.workers,
        shuffle_buffer=a.shuffle_buffer,
        manifest_shards=a.manifest_shards,
        manifest_s=a.manifest_s,
        slack_mib=a.slack_mib,
    )
    return finish(r, a.json)


if __name__ == "__main__":
    sys.exit(main())
