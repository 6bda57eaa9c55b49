"""Random access side by side: ``shardkit.open`` against webdataset's ``wids`` and LitData's ``StreamingDataset``
on the same JPEG bytes; local (warm page cache) and on cold S3 (moto on 127.0.0.1).

    PYTHONPATH=$PWD python tools/bench_access.py [--images 2000] [--size 320x240] [--items 400] [--rounds 5]
        [--threads 1 8] [--s3-items 100] [--no-s3]

Local: every reader reads the same random indexes, one reader after the other within a round, for ``--rounds``
rounds (interleaved, so a noisy neighbour costs every reader alike); items/s is the median over rounds, latency
median and p99 over every item. ``raw`` is an item's JPEG bytes (shardkit: ``ds.raw(i)``, one ranged read checked
against the index's CRC32C and the tar header; wids: the ``.jpg`` member of an mmapped, indexed tar; LitData: the
``jpg`` field of a chunk), ``decoded`` is those bytes decoded at stored size with the decoder ``shardkit.open``
uses (``ds[i]`` for shardkit), and ``decode alone`` decodes bytes already in memory. wids reads the converted
split's own tar shards; LitData a copy of the same JPEG bytes written by ``litdata.optimize``.

S3 (cold: nothing cached, a fresh reader): requests and bytes per item and the first item's latency, counted at an
HTTP proxy in front of moto. shardkit reads through s3fs (one ranged GET per item once a shard's index is in);
wids downloads whole shards over HTTP; LitData downloads whole chunks. Needs ``pip install litdata wids``
(``shardkit[bench]``); a reader whose package is missing is left out with a line saying so.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def _run(fn: Callable[[int], Any], order: np.ndarray, threads: int) -> tuple[float, np.ndarray]:
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


def _wids(url: str, manifest: Any, base: "str | None" = None, cache: "str | None" = None) -> Any:
    import wids

    shards = [
        {"url": (f"{base}/{s.name}" if base else manifest.shard_url(i)), "nsamples": s.samples}
        for i, s in enumerate(manifest.shards)
    ]
    return wids.ShardListDataset(shards, transformations=[], cache_dir=cache, lru_size=len(shards) + 1)


def _litdata_write(ds: Any, out: str) -> None:
    """The split's JPEG bytes in LitData's chunk format, in the split's order (LitData's own writer, one process)."""
    from litdata.streaming.writer import BinaryWriter

    os.makedirs(out, exist_ok=True)
    w = BinaryWriter(out, chunk_bytes="16MB")
    for i in range(len(ds)):
        r = ds.raw(i)
        w[i] = {"index": i, "key": r.key, "jpg": bytes(r.jpeg)}
    w.done()
    w.merge()


def _local(a: argparse.Namespace, url: str, tmp: str) -> None:
    import shardkit
    from shardkit.loader.decode.decoders import make_decoder

    ds = shardkit.open(url)
    dec = make_decoder("auto")

    def decode(b: Any) -> np.ndarray:
        w, h = dec.header(b)
        return dec.decode(b, w, h)

    readers: dict[str, dict[str, Callable[[int], Any]]] = {
        "shardkit": {"raw": lambda i: ds.raw(i).jpeg, "decoded": ds.__getitem__}
    }
    try:
        wd = _wids(url, ds.manifest)
        readers["wids"] = {
            "raw": lambda i: wd[i][".jpg"].getvalue(),
            "decoded": lambda i: decode(wd[i][".jpg"].getvalue()),
        }
    except ImportError as exc:
        print(f"wids left out: {exc}")
    try:
        import litdata

        lit = os.path.join(tmp, "litdata")
        _litdata_write(ds, lit)
        ld = litdata.StreamingDataset(lit)
        readers["litdata"] = {"raw": lambda i: ld[i]["jpg"], "decoded": lambda i: decode(ld[i]["jpg"])}
    except ImportError as exc:
        print(f"litdata left out: {exc}")
    rng = np.random.default_rng(0)
    check = rng.integers(0, len(ds), 16)
    for name, fns in readers.items():  # the same bytes at the same index, and warm (indexes in, page cache full)
        for i in check.tolist():
            assert bytes(fns["raw"](i)) == bytes(ds.raw(i).jpeg), (name, i)
        for i in range(0, len(ds), max(1, len(ds) // 256)):
            fns["raw"](i)
    jpegs = {i: bytes(ds.raw(i).jpeg) for i in range(len(ds))}
    readers["decode alone"] = {"decoded": lambda i: decode(jpegs[i])}
    print(f"{len(ds)} samples, {ds.manifest.num_bytes / len(ds) / 1e3:.1f} kB/sample, {len(ds.manifest.shards)} shards")
    results: dict[tuple[str, str, int], list[tuple[float, np.ndarray]]] = {}
    for r in range(a.rounds):
        order = np.random.default_rng(100 + r).integers(0, len(ds), a.items)
        for kind in ("raw", "decoded"):
            for th in a.threads:
                for name, fns in readers.items():
                    if kind in fns:
                        results.setdefault((kind, name, th), []).append(_run(fns[kind], order, th))
    print(f"{'kind':8} {'reader':13} {'threads':>7} {'items/s':>9} {'median ms':>10} {'p99 ms':>8} {'shardkit x':>10}")
    rate = {k: statistics.median(len(lat) / wall for wall, lat in v) for k, v in results.items()}
    for (kind, name, th), v in results.items():
        ms = np.concatenate([lat for _, lat in v]) * 1e3
        ratio = rate[(kind, "shardkit", th)] / rate[(kind, name, th)]
        print(
            f"{kind:8} {name:13} {th:>7} {rate[(kind, name, th)]:>9.0f} {np.median(ms):>10.3f} "
            f"{np.percentile(ms, 99):>8.3f} {ratio:>10.2f}"
        )


def _ranged_bytes(log: list, sizes: dict[str, int]) -> int:
    total = 0
    for r in log:
        if r.method != "GET":
            continue
        m = re.match(r"bytes=(\d+)-(\d*)", r.range or "")
        name = r.path.split("?")[0].rsplit("/", 1)[-1]
        size = sizes.get(name, 0)
        if m is None:
            total += size
        else:
            lo, hi = int(m.group(1)), int(m.group(2)) if m.group(2) else size - 1
            total += max(0, min(hi, size - 1) - lo + 1) if size else hi - lo + 1
    return total


def _s3(a: argparse.Namespace, url: str, tmp: str) -> None:
    import s3fs
    from moto.server import ThreadedMotoServer

    import shardkit
    from tests.support.faults import FaultProxy, free_port

    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        opts = {"client_kwargs": {"endpoint_url": endpoint}, "key": "testing", "secret": "testing"}
        fs = s3fs.S3FileSystem(**opts, skip_instance_cache=True)
        fs.mkdir("bench")
        fs.put(url + "/", "bench/train/", recursive=True)
        for name in os.listdir(url):  # wids fetches plain HTTP URLs (curl), without S3 signatures
            if name.endswith(".tar"):
                fs.chmod(f"bench/train/{name}", acl="public-read")
        sizes = {n: os.path.getsize(os.path.join(url, n)) for n in os.listdir(url)}
        lit = os.path.join(tmp, "litdata")
        if os.path.isdir(lit):
            fs.put(lit + "/", "bench/litdata/", recursive=True)
            sizes.update({n: os.path.getsize(os.path.join(lit, n)) for n in os.listdir(lit)})
        n_items = len(shardkit.open(url))
        order = np.random.default_rng(7).integers(0, n_items, a.s3_items).tolist()
        print(f"\ncold S3 (moto on 127.0.0.1 behind a counting proxy), {len(order)} random items")
        print(
            f"{'reader':10} {'first item ms':>13} {'requests/item':>13} {'data GETs/item':>14} {'kB/item':>8} {'kB stored/item':>14}"
        )
        stored = sum(s.bytes for s in shardkit.open(url).manifest.shards) / n_items / 1e3

        def measure(name: str, make: Callable[[str], Callable[[int], Any]], data_path: str) -> None:
            with FaultProxy(endpoint) as proxy:
                get = make(proxy.url)
                t = time.perf_counter()
                get(order[0])
                first = (time.perf_counter() - t) * 1e3
                for i in order[1:]:
                    get(i)
                log = [r for r in proxy.log if data_path in r.path]
            gets = [r for r in log if r.method == "GET" and r.path.split("?")[0].endswith((".tar", ".bin"))]
            kb = _ranged_bytes(log, sizes) / len(order) / 1e3
            print(
                f"{name:10} {first:>13.1f} {len(log) / len(order):>13.2f} {len(gets) / len(order):>14.2f} {kb:>8.1f} {stored:>14.1f}"
            )

        def sk(ep: str) -> Callable[[int], Any]:
            ds = shardkit.open("s3://bench/train", storage_options={**opts, "client_kwargs": {"endpoint_url": ep}})
            return lambda i: ds.raw(i).jpeg

        measure("shardkit", sk, "/bench/train")
        try:
            m = shardkit.open(url).manifest

            def wi(ep: str) -> Callable[[int], Any]:
                wd = _wids(url, m, base=f"{ep}/bench/train", cache=os.path.join(tmp, f"wids-{time.time_ns()}"))
                return lambda i: wd[i][".jpg"].getvalue()

            measure("wids", wi, "/bench/train")
        except ImportError as exc:
            print(f"wids left out: {exc}")
        if os.path.isdir(lit):
            try:
                import litdata
                import litdata.streaming.downloader as lit_dl

                lit_dl._OBSTORE_AVAILABLE = False  # its obstore client refuses plain-HTTP endpoints; boto3 reaches moto

                def li(ep: str) -> Callable[[int], Any]:
                    os.environ["AWS_ENDPOINT_URL"] = ep
                    ld = litdata.StreamingDataset(
                        "s3://bench/litdata",
                        cache_dir=os.path.join(tmp, f"lit-{time.time_ns()}"),
                        storage_options={
                            "endpoint_url": ep,
                            "aws_access_key_id": "testing",
                            "aws_secret_access_key": "testing",
                        },
                    )
                    return lambda i: ld[i]["jpg"]

                measure("litdata", li, "/bench/litdata")
            except Exception as exc:  # noqa: BLE001 - a reader that cannot reach moto is reported, not fatal
                if os.environ.get("BENCH_DEBUG"):
                    import traceback

                    traceback.print_exc()
                print(f"litdata on S3 left out: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--items", type=int, default=400, help="random items per reader, kind and thread count per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--s3-items", type=int, default=100)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--torch-threads", type=int, help="torch.set_num_threads before the runs (default: torch's own)")
    ap.add_argument("--dataset", help="an existing split to read instead of a generated one")
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    import torch

    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    print(f"torch intra-op threads {torch.get_num_threads()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        url = a.dataset or _dataset(tmp, a.images, (w, h))
        _local(a, url, tmp)
        if not a.no_s3:
            _s3(a, url, tmp)


if __name__ == "__main__":
    main()
