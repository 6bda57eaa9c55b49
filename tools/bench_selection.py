"""What one epoch of a selection costs at the wire: bytes and requests of a 10 % selection scattered over every
shard, with the loader's default ``max_hole_bytes`` and with ``max_hole_bytes=0``, against a full epoch of the split.

    PYTHONPATH=$PWD python tools/bench_selection.py [--images 2000] [--shard-size 200] [--fraction 0.1]
        [--every] [--rounds 3]

The split is converted locally and uploaded to moto's S3 server on 127.0.0.1; every read goes through a counting
HTTP proxy in front of it, so requests and bytes are what the store saw (ranged GETs summed by their ``Range``;
manifest, indexes and tables counted apart from shard reads). The selection is written by ``shardkit.select``
(``--every``: every 10th sample; default: a seeded random draw of ``--fraction`` of each shard, so every shard has
some). Each configuration is read ``--rounds`` times, interleaved with the others (a fresh loader each time,
``raw=True``, one process, shuffled); the figures are medians. Also printed: ``loader.stats.bytes_read``.

Goals: with the default ``max_hole_bytes`` a selection never costs more bytes or requests than a full epoch; with
gaps skipped (``max_hole_bytes=0``) it costs at most 15 % of a full epoch's bytes.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dataset(root: str, images: int, size: tuple[int, int], shard_size: int) -> str:
    from PIL import Image

    from shardkit.convert import ConvertConfig, convert
    from shardkit.demo.sampledata import make_image

    src = os.path.join(root, "src")
    for i in range(images):
        d = os.path.join(src, f"c{i % 10}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(make_image(i % 10, i, size)).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    convert(src, os.path.join(root, "ds"), ConvertConfig(shard_size=shard_size), quiet=True)
    return os.path.join(root, "ds", "train")


def _keys_file(url: str, fraction: float, every: bool, path: str) -> int:
    """A list of the keys to select (a seeded draw of ``fraction`` of each shard, or every ``1/fraction``-th)."""
    import shardkit

    ds = shardkit.open(url)
    rng = np.random.default_rng(0)
    keys: list[str] = []
    start = 0
    for s in ds.manifest.shards:
        pos = np.arange(start, start + s.samples)
        take = (
            pos[:: round(1 / fraction)]
            if every
            else np.sort(rng.choice(pos, max(1, round(fraction * s.samples)), replace=False))
        )
        keys += [ds.raw(int(i)).key for i in take]
        start += s.samples
    with open(path, "w") as f:
        f.write("\n".join(keys) + "\n")
    return len(keys)


def _wire(log: list, sizes: dict[str, int]) -> tuple[int, int, int]:
    """(shard GETs, shard bytes, other requests) of a proxy log."""
    gets = nbytes = other = 0
    for r in log:
        name = r.path.split("?")[0].rsplit("/", 1)[-1]
        if not name.endswith(".tar"):
            other += 1
            continue
        if r.method != "GET":
            other += 1
            continue
        gets += 1
        m = re.match(r"bytes=(\d+)-(\d*)", r.range or "")
        size = sizes[name]
        nbytes += size if m is None else min(int(m.group(2) or size - 1), size - 1) - int(m.group(1)) + 1
    return gets, nbytes, other


def _epoch(url: str, opts: dict[str, Any], proxy: Any, sizes: dict[str, int], **kw: Any) -> dict[str, float]:
    import shardkit

    before = len(proxy.log)
    loader = shardkit.load(url, batch_size=32, num_workers=0, raw=True, seed=0, storage_options=opts, **kw)
    n = sum(len(b) for b in loader)
    gets, nbytes, other = _wire(proxy.log[before:], sizes)
    return {"samples": n, "gets": gets, "bytes": nbytes, "other": other, "stats_bytes": loader.stats.bytes_read}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--shard-size", type=int, default=200)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--every", action="store_true", help="every 1/fraction-th sample instead of a random draw")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import s3fs
    from moto.server import ThreadedMotoServer

    import shardkit
    from tests.support.faults import FaultProxy, free_port

    w, h = (int(v) for v in a.size.split("x"))
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    with tempfile.TemporaryDirectory() as tmp:
        local = _dataset(tmp, a.images, (w, h), a.shard_size)
        sizes = {n: os.path.getsize(os.path.join(local, n)) for n in os.listdir(local)}
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
        server.start()
        try:
            endpoint = f"http://127.0.0.1:{port}"
            base = {"key": "testing", "secret": "testing", "skip_instance_cache": True}
            fs = s3fs.S3FileSystem(**base, client_kwargs={"endpoint_url": endpoint})
            fs.mkdir("bench")
            fs.put(local + "/", "bench/train/", recursive=True)
            keys = os.path.join(tmp, "keys.txt")
            picked = _keys_file(local, a.fraction, a.every, keys)
            with FaultProxy(endpoint) as proxy:
                opts = {**base, "client_kwargs": {"endpoint_url": proxy.url}}
                sel = os.path.join(tmp, "sel")
                done = shardkit.select("s3://bench/train", out=sel, include=keys, storage_options=opts)
                print(done.summary())
                m = shardkit.open(local).manifest
                print(
                    f"{m.num_samples} samples in {len(m.shards)} shards, {m.num_bytes / m.num_samples / 1e3:.1f} kB/sample; "
                    f"selection {picked} samples ({picked / m.num_samples:.1%})"
                )
                configs: dict[str, tuple[str, dict[str, Any]]] = {
                    "full epoch": ("s3://bench/train", {}),
                    "selection, default max_hole_bytes": (sel, {}),
                    "selection, max_hole_bytes=0": (sel, {"max_hole_bytes": 0}),
                }
                runs: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
                for _ in range(a.rounds):
                    for name, (url, kw) in list(configs.items()):
                        try:
                            runs[name].append(_epoch(url, opts, proxy, sizes, **kw))
                        except (TypeError, ValueError, shardkit.ShardkitError) as exc:
                            print(f"{name}: not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
                            runs[name] = []
                            configs = {k: v for k, v in configs.items() if k != name}
        finally:
            server.stop()
    full = runs.get("full epoch") or []
    if not full:
        return
    fb = statistics.median(r["bytes"] for r in full)
    fg = statistics.median(r["gets"] for r in full)
    print(
        f"{'epoch':36} {'samples':>8} {'shard GETs':>10} {'MB':>8} {'other req':>9} {'stats MB':>9} {'bytes/full':>10} {'GETs/full':>9}"
    )
    for name, rs in runs.items():
        if not rs:
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(
            f"{name:36} {med['samples']:>8.0f} {med['gets']:>10.0f} {med['bytes'] / 1e6:>8.2f} {med['other']:>9.0f} "
            f"{med['stats_bytes'] / 1e6:>9.2f} {med['bytes'] / fb:>10.1%} {med['gets'] / fg:>9.1%}"
        )


if __name__ == "__main__":
    main()
