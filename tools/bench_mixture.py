"""Mixture throughput: two sources mixed 70/30 vs the same total samples from one source.

    python tools/bench_mixture.py --images 2000 --workers 2 --runs 3 --out /tmp/skmix

Data: three photo-like ImageFolders (``shardkit.demo.sampledata.IMAGENET_LIKE`` sizes, the same
spread and classes), converted with ``shardkit.convert.convert`` (short side 256): ``one`` with
``--images`` images, ``a`` and ``b`` with 70 % and 30 % of them. Each run reads one full epoch
of ``one`` and one of the mixture ``[Source(a, weight=0.7), Source(b, weight=0.3)]`` with the
same epoch size, alternating (one, mix, one, mix, ...) so that load on the machine hits both
alike; fresh workers every epoch. Prints one JSON line: the median images/s of each and
``mix_over_one`` (the issue's bound: at least 0.95).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import time

import shardkit
from shardkit import Source


def make_split(root: str, images: int, seed: int) -> str:
    """An ImageFolder of ``images`` JPEGs converted into shards; the split's directory."""
    from shardkit.convert import ConvertConfig, convert
    from shardkit.demo.sampledata import IMAGENET_LIKE, make_imagefolder

    dest = os.path.join(root, "shards")
    found = glob.glob(os.path.join(dest, "**", "manifest.json"), recursive=True)
    if not found:
        src = make_imagefolder(
            os.path.join(root, "images"), num_classes=8, per_class=max(1, images // 8), spread=IMAGENET_LIKE, seed=seed
        )
        convert(src, dest, ConvertConfig(shard_size=250, shard_bytes=None), quiet=True)
        found = glob.glob(os.path.join(dest, "**", "manifest.json"), recursive=True)
    return os.path.dirname(found[0])


def epoch_rate(sources, workers: int, batch_size: int, **kw) -> tuple[float, int]:
    """Images per second over one full epoch, and the samples it yielded."""
    loader = shardkit.load(
        sources, batch_size=batch_size, num_workers=workers, persistent_workers=False, pin_memory=False, **kw
    )
    t0, n = time.perf_counter(), 0
    for images, _ in loader:
        n += len(images)
    dt = time.perf_counter() - t0
    loader.close()
    return n / dt, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=2000, help="samples per epoch (the single source's size)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default="/tmp/skmix")
    a = p.parse_args()
    one = make_split(os.path.join(a.out, "one"), a.images, seed=1)
    src_a = make_split(os.path.join(a.out, "a"), round(a.images * 0.7), seed=2)
    src_b = make_split(os.path.join(a.out, "b"), round(a.images * 0.3), seed=3)
    total = shardkit.load_manifest(one).num_samples
    mix = [Source(src_a, weight=0.7), Source(src_b, weight=0.3)]
    rates: dict[str, list[float]] = {"one": [], "mix": []}
    for _ in range(a.runs):
        r, n = epoch_rate(one, a.workers, a.batch_size)
        rates["one"].append(r)
        r, m = epoch_rate(mix, a.workers, a.batch_size, epoch_size=total)
        rates["mix"].append(r)
        assert n == m == total, (n, m, total)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(
        json.dumps(
            {
                "images": total,
                "workers": a.workers,
                "runs": a.runs,
                "one_img_s": round(med["one"]),
                "mix_img_s": round(med["mix"]),
                "mix_over_one": round(med["mix"] / med["one"], 3),
                "one_runs": [round(r) for r in rates["one"]],
                "mix_runs": [round(r) for r in rates["mix"]],
            }
        )
    )


if __name__ == "__main__":
    main()
