"""Stress test of the loader: many workers on few cores, a large shuffle buffer, 10,000 tiny shards; a 100,000-shard manifest.

Checks (exit status 1 if one fails): one epoch delivers every sample exactly once; the peak RSS of
the main process and of each worker stays under ``--max-worker-mib`` (the shuffle buffer of raw
JPEG bytes is the only thing that grows with the options); at most a few fds are open per worker
(one shard at a time, plus batches in flight); loading a manifest of ``--manifest-shards`` shards takes under
``--manifest-s`` seconds (best of 3), and so does building the loader on it.

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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers import children, open_fds, rss_bytes  # noqa: E402
from soak import finish, make_dataset  # noqa: E402


@dataclass
class StressReport:
    shards: int
    samples: int
    workers: int
    shuffle_buffer: int
    epoch_s: float = 0.0
    peak_main_mib: float = 0.0
    peak_worker_mib: float = 0.0
    peak_worker_fds: int = 0
    manifest_shards: int = 0
    manifest_load_s: float = 0.0
    loader_build_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def manifest_timing(n: int, workdir: str) -> tuple[float, float]:
    """(best load_manifest seconds, best shardkit.load seconds) for a manifest of ``n`` shards."""
    import shardkit
    from shardkit.manifest import load_manifest

    d = tempfile.mkdtemp(prefix="manifest-", dir=workdir)
    m = {"format": "shardkit-manifest", "version": 1, "split": "train", "classes": [f"c{i}" for i in range(1000)],
         "shards": [{"name": f"train-{i:06d}.tar", "samples": 12, "bytes": 1 << 20, "sha256": hashlib.sha256(b"%d" % i).hexdigest()} for i in range(n)]}
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


def stress(*, shards: int = 10_000, per_shard: int = 2, workers: int = 8, shuffle_buffer: int = 5000, batch_size: int = 64,
           manifest_shards: int = 100_000, manifest_s: float = 1.0, max_worker_mib: float = 1024, workdir: Optional[str] = None,
           log=print) -> StressReport:  # type: ignore[no-untyped-def]
    """Run the stress test; return a report whose ``failures`` list is empty on success."""
    import shardkit

    work = tempfile.mkdtemp(prefix="shardkit-stress-", dir=workdir)
    r = StressReport(shards, shards * per_shard, workers, shuffle_buffer, manifest_shards=manifest_shards)
    try:
        if manifest_shards:
            r.manifest_load_s, r.loader_build_s = manifest_timing(manifest_shards, work)
            log(f"manifest of {manifest_shards} shards: load_manifest {r.manifest_load_s:.3f} s, shardkit.load {r.loader_build_s:.3f} s (best of 3)")
            for what, s in (("load_manifest", r.manifest_load_s), ("shardkit.load", r.loader_build_s)):
                if s > manifest_s:
                    r.failures.append(f"{what} on {manifest_shards} shards took {s:.2f} s (limit {manifest_s} s)")
        ds = os.path.join(work, "ds")
        t = time.perf_counter()
        keys = make_dataset(ds, shards * per_shard, per_shard, image_size=(16, 12))
        log(f"wrote {shards} shards x {per_shard} samples in {time.perf_counter() - t:.1f} s")
        loader = shardkit.load(ds, batch_size=batch_size, num_workers=workers, size=16, pin_memory=False, with_keys=True,
                               shuffle_buffer=shuffle_buffer, shuffle_initial=shuffle_buffer, multiprocessing_context="fork",
                               persistent_workers=False)
        me = os.getpid()
        stop = threading.Event()

        def monitor() -> None:
            while not stop.is_set():
                r.peak_main_mib = max(r.peak_main_mib, rss_bytes(me) / 2**20)
                for c in children(me):
                    r.peak_worker_mib = max(r.peak_worker_mib, rss_bytes(c) / 2**20)
                    r.peak_worker_fds = max(r.peak_worker_fds, open_fds(c))
                time.sleep(0.02)

        th = threading.Thread(target=monitor, daemon=True)
        th.start()
        t = time.perf_counter()
        seen = [k for _, _, ks in loader for k in ks]
        r.epoch_s = time.perf_counter() - t
        stop.set()
        th.join(timeout=5)
        loader.close()
        if len(seen) != len(keys) or set(seen) != set(keys):
            r.failures.append(f"{len(seen)} samples delivered ({len(set(seen))} distinct), expected {len(keys)}")
        if r.peak_worker_mib > max_worker_mib:
            r.failures.append(f"a worker peaked at {r.peak_worker_mib:.0f} MiB (limit {max_worker_mib:.0f})")
        if r.peak_worker_fds > 128:  # inherited fds + batches in flight (shared memory); never one per shard
            r.failures.append(f"a worker had {r.peak_worker_fds} fds open")
        log(f"epoch: {len(seen)} samples from {shards} shards with {workers} workers on {len(os.sched_getaffinity(0))} cores "
            f"in {r.epoch_s:.1f} s; peak RSS main {r.peak_main_mib:.0f} MiB, worker {r.peak_worker_mib:.0f} MiB; "
            f"peak fds per worker {r.peak_worker_fds}")
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
    p.add_argument("--json", help="write the report here")
    a = p.parse_args(argv)
    r = stress(shards=a.shards, per_shard=a.per_shard, workers=a.workers, shuffle_buffer=a.shuffle_buffer,
               manifest_shards=a.manifest_shards, manifest_s=a.manifest_s)
    return finish(r, a.json)


if __name__ == "__main__":
    sys.exit(main())
