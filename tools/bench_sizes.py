"""img/s at several output sizes on the same shards (progressive resolution).

One loader with persistent workers; each round runs one epoch per size, the size set with
``loader.set_epoch(epoch, size=S)`` (the workers keep running), sizes interleaved round by
round; figures are medians over rounds, the first batch of each epoch excluded.

    python tools/bench_sizes.py --images 3000 --workers 2 --rounds 3 --sizes 160,192,224 --out /tmp/sksizes
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def make_shards(out: str, images: int, workers: int) -> str:
    """ImageNet-like JPEGs (median 500x375) converted to shards with the short side 256 (reused when present)."""
    from shardkit.convert import ConvertConfig, convert
    from shardkit.demo.sampledata import IMAGENET_LIKE, make_imagefolder

    dest = os.path.join(out, "shards")
    if not os.path.exists(os.path.join(dest, "manifest.json")):
        src = make_imagefolder(
            os.path.join(out, "imagefolder"), num_classes=8, per_class=max(1, images // 8), spread=IMAGENET_LIKE
        )
        convert(src, dest, ConvertConfig(shard_size=250, shard_bytes=None), workers=workers, quiet=True)
    return dest


def epoch_rate(loader, batches: int) -> float:
    """img/s over up to ``batches`` batches after the first one."""
    n, t0 = 0, None
    for i, (images, _) in enumerate(loader):
        if i == 0:
            t0 = time.perf_counter()
        else:
            n += len(images)
        if i >= batches:
            break
    return n / (time.perf_counter() - t0) if t0 is not None and n else float("nan")


def main() -> None:
    import shardkit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=40, help="batches timed per epoch (after the first)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="160,192,224")
    ap.add_argument("--out", default="/tmp/shardkit-bench-sizes")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    url = make_shards(a.out, a.images, a.workers)
    loader = shardkit.load(
        url,
        batch_size=a.batch_size,
        num_workers=a.workers,
        persistent_workers=a.workers > 0,
        pin_memory=False,
        size=max(sizes),
    )  # the ring's slots hold the largest size
    rates: dict[int, list[float]] = {s: [] for s in sizes}
    epoch = 0
    for r in range(a.rounds):
        for s in sizes if r % 2 == 0 else sizes[::-1]:
            loader.set_epoch(epoch, size=s)
            rates[s].append(epoch_rate(loader, a.batches))
            epoch += 1
    loader.close()
    base = statistics.median(rates[max(sizes)])
    print(f"{a.workers} workers, batch {a.batch_size}, {a.rounds} rounds, {a.batches} batches per epoch, {url}")
    print("size  img/s  vs largest")
    for s in sizes:
        m = statistics.median(rates[s])
        print(f"{s:4d}  {m:6.0f}  {m / base:5.2f}x")


if __name__ == "__main__":
    main()
