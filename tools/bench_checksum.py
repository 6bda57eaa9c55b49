"""Per-sample checksum cost: CRC32C (google-crc32c) against xxh3 and zlib's CRC-32, on one sample's bytes.

Usage: ``python tools/bench_checksum.py [--size 60000] [--runs 5]`` (xxhash is measured when installed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import zlib
from collections.abc import Callable


def per_call_us(fn: Callable[[bytes], object], data: bytes, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn(data)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=60_000, help="bytes per sample")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20_000)
    a = ap.parse_args()
    from shardkit.format.checksum import crc32c

    fns: dict[str, Callable[[bytes], object]] = {"crc32c (google-crc32c)": crc32c, "zlib.crc32": zlib.crc32}
    try:
        import xxhash

        fns["xxh3_64 (xxhash)"] = xxhash.xxh3_64_intdigest
    except ImportError:
        pass
    data = os.urandom(a.size)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(a.runs):  # interleaved: each run measures every function once
        for name, fn in fns.items():
            times[name].append(per_call_us(fn, data, a.calls))
    for name, ts in times.items():
        print(f"{name:24s} {statistics.median(ts):7.2f} us per {a.size} B sample (median of {a.runs})")


if __name__ == "__main__":
    main()
