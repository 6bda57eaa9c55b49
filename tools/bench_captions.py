"""Image + caption batches: shardkit ``load(fields=("image", "text"))`` against plain webdataset.

    python tools/bench_captions.py --images 3000 --workers 2 --runs 5 --out /tmp/skcap

Data: ImageNet-sized photo-like JPEGs (``tools/bench_loader.py``'s generator: median 500x375, q90) with a
random caption each (3-30 words, like web alt-text), written as plain webdataset tars of ``jpg`` + ``txt``
(no ``cls``: image-text pairs) with ``webdataset.TarWriter``. Those tars are converted twice::

    shardkit convert 'OUT/wds/captions-{000000..N}.tar' OUT/copy --no-label --text-key txt --copy --shard-size K
    shardkit convert 'OUT/wds/captions-{000000..N}.tar' OUT/conv --no-label --text-key txt --shard-size K

(``--copy``: the JPEGs byte for byte, the same bytes as the tars; without: re-encoded at short side 256).
Each round measures, in this order (interleaved, so a drift of the machine's speed hits every pipeline alike):

- ``wds tars``: ``WebDataset(tars).shuffle(1000).decode("pil").to_tuple("jpg", "txt")
  .map_tuple(RandomResizedCrop(224) + flip + PILToTensor, identity)`` in a ``DataLoader`` with ``--workers``
  workers, ``batch_size`` and a ``collate_fn`` that stacks the uint8 images and keeps the texts a list (collated
  in the workers: one tensor per batch crosses the process boundary; the same speed as webdataset's own
  ``.batched()`` with ``batch_size=None``);
- ``shardkit --copy``: ``shardkit.load(copy, fields=("image", "text"), size=224)`` (train preset: random
  resized crop + flip; uint8 batches), the same JPEG bytes;
- ``wds conv`` and ``shardkit conv``: the same two pipelines on the re-encoded shards (webdataset reads
  shardkit's shards as they are: they are webdataset tars).

A measurement is ``--epochs`` epochs with fresh workers, timed from the first batch (worker start-up
excluded). The table gives medians of img/s over ``--runs`` rounds and the medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loader import _make_class  # noqa: E402  (the ImageNet-like photo generator)

WORDS = (
    "a photo of the dog cat red blue small large wooden house by on in with near an old new city street beach "
    "mountain sunset people two three man woman child playing sitting standing car bike tree field water white "
    "black green close-up view background portrait of vintage modern kitchen table food plate bowl fresh"
).split()


def make_tars(out: str, n: int, per_tar: int, procs: int) -> str:
    """ImageNet-sized JPEGs with captions as plain webdataset tars; returns their brace pattern."""
    import webdataset as wds

    from shardkit.demo.sampledata import class_names

    src = os.path.join(out, "images")
    names = class_names(8)
    per = n // len(names)
    with mp.get_context("fork").Pool(procs) as pool:
        pool.map(_make_class, [(src, i, c, per, 0) for i, c in enumerate(names)])
    files = sorted(os.path.join(c, f) for c in names for f in os.listdir(os.path.join(src, c)))
    tars = os.path.join(out, "wds")
    count = (len(files) + per_tar - 1) // per_tar
    pattern = os.path.join(tars, f"captions-{{000000..{count - 1:06d}}}.tar")
    if os.path.exists(os.path.join(tars, f"captions-{count - 1:06d}.tar")):
        return pattern
    os.makedirs(tars, exist_ok=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(files))
    for t in range(count):
        with wds.TarWriter(os.path.join(tars, f"captions-{t:06d}.tar")) as sink:
            for i in order[t * per_tar : (t + 1) * per_tar]:
                words = rng.choice(WORDS, size=int(rng.integers(3, 31)))
                with open(os.path.join(src, files[i]), "rb") as fh:
                    sink.write({"__key__": f"{i:07d}", "jpg": fh.read(), "txt": " ".join(words)})
    return pattern


def shardkit_convert(tars: str, dest: str, per_shard: int, copy: bool, procs: int) -> list[str]:
    """``shardkit convert TARS DEST --no-label --text-key txt [--copy]``; returns the command line."""
    args = ["convert", tars, dest, "--no-label", "--text-key", "txt", "--shard-size", str(per_shard)]
    args += ["--workers", str(procs), *(["--copy"] if copy else [])]
    if not os.path.exists(os.path.join(dest, "manifest.json")) and not os.path.exists(
        os.path.join(dest, "train", "manifest.json")
    ):
        code = "import sys; from shardkit.cli import main; sys.exit(main(sys.argv[1:]))"
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"shardkit convert failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return ["shardkit", *args]


def split_url(dest: str) -> str:
    return os.path.join(dest, "train") if os.path.exists(os.path.join(dest, "train", "manifest.json")) else dest


# ----------------------------------------------------------------------------- pipelines


def _rate(make_iter, epochs: int) -> float:
    """img/s over ``epochs`` epochs, timed from the first batch (worker start-up excluded)."""
    n, t0 = 0, None
    for _ in range(epochs):
        for b in make_iter():
            if t0 is None:
                t0 = time.perf_counter()
            else:
                n += len(b[0]) if isinstance(b, (tuple, list)) else len(b["image"])
    assert t0 is not None, "no batch"
    return n / (time.perf_counter() - t0)


def _identity(x):
    return x


def _collate(samples):
    import torch

    images, texts = zip(*samples)
    return torch.stack(images), list(texts)


def webdataset_loader(urls: list[str], workers: int, batch: int):
    import torch
    import webdataset as wds
    from torchvision import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = (
        wds.WebDataset(urls, shardshuffle=len(urls), nodesplitter=None, empty_check=False, seed=0)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "txt")
        .map_tuple(tf, _identity)
    )
    return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=_collate)


def run_webdataset(urls: list[str], workers: int, batch: int, epochs: int) -> float:
    dl = webdataset_loader(urls, workers, batch)
    return _rate(lambda: iter(dl), epochs)


def run_shardkit(url: str, workers: int, batch: int, epochs: int) -> float:
    import shardkit

    loader = shardkit.load(
        url,
        fields=("image", "text"),
        size=224,
        batch_size=batch,
        num_workers=workers,
        persistent_workers=False,
        pin_memory=False,
    )
    try:
        return _rate(lambda: iter(loader), epochs)
    finally:
        loader.close()


def shard_urls(url: str) -> list[str]:
    from shardkit.format.manifest import load_manifest

    m = load_manifest(url)
    return [m.shard_url(i) for i in range(len(m.shards))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--per-shard", type=int, default=250, help="samples per input tar and per shardkit shard")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1, help="epochs per measurement")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="/tmp/skcap")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="processes for making data")
    a = ap.parse_args()
    if a.images < 8 or a.per_shard < 1 or a.runs < 1 or a.epochs < 1 or a.batch_size < 1 or a.workers < 0:
        ap.error("--images >= 8, and --per-shard, --runs, --epochs, --batch-size >= 1, --workers >= 0")

    tars = make_tars(a.out, a.images, a.per_shard, a.procs)
    import webdataset as wds

    tar_urls = list(wds.shardlists.expand_urls(tars))
    cmds = {}
    for name, copy in (("copy", True), ("conv", False)):
        cmds[name] = shardkit_convert(tars, os.path.join(a.out, name), a.per_shard, copy, a.procs)
    copy_url, conv_url = split_url(os.path.join(a.out, "copy")), split_url(os.path.join(a.out, "conv"))
    n = sum(1 for _ in wds.WebDataset(tar_urls, shardshuffle=False, empty_check=False))
    print(f"{n} image-text pairs in {len(tar_urls)} tars; " + "; ".join(" ".join(c) for c in cmds.values()))

    pipelines = {
        "wds tars": lambda: run_webdataset(tar_urls, a.workers, a.batch_size, a.epochs),
        "shardkit --copy": lambda: run_shardkit(copy_url, a.workers, a.batch_size, a.epochs),
        "wds conv": lambda: run_webdataset(shard_urls(conv_url), a.workers, a.batch_size, a.epochs),
        "shardkit conv": lambda: run_shardkit(conv_url, a.workers, a.batch_size, a.epochs),
    }
    res: dict[str, list[float]] = {k: [] for k in pipelines}
    for r in range(a.runs):
        for name, fn in pipelines.items():
            res[name].append(fn())
            print(f"round {r}: {name:<16} {res[name][-1]:>7.0f} img/s", flush=True)

    def ratio(num: str, den: str) -> float:
        return statistics.median(x / y for x, y in zip(res[num], res[den]))

    load = os.getloadavg()
    print(
        f"\n{n} images, {a.workers} workers, batch {a.batch_size}, {a.epochs} epoch(s) per measurement, "
        f"medians of {a.runs} interleaved rounds, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
    )
    print("| pipeline | same bytes as | img/s | shardkit / webdataset |")
    print("|---|---|---:|---:|")
    print(f"| webdataset, original tars | | {statistics.median(res['wds tars']):.0f} | |")
    print(
        f"| shardkit, `--copy` | original tars | {statistics.median(res['shardkit --copy']):.0f} | "
        f"{ratio('shardkit --copy', 'wds tars'):.2f}x |"
    )
    print(f"| webdataset, converted shards | | {statistics.median(res['wds conv']):.0f} | |")
    print(
        f"| shardkit, converted (short side 256) | converted shards | {statistics.median(res['shardkit conv']):.0f} | "
        f"{ratio('shardkit conv', 'wds conv'):.2f}x |"
    )
    print(
        f"\nshardkit converted vs webdataset on the original tars (what converting buys end to end): "
        f"{ratio('shardkit conv', 'wds tars'):.2f}x"
    )
    print(f"\ncommand: python tools/bench_captions.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
