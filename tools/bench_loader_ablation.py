"""What each loader design choice buys: shardkit with one choice switched off at a time.

    .venv/bin/python tools/bench_loader_ablation.py --shards /tmp/shardkit-bench/shards --runs 5

Configurations (2 workers, batch 64, train preset 224, persistent workers): all on; without
buffer reuse (``reuse_buffers=False``: a new shared-memory segment per batch); with NCHW
batches (``channels_last=False``); with the accurate IDCT (``fast_decode=False``); everything
off. Each run times whole epochs after a warm-up epoch; runs are interleaved round by round so
that other load hits every configuration alike; figures are medians. Make the shards first with
``tools/bench_loader.py`` (its ``--out``/shards directory).
"""

from __future__ import annotations

import argparse
import statistics
import time

CONFIGS = {
    "all on": {},
    "reuse_buffers=False": {"reuse_buffers": False},
    "channels_last=False": {"channels_last": False},
    "fast_decode=False": {"fast_decode": False},
    "all off": {"reuse_buffers": False, "channels_last": False, "fast_decode": False},
}


def run(shards: str, workers: int, epochs: int, **opts) -> float:
    import shardkit

    loader = shardkit.load(
        shards, batch_size=64, num_workers=workers, persistent_workers=True, pin_memory=False, **opts
    )
    try:
        for _ in loader:  # warm-up epoch: worker start, page cache
            pass
        n, t = 0, time.perf_counter()
        for _ in range(epochs):
            for images, _labels in loader:
                n += len(images)
        return n / (time.perf_counter() - t)
    finally:
        loader.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default="/tmp/shardkit-bench/shards")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per run")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    runs: dict[str, list[float]] = {k: [] for k in CONFIGS}
    for r in range(a.runs):
        for k, opts in CONFIGS.items():
            runs[k].append(run(a.shards, a.workers, a.epochs, **opts))
            print(f"round {r}: {k:<22} {runs[k][-1]:>7.0f} img/s", flush=True)
    base = runs["all on"]
    print(f"\n{'configuration':<22} {'img/s':>7}   vs all on (median of per-round ratios)")
    for k, v in runs.items():
        ratio = statistics.median(x / b for x, b in zip(v, base))
        print(f"{k:<22} {statistics.median(v):>7.0f}   {ratio:.2f}")


if __name__ == "__main__":
    main()
