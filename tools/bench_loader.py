"""Side-by-side loader benchmark: seed ImageFolder pipeline, plain webdataset,
shardkit from disk and from S3 (moto on loopback), the in-process decode-only ceiling, and RSS over epochs.

    .venv/bin/python tools/bench_loader.py --images 3000 --workers 2 --runs 3 --out /tmp/skbench

Data: an ImageFolder of photo-like JPEGs with an ImageNet-like size spread
(``shardkit.demo.sampledata.IMAGENET_LIKE``: median 500x375, some > 1000 px, q90,
about 2.3 bits per pixel), converted with ``shardkit.convert.convert`` (short side 256)
when available, else written with ``shardkit.format.write_shard`` after
the same resize. Every figure is the median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

import numpy as np

BATCH = 64


# ----------------------------------------------------------------------------- data


def _make_class(args):
    root, label, name, count, seed = args
    from PIL import Image

    from shardkit.demo.sampledata import IMAGENET_LIKE, _sizes, make_image

    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng([seed, label])
    for i, size in enumerate(_sizes(rng, count, IMAGENET_LIKE)):
        p = os.path.join(d, f"{name}_{i:05d}.jpg")
        if not os.path.exists(p):
            Image.fromarray(make_image(label, seed * 1_000_003 + i, size)).save(p, quality=90)


def make_data(out: str, n: int, procs: int) -> tuple[str, str]:
    from shardkit.demo.sampledata import class_names

    src = os.path.join(out, "imagefolder")
    names = class_names(8)
    per = n // len(names)
    with mp.get_context("fork").Pool(procs) as pool:
        pool.map(_make_class, [(src, i, c, per, 0) for i, c in enumerate(names)])
    dest = os.path.join(out, "shards")
    split = os.path.join(dest, "train")  # convert writes DEST/<split>/; a flat dest is what _write_shards makes
    if not any(os.path.exists(os.path.join(d, "manifest.json")) for d in (dest, split)):
        try:
            from shardkit.convert import ConvertConfig, convert

            convert(src, dest, ConvertConfig(shard_size=250, shard_bytes=None), workers=procs, quiet=True)
        except ImportError:
            _write_shards(src, dest)
    return src, split if os.path.exists(os.path.join(split, "manifest.json")) else dest


def _write_shards(src: str, dest: str) -> None:
    from PIL import Image

    from shardkit.format import EncodedSample, write_shard
    from shardkit.format.manifest import Manifest, ShardInfo, save_manifest

    classes = sorted(os.listdir(src))
    items = [(c, f) for c in classes for f in sorted(os.listdir(os.path.join(src, c)))]
    np.random.default_rng(0).shuffle(items)
    os.makedirs(dest, exist_ok=True)
    shards = []
    for s in range(0, len(items), 250):
        samples = []
        for c, f in items[s : s + 250]:
            im = Image.open(os.path.join(src, c, f)).convert("RGB")
            w, h = im.size
            k = 256 / min(w, h)
            if k < 1:
                im = im.resize((round(w * k), round(h * k)), Image.BICUBIC, reducing_gap=3.0)
            b = io.BytesIO()
            im.save(b, format="JPEG", quality=90)
            samples.append(
                EncodedSample(
                    f"{c}_{f[:-4]}", b.getvalue(), classes.index(c), {"path": f"{c}/{f}", "width": w, "height": h}
                )
            )
        name = f"train-{len(shards):06d}.tar"
        with open(os.path.join(dest, name), "wb") as fh:
            cnt, nbytes, sha = write_shard(samples, fh)
        shards.append(ShardInfo(name, cnt, nbytes, sha))
    save_manifest(Manifest("train", classes, shards), dest)


# ----------------------------------------------------------------------------- pipelines


def _seed_transforms():
    from torchvision import transforms as T

    return T.Compose(
        [
            T.RandomRotation(30),
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ]
    )


def _rate(it, batches: int) -> float:
    """img/s over ``batches`` batches after the first (start-up excluded)."""
    n, t0 = 0, None
    for i, b in enumerate(it):
        if i == 0:
            t0 = time.perf_counter()
        else:
            n += len(b[0])
        if i >= batches:
            break
    return n / (time.perf_counter() - t0)


def run_seed(src: str, workers: int, batches: int) -> float:
    import torch
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(src, transform=_seed_transforms())
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers)
    return _rate(dl, batches)


def _to_tuple(sample):
    return sample["jpg"], int(sample["cls"])


def run_webdataset(shards: str, workers: int, batches: int) -> float:
    import torch
    import webdataset as wds

    from shardkit.format.manifest import load_manifest

    m = load_manifest(shards)
    urls = [m.shard_url(i) for i in range(len(m.shards))]
    tf = _seed_transforms()
    ds = (
        wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=None, empty_check=False, seed=0)
        .shuffle(1000)
        .decode("pil")
        .map(_to_tuple)
        .map_tuple(tf, None)
    )
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers)
    return _rate(dl, batches)


def run_shardkit(url: str, workers: int, batches: int, **opts) -> float:
    import shardkit

    loader = shardkit.load(
        url, batch_size=BATCH, num_workers=workers, persistent_workers=False, pin_memory=False, **opts
    )
    return _rate(loader, batches)


def run_ceiling(shards: str) -> tuple[float, str]:
    from shardkit.loader.config import ImageConfig
    from shardkit.ops.bench import decode_ceiling

    return decode_ceiling(shards, image=ImageConfig(), samples=512)


def _rss_tree(pid: int) -> int:
    """RSS (bytes) of ``pid`` and its children, from /proc."""
    total = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def run_rss(shards: str, workers: int, epochs: int) -> list[int]:
    import shardkit

    loader = shardkit.load(shards, batch_size=BATCH, num_workers=workers, persistent_workers=True, pin_memory=False)
    out = []
    for _ in range(epochs):
        for _ in loader:
            pass
        out.append(_rss_tree(os.getpid()))
    return out


# ----------------------------------------------------------------------------- S3 (moto, loopback)


def start_moto() -> tuple[subprocess.Popen, str]:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from tests.support.faults import free_port

    port = free_port()
    code = f"from moto.server import ThreadedMotoServer as S; import time; s=S(ip_address='127.0.0.1', port={port}); s.start(); time.sleep(1e6)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except Exception:  # noqa: BLE001 - waiting for the server
            time.sleep(0.1)
    return proc, endpoint


def upload(shards: str, endpoint: str) -> tuple[str, dict]:
    import s3fs

    opts = {"client_kwargs": {"endpoint_url": endpoint}, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("bench")
    fs.put(shards.rstrip("/") + "/", "bench/shards/", recursive=True)
    return "s3://bench/shards", opts


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20, help="batches measured per run (fast pipelines)")
    ap.add_argument(
        "--seed-batches", type=int, default=8, help="batches measured per run (seed / webdataset pipelines)"
    )
    ap.add_argument("--epochs", type=int, default=10, help="epochs for the RSS check")
    ap.add_argument("--out", default="/tmp/shardkit-bench")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: seed,wds,s3,rss")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    t = time.time()
    src, shards = make_data(a.out, a.images, max(1, os.cpu_count() or 1))
    from shardkit.format.manifest import load_manifest

    m = load_manifest(shards)
    sizes = [os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(src) for f in fs]
    print(
        f"data: {m.num_samples} images, {np.mean(sizes) / 1e3:.0f} kB mean source JPEG, {len(m.shards)} shards, "
        f"{m.num_bytes / m.num_samples / 1e3:.0f} kB/sample in shards (prepared in {time.time() - t:.0f} s)",
        flush=True,
    )

    res: dict[str, float] = {}
    W = a.workers
    # Runs are interleaved (one of each per round) so that load from other processes on a shared
    # machine hits every pipeline alike; figures are medians over rounds.
    parts = {
        "shardkit (disk)": lambda: run_shardkit(shards, W, a.batches),
        "shardkit in-process (0 workers)": lambda: run_shardkit(shards, 0, a.batches),
        "decode-only ceiling/core": lambda: run_ceiling(shards)[0],
    }
    if "seed" not in skip:
        parts["seed ImageFolder"] = lambda: run_seed(src, W, a.seed_batches)
    if "wds" not in skip:
        parts["plain webdataset"] = lambda: run_webdataset(shards, W, a.seed_batches)
    proc = None
    if "s3" not in skip:
        proc, endpoint = start_moto()
        url, opts = upload(shards, endpoint)
        parts["shardkit (S3 via moto)"] = lambda: run_shardkit(url, W, a.batches, storage_options=opts)
    runs: dict[str, list[float]] = {k: [] for k in parts}
    try:
        for r in range(a.runs):
            for k, fn in parts.items():
                runs[k].append(fn())
                print(f"round {r}: {k:<32} {runs[k][-1]:>8.0f} img/s", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    for k, v in runs.items():
        res[k] = statistics.median(v)
    print(f"decoder: {run_ceiling(shards)[1]}")
    for k in runs:
        print(f"{k:<32} {res[k]:>8.0f} img/s   runs: {', '.join(f'{v:.0f}' for v in runs[k])}")

    def ratio(num: str, den: str, scale: float = 1.0) -> float:
        return statistics.median(x / (y * scale) for x, y in zip(runs[num], runs[den]))

    cores = len(os.sched_getaffinity(0))
    lines = ["", f"ratios, median over rounds ({W} workers, {cores} cores, batch {BATCH}, train preset 224):"]
    if "seed ImageFolder" in res:
        lines.append(
            f"  vs seed ImageFolder pipeline: {ratio('shardkit (disk)', 'seed ImageFolder'):.1f}x   (target >= 8x)"
        )
    if "plain webdataset" in res:
        lines.append(
            f"  vs plain webdataset:          {ratio('shardkit (disk)', 'plain webdataset'):.1f}x   (target >= 3x)"
        )
    lines.append(
        f"  in-process loader (0 workers) / decode-only ceiling, 1 core: {ratio('shardkit in-process (0 workers)', 'decode-only ceiling/core'):.2f}   (target >= 0.8)"
    )
    lines.append(
        f"  {W} workers / (ceiling x {min(W, cores)} cores): {ratio('shardkit (disk)', 'decode-only ceiling/core', max(1, min(W, cores))):.2f}"
    )
    if "shardkit (S3 via moto)" in res:
        lines.append(
            f"  S3 (moto, loopback) / disk:   {ratio('shardkit (S3 via moto)', 'shardkit (disk)'):.2f}   (target >= 0.8)"
        )
    if "rss" not in skip:
        rss = run_rss(shards, W, a.epochs)
        growth = (max(rss[2:]) - rss[1]) / rss[1] * 100 if len(rss) > 2 else 0.0
        res["rss_growth_after_epoch2_pct"] = growth
        lines.append(
            f"  RSS main+workers per epoch (MB): {', '.join(f'{r / 1e6:.0f}' for r in rss)}; growth after epoch 2: {growth:+.1f}%   (target < 5%)"
        )
    print("\n".join(lines))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
