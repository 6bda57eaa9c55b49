"""Random access with ``shardkit.open``: items/s, median and p99 latency, raw (checked bytes) and decoded, 1 and 8
threads, on a local dataset of photo-like JPEGs (warm page cache).

    python tools/bench_access.py [--images 2000] [--size 320x240] [--items 2000] [--threads 1 8]

Raw items are ``ds.raw(i)``: one ranged read through the sample index and the CRC32C and tar header checks;
decoded items are ``ds[i]`` (the image decoded at stored size). The figures are of the machine it runs on; a
shared machine makes them noisy (run it twice and compare).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import numpy as np


def _dataset(root: str, images: int, size: tuple[int, int]) -> str:
    from PIL import Image

    from shardkit.convert import ConvertConfig, convert
    from shardkit.demo.sampledata import make_image

    src = os.path.join(root, "src")
    for i in range(images):
        d = os.path.join(src, f"c{i % 10}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(make_image(i % 10, i, size)).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    convert(src, os.path.join(root, "ds"), ConvertConfig(shard_size=500), quiet=True)
    return os.path.join(root, "ds", "train")


def _run(fn, order: np.ndarray, threads: int) -> tuple[float, np.ndarray]:
    lat = np.zeros(len(order))
    parts = np.array_split(np.arange(len(order)), threads)

    def work(part: np.ndarray) -> None:
        for p in part.tolist():
            t = time.perf_counter()
            fn(int(order[p]))
            lat[p] = time.perf_counter() - t

    ts = [threading.Thread(target=work, args=(p,)) for p in parts]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, lat


def main() -> None:
    import shardkit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--dataset", help="an existing split to read instead of a generated one")
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        url = a.dataset or _dataset(tmp, a.images, (w, h))
        ds = shardkit.open(url)
        order = np.random.default_rng(0).integers(0, len(ds), a.items)
        for i in range(min(len(ds), 64)):  # warm: indexes loaded, page cache filled
            ds.raw(i)
        ds[:: max(1, len(ds) // 64)]
        print(
            f"{len(ds)} samples, {ds.manifest.num_bytes / len(ds) / 1e3:.1f} kB/sample, {len(ds.manifest.shards)} shards"
        )
        print(f"{'kind':8} {'threads':>7} {'items/s':>9} {'median ms':>10} {'p99 ms':>8}")
        for kind, fn in (("raw", ds.raw), ("decoded", ds.__getitem__)):
            for th in a.threads:
                wall, lat = _run(fn, order, th)
                ms = lat * 1e3
                print(
                    f"{kind:8} {th:>7} {len(order) / wall:>9.0f} {np.median(ms):>10.3f} {np.percentile(ms, 99):>8.3f}"
                )


if __name__ == "__main__":
    main()
