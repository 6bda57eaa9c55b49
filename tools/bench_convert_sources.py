"""Benchmark: the same images converted from an ImageFolder, a CSV listing and existing WebDataset tars (and ``--copy``).

Usage::

    .venv/bin/python tools/bench_convert_sources.py                # 320 generated ImageNet-like JPEGs, workers 1
    .venv/bin/python tools/bench_convert_sources.py --images 2000 --workers 4 --runs 3

Every variant converts the same images with the same options (shorter side
256, JPEG q90, ``--workers`` as given) into a fresh DEST; the figure is the
median of ``--runs`` interleaved runs, images per second of wall clock
including discovery (the tar scan, the listing parse). One untimed run of
each first warms imports and the page cache. The tar variants read tars
written by the ImageFolder run itself (re-sharding shardkit's own output,
as one would re-shard someone else's). ``--copy`` keeps the JPEG bytes as
they are: its figure is the re-sharding rate at about read speed (MB/s is
printed too).
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
    from shardkit.demo.sampledata import IMAGENET_LIKE, make_imagefolder

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=320, help="generated images (spread over 4 classes)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="shardkit-bench-sources-")
    try:
        src = make_imagefolder(
            os.path.join(tmp, "src"), num_classes=4, per_class=a.images // 4, spread=IMAGENET_LIKE, seed=0
        )
        listing = os.path.join(tmp, "train.csv")
        with open(listing, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", "label"])
            for c in sorted(os.listdir(src)):
                for name in sorted(os.listdir(os.path.join(src, c))):
                    w.writerow([f"{c}/{name}", c])
        opts = ConvertConfig(image=EncodeConfig(short_side=256), shard_size=64)
        listing_opts = ConvertConfig(image=opts.image, shard_size=64, source=ScanConfig(root=src))
        tars_dir = os.path.join(tmp, "tars")  # originals re-packed as tars: what a foreign pipeline would hand over
        copy_src = ConvertConfig(image=EncodeConfig(short_side=256, copy=True), shard_size=64, shuffle=False)
        convert(src, tars_dir, copy_src, workers=a.workers, quiet=True)
        n_tars = len([f for f in os.listdir(tars_dir) if f.endswith(".tar")])
        pattern = os.path.join(tars_dir, f"train-{{000000..{n_tars - 1:06d}}}.tar")
        copy = ConvertConfig(image=EncodeConfig(short_side=256, copy=True), shard_size=64)
        variants = {
            "ImageFolder": (src, opts),
            "CSV listing": (listing, listing_opts),
            "WebDataset tars": (pattern, opts),
            "WebDataset tars --copy": (pattern, copy),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        sizes: dict[str, int] = {}
        for run in range(a.runs + 1):
            for name, (s, o) in variants.items():
                dest = os.path.join(tmp, "out")
                shutil.rmtree(dest, ignore_errors=True)
                t0 = time.perf_counter()
                r = convert(s, dest, o, workers=a.workers, quiet=True)
                dt = time.perf_counter() - t0
                if run:
                    times[name].append(dt)
                sizes[name] = r.converted
        mb = sum(os.path.getsize(os.path.join(tars_dir, f)) for f in os.listdir(tars_dir) if f.endswith(".tar")) / 1e6
        print(f"{a.images} images ({mb:.0f} MB of source JPEGs), --workers {a.workers}, median of {a.runs} run(s)")
        base = None
        for name, ts in times.items():
            t = statistics.median(ts)
            rate = sizes[name] / t
            base = base or rate
            print(f"  {name:24s} {rate:8.1f} img/s  {mb / t:7.1f} MB/s in  ({rate / base:.2f}x ImageFolder)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
