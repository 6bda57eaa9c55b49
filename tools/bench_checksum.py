"""Per-sample checksum cost: CRC32C (google-crc32c) against xxh3 and zlib's CRC-32, on one sample's bytes; and
a copy of a split whose sample indexes lack checksums, to measure the loader's cost of checking them.

Usage::

    python tools/bench_checksum.py [--size 60000] [--runs 5]      # per-sample timings (xxhash when installed)
    python tools/bench_checksum.py --v1-copy SPLIT DEST            # DEST: SPLIT with sidecar-1 indexes (no checksums)
    python tools/bench_before_after.py --before . --after . --shards SPLIT --before-shards DEST --runs 7
        # the loader with and without the checks, same code, interleaved ("before": no checksums)
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


def v1_copy(src: str, dst: str) -> None:
    """Copy split ``src`` to ``dst`` with every sample index rewritten without checksums (format sidecar-1)."""
    import shutil
    from dataclasses import replace

    from shardkit.format.index import INDEX_FORMAT_V1, SampleIndex, index_url
    from shardkit.format.manifest import load_manifest, save_manifest

    shutil.copytree(src, dst)
    m = load_manifest(dst)
    for k, info in enumerate(m.shards):
        path = index_url(m.shard_url(k))
        with open(path, "rb") as f:
            idx = SampleIndex.from_bytes(f.read(), path, shard_bytes=info.bytes, shard_sha256=info.sha256)
        with open(path, "wb") as f:
            f.write(replace(idx, crc32c=None).to_bytes())
    save_manifest(replace(m, sample_index=INDEX_FORMAT_V1), dst)
    print(f"{dst}: {len(m.shards)} shards, sample indexes without checksums")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v1-copy", nargs=2, metavar=("SPLIT", "DEST"), help="write a copy without checksums and exit")
    ap.add_argument("--size", type=int, default=60_000, help="bytes per sample")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20_000)
    a = ap.parse_args()
    if a.v1_copy:
        return v1_copy(*a.v1_copy)
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
