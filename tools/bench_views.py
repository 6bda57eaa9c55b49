"""DINO-style multi-crop benchmark: shardkit ``views=`` against the torchvision pipeline, and 10 views
against 1 crop, with where the workers' time goes.

    python tools/bench_views.py --images 3000 --workers 2 --runs 5 --out /tmp/skbench-views

Pipelines, all with batch 64 and ``DataLoader``/loader workers ``--workers`` (2):

* **torchvision** (DINO's ``DataAugmentationDINO`` without its colour ops): ``ImageFolder`` over the source JPEGs,
  per image 2 x (RandomResizedCrop(224, scale=(0.4, 1)) + RandomHorizontalFlip + PILToTensor) and
  8 x the same at 96 px, scale (0.05, 0.4); bicubic, as DINO (``--interpolation``); default collate -> a list
  of 10 uint8 batches.
* **shardkit views**: ``shardkit.load(url, views=[View(224, scale=(0.4, 1.0), count=2),
  View(96, scale=(0.05, 0.4), count=8)])`` -> the same list of 10 uint8 batches (each sample decoded once).
* **shardkit 1 crop**: ``shardkit.load(url)`` (train preset, 224) -> one uint8 batch.

Every measurement is a fresh child process (``--child``); the pipelines alternate round by round (A B C A B C ...)
so that background load hits them alike; each child checks the first batch's structure (10 tensors of the right
shapes, or 1), skips ``--workers`` start-up batches, then times ``--batches`` batches (cycling epochs with persistent
workers). The table gives medians over ``--runs`` rounds and the medians of the per-round ratios. The shardkit
children also sum the loader's per-stage worker seconds (``loader.stats``: read, decode, resize = cut + resize + flip,
collate) over the epochs they ran: "where the time goes".

Data: ImageNet-like photo JPEGs made by ``tools/bench_loader.py``'s generator (median 500x375, a tail past 1000 px,
q90), converted with ``shardkit.convert`` (short side 256 like ``bench_loader``, or ``--store copy``: the source
JPEGs' bytes as they are); the torchvision pipeline reads the source ImageFolder (full size), as a user who has not
converted does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BATCH = 64
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: DINO's views: (size, scale, count); 2 global + 8 local crops
DINO_VIEWS = ((224, (0.4, 1.0), 2), (96, (0.05, 0.4), 8))
KINDS = ("torchvision", "shardkit views", "shardkit 1 crop")
STAGES = ("read_s", "decode_s", "resize_s", "collate_s")


# ----------------------------------------------------------------------------- data


def make_data(out: str, n: int, store: str, procs: int) -> tuple[str, str]:
    """The source ImageFolder (``n`` images over 8 classes) and its shards (``store``: ``256`` or ``copy``)."""
    import multiprocessing as mp

    sys.path.insert(0, HERE)
    from bench_loader import _make_class  # the same photo-like generator as the loader benchmark

    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.imageproc import EncodeConfig
    from shardkit.demo.sampledata import class_names

    src = os.path.join(out, "imagefolder")
    names = class_names(8)
    with mp.get_context("fork").Pool(procs) as pool:
        pool.map(_make_class, [(src, i, c, n // len(names), 0) for i, c in enumerate(names)])
    dest = os.path.join(out, f"shards-{store}")
    if not os.path.exists(os.path.join(dest, "train", "manifest.json")):  # a plain ImageFolder -> split "train"
        image = EncodeConfig(copy=True) if store == "copy" else EncodeConfig(short_side=int(store))
        convert(src, dest, ConvertConfig(image=image, shard_size=250, shard_bytes=None), workers=procs, quiet=True)
    return src, os.path.join(dest, "train")


# ----------------------------------------------------------------------------- pipelines (in the child)


class MultiCrop:
    """DINO's multi-crop without colour: per view RandomResizedCrop + RandomHorizontalFlip + PILToTensor."""

    def __init__(self, interpolation: str) -> None:
        from torchvision import transforms as T

        interp = T.InterpolationMode(interpolation)
        self.transforms = [
            T.Compose(
                [
                    T.RandomResizedCrop(size, scale=scale, interpolation=interp),
                    T.RandomHorizontalFlip(),
                    T.PILToTensor(),
                ]
            )
            for size, scale, count in DINO_VIEWS
            for _ in range(count)
        ]

    def __call__(self, image):
        return [t(image) for t in self.transforms]


