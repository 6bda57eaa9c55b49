"""Distributed benchmarks: rank scaling and resume latency.

1. Scaling: per-rank images/s of a 2-rank ``torchrun`` job against a 1-rank
   job on the same shards (examples/train_ddp.py --no-train: the loader plus one
   all-reduce per step), and the scaling efficiency ``(2-rank total) / (1-rank)``.
2. Resume latency: the time from ``load_state_dict`` to the first batch, for a
   state taken at 0 %, 25 %, 50 % and 90 % of an epoch, against a fresh start.
   It must not grow with the position (resume skips by index, never decodes
   what was consumed).

Usage::

    python tools/bench_distributed.py --images 1200 --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_dataset(workdir: str, images: int) -> str:
    from shardkit.convert import ConvertConfig, convert
    from shardkit.demo.sampledata import IMAGENET_LIKE, make_imagefolder

    src, dest = os.path.join(workdir, "src"), os.path.join(workdir, "shards")
    if not os.path.exists(os.path.join(dest, "manifest.json")):
        make_imagefolder(src, num_classes=4, per_class=images // 4, spread=IMAGENET_LIKE)
        convert(src, dest, ConvertConfig(shard_size=100), quiet=True)
    return dest


def torchrun_rate(data: str, nproc: int, workers: int, batch: int) -> float:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        os.path.join(ROOT, "examples", "train_ddp.py"),
        "--data",
        data,
        "--epochs",
        "2",
        "--no-train",
        "--workers",
        str(workers),
        "--batch-size",
        str(batch),
        "--image-size",
        "224",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
    rates = [float(m) for m in re.findall(r"([0-9.]+) img/s total", out.stdout)]
    return rates[-1]  # second epoch: workers warm


def resume_latency(data: str, fraction: float, workers: int, batch: int) -> float:
    import shardkit

    loader = shardkit.load(data, batch_size=batch, num_workers=workers, seed=1, persistent_workers=False)
    state = loader.state_dict()
    state["batches_done"] = int(len(loader) * fraction)
    fresh = shardkit.load(data, batch_size=batch, num_workers=workers, seed=1, persistent_workers=False)
    t0 = time.perf_counter()
    fresh.load_state_dict(state)
    next(iter(fresh))
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=1200)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-dist"))
    args = p.parse_args()
    data = make_dataset(args.workdir, args.images)

    print("== resume latency: load_state_dict -> first batch (2 workers)")
    for frac in (0.0, 0.25, 0.5, 0.9):
        times = [resume_latency(data, frac, 2, args.batch) for _ in range(args.runs)]
        print(f"  position {frac:4.0%}: {statistics.median(times) * 1000:7.0f} ms (median of {args.runs})")

    print("== rank scaling (examples/train_ddp.py --no-train, 1 worker per rank, loader + all-reduce per step)")
    one = [torchrun_rate(data, 1, 1, args.batch) for _ in range(args.runs)]
    two = [torchrun_rate(data, 2, 1, args.batch) for _ in range(args.runs)]
    m1, m2 = statistics.median(one), statistics.median(two)
    print(f"  1 rank : {m1:7.0f} img/s")
    print(f"  2 ranks: {m2:7.0f} img/s total, {m2 / 2:7.0f} per rank; scaling efficiency {m2 / (2 * m1):.2f} (2 cores)")


if __name__ == "__main__":
    main()
