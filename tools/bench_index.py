"""CPU cost per sample of reading a shard: the tar header walk vs. slicing with the sample index.

Both read from memory (no I/O), so this is the Python cost the index adds or saves; the index's
real gain is one range read per block instead of a seek and read per member on remote storage.

    python tools/bench_index.py [--samples 2000] [--jpeg-bytes 60000] [--block 64]
"""

from __future__ import annotations

import argparse
import io
import os
import time


def main() -> None:
    from shardkit.format import EncodedSample, ShardReader, write_tar

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--jpeg-bytes", type=int, default=60000)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    jpeg = os.urandom(a.jpeg_bytes)
    samples = [
        EncodedSample(f"k{i:06d}", jpeg, i % 10, {"path": f"c/{i}.jpg", "class": "c", "width": 500, "height": 375})
        for i in range(a.samples)
    ]
    buf = io.BytesIO()
    w = write_tar(samples, buf)
    data, idx = buf.getvalue(), w.index
    assert idx is not None
    from shardkit.format.index import SampleIndex

    raw = idx.to_bytes()
    walk = slc = load = float("inf")
    for _ in range(a.repeat):
        r = ShardReader(io.BytesIO(data), "mem.tar", num_classes=10)
        t = time.perf_counter()
        while r.read(r.index, r.index) is not None:
            pass
        walk = min(walk, time.perf_counter() - t)
        t = time.perf_counter()
        f = io.BytesIO(data)
        for s in range(0, a.samples, a.block):
            idx.read(f, s, min(s + a.block, a.samples), url="mem.tar", first_gid=s, num_classes=10)
        slc = min(slc, time.perf_counter() - t)
        t = time.perf_counter()
        SampleIndex.from_bytes(
            raw, shard_bytes=len(data), shard_sha256=w.sha256
        )  # what load_index checks, once per shard
        load = min(load, time.perf_counter() - t)
    n = a.samples
    print(
        f"header walk: {walk / n * 1e6:.2f} us/sample; index, {a.block}-sample range reads: {slc / n * 1e6:.2f} us/sample "
        f"+ {load / n * 1e6:.2f} us/sample to parse and check the index; index {len(raw) / n:.1f} bytes/sample"
    )


if __name__ == "__main__":
    main()