def _expected_shapes(kind: str) -> list[tuple[int, ...]]:
    if kind == "shardkit 1 crop":
        return [(3, 224, 224)]
    return [(3, size, size) for size, _, count in DINO_VIEWS for _ in range(count)]


def _check(kind: str, batch) -> None:
    """The first batch has the structure both sides must deliver: uint8 [B, 3, S, S] per view, in DINO's order."""
    images = batch[0] if isinstance(batch[0], list) else [batch[0]]
    shapes = [tuple(t.shape[1:]) for t in images]
    if shapes != _expected_shapes(kind) or any(str(t.dtype) != "torch.uint8" for t in images):
        raise SystemExit(f"{kind}: unexpected batch structure {shapes} {[t.dtype for t in images]}")
    if any(len(t) != len(batch[1]) for t in images):
        raise SystemExit(f"{kind}: views and labels disagree on the batch size")


def child(opts: dict) -> dict:
    """One measurement: img/s over ``batches`` batches after one start-up batch per worker (and stage seconds)."""
    import torch

    kind, workers, batches = opts["kind"], opts["workers"], opts["batches"]
    loader = None
    if kind == "torchvision":
        from torchvision.datasets import ImageFolder

        ds = ImageFolder(opts["src"], transform=MultiCrop(opts["interpolation"]))
        dl = torch.utils.data.DataLoader(
            ds, batch_size=BATCH, shuffle=True, num_workers=workers, persistent_workers=workers > 0, drop_last=True
        )

        def epochs():
            while True:
                yield from dl

    else:
        import shardkit

        extra: dict[str, Any] = {}
        if kind == "shardkit views":
            extra["views"] = [shardkit.View(s, scale=sc, count=c) for s, sc, c in DINO_VIEWS]
        loader = shardkit.load(
            opts["shards"],
            batch_size=BATCH,
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=False,
            drop_last=True,
            **extra,
        )
        totals = dict.fromkeys(STAGES + ("samples",), 0.0)

        def add_stats() -> None:
            s = loader.stats
            for k in totals:
                totals[k] += getattr(s, k)

        def epochs():
            e = 0
            while True:
                loader.set_epoch(e)
                yield from loader
                add_stats()
                e += 1

    it = epochs()
    first = next(it)
    _check(kind, first)
    for _ in range(max(0, workers - 1)):  # the rest of the start-up batches (one per worker)
        next(it)
    n, t0 = 0, time.perf_counter()
    for _ in range(batches):
        n += len(next(it)[1])
    out: dict = {"img_s": n / (time.perf_counter() - t0)}
    if loader is not None:
        add_stats()  # the epoch in progress
        out["stages"] = totals
        out["report"] = loader.report()
    return out


def ceiling(opts: dict) -> dict:
    """The decode stage alone, in process, one core, bytes in memory (like ``bench_loader``'s decode-only ceiling):
    img/s and seconds per stage for views and for 1 crop, with the workers' own code (``views_batch``,
    ``decode_batch``)."""
    import itertools

    import shardkit
    from shardkit.loader.batching import BatchSpec, decode_batch
    from shardkit.loader.config import ImageConfig
    from shardkit.loader.decode.multicrop import ViewDecoder, views_batch
    from shardkit.loader.decode.worker import CropDecoder
    from shardkit.loader.stats import COUNTERS, Counters
    from shardkit.private_apis import one_thread

    raw = shardkit.load(opts["shards"], batch_size=BATCH, num_workers=0, raw=True, shuffle=False, pin_memory=False)
    batches = list(itertools.islice(raw, -(-opts["samples"] // BATCH)))
    views = tuple(shardkit.View(s, scale=sc, count=c) for s, sc, c in DINO_VIEWS)
    spec = BatchSpec(batch_size=BATCH, num_batches=len(batches), epoch=0)
    out = {}
    stages: list[tuple[str, Any, Any]] = [
        ("shardkit views", ViewDecoder(ImageConfig(views=views), 0), views_batch),
        ("shardkit 1 crop", CropDecoder(ImageConfig(), 0), decode_batch),
    ]
    for kind, dec, make in stages:
        with one_thread():
            make(batches[0][:16], spec=spec, decoder=dec, counters=Counters())  # warm up
            c, t = Counters(), time.perf_counter()
            for b in batches:
                make(b, spec=spec, decoder=dec, counters=c)
            dt = time.perf_counter() - t
        d = dict(zip(COUNTERS, c.v.tolist()))
        out[kind] = {"img_s": d["samples"] / dt, **{k: d[k] for k in STAGES + ("samples",)}}
    return out


def run_child(opts: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(opts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if r.returncode:
        raise SystemExit(f"{opts['kind']}: measurement failed:\n{r.stdout[-1000:]}{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- report


def stage_rows(stages: dict[str, list[dict]], read: bool = True) -> list[str]:
    """Markdown rows: per shardkit pipeline, ms per image for each stage (medians over runs) and its share."""
    shown = STAGES if read else STAGES[1:]
    names = {"read_s": "read", "decode_s": "decode", "resize_s": "resize (cut + resize + flip)", "collate_s": "collate"}
    rows = [
        f"| shardkit pipeline | {' | '.join(names[k] for k in shown)} | ms per image |",
        "|---|" + "---:|" * (len(shown) + 1),
    ]
    for kind, runs in stages.items():
        per = {k: statistics.median(1000 * r[k] / max(1.0, r["samples"]) for r in runs) for k in STAGES}
        work = per["decode_s"] + per["resize_s"] + per["collate_s"]  # read runs on a thread, overlapping decode
        cells = [f"{per[k]:.2f} ms" + ("" if k == "read_s" else f" ({100 * per[k] / work:.0f} %)") for k in shown]
        rows.append(f"| {kind} | {' | '.join(cells)} | {work:.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=40, help="batches timed per run (shardkit)")
    ap.add_argument("--tv-batches", type=int, default=8, help="batches timed per run (torchvision)")
    ap.add_argument(
        "--store", default="256", help="shards: short side in pixels (default 256) or 'copy' (source bytes)"
    )
    ap.add_argument("--interpolation", default="bicubic", choices=["bicubic", "bilinear"], help="torchvision's resize")
    ap.add_argument("--ceiling-samples", type=int, default=256, help="samples of the in-process 1-core breakdown")
    ap.add_argument("--out", default="/tmp/shardkit-bench-views")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        opts = json.loads(a.child)
        print(json.dumps(ceiling(opts) if opts["kind"] == "ceiling" else child(opts)))
        return
    if a.store != "copy" and not a.store.isdigit():
        ap.error(f"--store must be a number of pixels or 'copy', not {a.store!r}")

    t = time.time()
    src, shards = make_data(a.out, a.images, a.store, max(1, os.cpu_count() or 1))
    from shardkit.format.manifest import load_manifest

    m = load_manifest(shards)
    sizes = [os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(src) for f in fs]
    data_line = (
        f"{m.num_samples} ImageNet-like images, {sum(sizes) / len(sizes) / 1e3:.0f} kB mean source JPEG; "
        f"{len(m.shards)} shards ({'source bytes' if a.store == 'copy' else f'short side {a.store}'}, "
        f"{m.num_bytes / m.num_samples / 1e3:.0f} kB/sample)"
    )
    print(f"data: {data_line} (prepared in {time.time() - t:.0f} s)", flush=True)

    base = {"workers": a.workers, "src": src, "shards": shards, "interpolation": a.interpolation}
    img_s: dict[str, list[float]] = {k: [] for k in KINDS}
    stages: dict[str, list[dict]] = {k: [] for k in KINDS[1:]}
    reports: dict[str, str] = {}
    ceilings: list[dict] = []
    for r in range(a.runs):
        for kind in KINDS:
            res = run_child({**base, "kind": kind, "batches": a.tv_batches if kind == "torchvision" else a.batches})
            img_s[kind].append(res["img_s"])
            if "stages" in res:
                stages[kind].append(res["stages"])
                reports[kind] = res["report"]
            print(f"round {r}: {kind:<16} {res['img_s']:>8.1f} img/s", flush=True)
        ceilings.append(run_child({**base, "kind": "ceiling", "samples": a.ceiling_samples}))
        one = ", ".join(f"{k} {v['img_s']:.1f} img/s" for k, v in ceilings[-1].items())
        print(f"round {r}: in process, 1 core: {one}", flush=True)

    def ratio(num: str, den: str) -> float:
        return statistics.median(x / y for x, y in zip(img_s[num], img_s[den]))

    cores = len(os.sched_getaffinity(0))
    cmd = "python tools/bench_views.py " + " ".join(sys.argv[1:])
    med = {k: statistics.median(v) for k, v in img_s.items()}
    vs_tv, vs_one = ratio("shardkit views", "torchvision"), ratio("shardkit views", "shardkit 1 crop")
    print(
        f"\n`{cmd}`, {time.strftime('%Y-%m-%d')}, {cores} cores, {a.workers} workers, batch {BATCH}; data: {data_line}."
    )
    print(f"img/s: medians of {a.runs} interleaved runs; ratios: medians of the per-round ratios.\n")
    print("| pipeline | img/s | ratio |\n|---|---:|---|")
    print(
        f"| torchvision: `ImageFolder` + per image 2 x RRC(224, (0.4, 1)) + 8 x RRC(96, (0.05, 0.4)), flip, "
        f"PILToTensor ({a.interpolation}), `DataLoader` | {med['torchvision']:,.0f} | 1x |"
    )
    print(
        f"| **shardkit** `views=[View(224, (0.4, 1), count=2), View(96, (0.05, 0.4), count=8)]` "
        f"| **{med['shardkit views']:,.0f}** | **{vs_tv:.1f}x torchvision** (goal >= 5x), "
        f"{vs_one:.2f}x shardkit 1 crop |"
    )
    print(f"| shardkit 1 crop (train preset, 224) | {med['shardkit 1 crop']:,.0f} | — |")
    print("\nWhere the workers' time goes (`loader.stats`, summed over workers and the epochs each run touched):\n")
    print("\n".join(stage_rows(stages)))
    print(
        f"\nThe decode stage alone, in process, 1 core, bytes in memory ({a.ceiling_samples} samples, "
        f"the workers' code; medians of {a.runs} runs, one per round):\n"
    )
    print("\n".join(stage_rows({k: [c[k] for c in ceilings] for k in stages}, read=False)))
    for kind in stages:
        one_core = statistics.median(c[kind]["img_s"] for c in ceilings)
        used = max(1, min(a.workers, cores))
        eff = statistics.median(x / (c[kind]["img_s"] * used) for x, c in zip(img_s[kind], ceilings))
        print(
            f"\n{kind}: {one_core:,.0f} img/s on 1 core in process; {a.workers} workers / (that x {used} cores) = {eff:.2f}"
        )
    for kind, line in reports.items():
        print(f"\n{kind}, last run, `loader.report()`: {line}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results-views.json"), "w") as f:
        json.dump(
            {
                "img_s": img_s,
                "stages": stages,
                "ceilings": ceilings,
                "ratio_views_tv": vs_tv,
                "ratio_views_1crop": vs_one,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
