"""Detection and segmentation input benchmark: shardkit against ``torchvision.transforms.v2`` on
``tv_tensors`` with a ``DataLoader``, ratios side by side in one run.

    python tools/bench_detection.py --images 1000 --workers 2 --runs 5 --out /tmp/skbench-det
    python tools/bench_detection.py --quick          # a smoke run (seconds): tiny images, one round

Pipelines, all with batch ``--batch-size`` (32), ``--workers`` (2) loader workers, output 512 px, uint8 out:

* **detection, torchvision**: a map-style dataset over the source JPEGs and the COCO json (parsed once, in the
  main process), per image ``torchvision.io.decode_jpeg`` -> ``tv_tensors.Image`` + ``BoundingBoxes`` (XYXY) ->
  ``v2.ScaleJitter((512, 512), scale_range=(0.5, 1.5))`` (longer side = 512 x s, as shardkit's ``detect``) ->
  ``v2.RandomCrop(512, pad_if_needed=True)`` -> ``v2.RandomHorizontalFlip()`` -> ``v2.SanitizeBoundingBoxes()``;
  a collate that stacks the images and pads the boxes (``box_labels`` -1 beyond each sample's count).
* **detection, shardkit**: ``shardkit.load(shards, fields=("image", "boxes", "box_labels", "box_count"),
  preset="detect", size=512)``: the same dict of tensors.
* **segmentation, torchvision**: ``decode_jpeg`` + ``decode_png`` (the mask) -> ``tv_tensors.Image`` + ``Mask`` ->
  ``v2.RandomResizedCrop(512)`` (bilinear image, nearest mask) -> ``v2.RandomHorizontalFlip()``; default collate.
* **segmentation, shardkit**: ``shardkit.load(shards, fields=("image", "mask"), preset="train", size=512)``.
* **... torchvision-pil**: each torchvision pipeline again as torchvision's own detection and segmentation
  references run it: PIL decode (``Image.open(...).convert("RGB")``), the v2 transforms on the PIL image, then
  ``v2.ToImage()``; the masks read with PIL.

Every measurement is a fresh child process (``--child``); the four pipelines alternate round by round so that
background load hits them alike; each child checks its first batch's structure (shapes, dtypes, boxes inside
the image), skips one start-up batch per worker, then times ``--batches`` batches (cycling epochs). The table
gives medians over ``--runs`` rounds and the medians of the per-round ratios (shardkit / torchvision).

Data (written once under ``--out``): ImageNet-sized photo-like JPEGs (``tools/bench_loader.py``'s generator:
median 500x375, a tail past 1000 px, q90) with ``shardkit.demo.scenes`` rectangles painted on them (textured, one
colour per class; exact boxes and a class-per-pixel mask), stored as (a) a folder of JPEGs + ``annotations.json``
(COCO) + PNG masks, which the torchvision pipelines read, and (b) shards holding the same JPEG bytes, the boxes
(``.objects.json``) and the masks (``.mask.png``), written with ``shardkit.format`` (``EncodedSample(objects=,
mask=)``), which shardkit reads.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZE = 512
#: the pipelines; "torchvision-pil" decodes with PIL and transforms PIL images, as torchvision's references do
KINDS = (
    "det torchvision-pil",
    "det torchvision",
    "det shardkit",
    "seg torchvision-pil",
    "seg torchvision",
    "seg shardkit",
)
BASELINES = ("torchvision-pil", "torchvision")
DET_FIELDS = ("image", "boxes", "box_labels", "box_count")
SEG_FIELDS = ("image", "mask")


# ----------------------------------------------------------------------------- data


def _photo_scene(i: int, size: tuple[int, int]) -> tuple[np.ndarray, Any, np.ndarray]:
    """Image ``i``: a photo-like background with textured scene rectangles; its objects and mask (exact)."""
    from shardkit.demo.sampledata import make_image
    from shardkit.demo.scenes import COLOURS, scene

    w, h = size
    s = scene(24, i, size, max_objects=8, min_side=max(12, min(w, h) // 12))
    img = make_image(i % 8, i, size).astype(np.float32)
    rng = np.random.default_rng([24, i])
    painted = np.asarray(COLOURS, np.float32)[s.mask] + rng.normal(0, 10, (h, w, 1)).astype(np.float32)
    on = s.mask > 0
    img[on] = painted[on]
    return np.clip(img, 0, 255).astype(np.uint8), s.objects, s.mask


def _write_chunk(args: tuple[str, list[tuple[int, tuple[int, int]]]]) -> list[dict]:
    """Write images + masks of a chunk to the folder; return their records (objects, sizes)."""
    from PIL import Image

    from shardkit.format.masks import mask_bytes

    folder, items = args
    out = []
    for i, (w, h) in items:
        name = f"{i:06d}"
        jpg, png = os.path.join(folder, "images", name + ".jpg"), os.path.join(folder, "masks", name + ".png")
        image, objects, mask = _photo_scene(i, (w, h))
        if not os.path.exists(jpg):
            Image.fromarray(image).save(jpg, quality=90)
        if not os.path.exists(png):
            with open(png, "wb") as f:
                f.write(mask_bytes(mask))
        out.append(
            {
                "i": i,
                "name": name,
                "width": w,
                "height": h,
                "boxes": objects.boxes.tolist(),
                "labels": objects.labels.tolist(),
            }
        )
    return out


def make_data(out: str, n: int, procs: int, quick: bool = False) -> tuple[str, str]:
    """The COCO-style folder and the shards of ``n`` images (written once; reused when present)."""
    from shardkit.demo.sampledata import IMAGENET_LIKE, SizeSpread, _sizes
    from shardkit.demo.scenes import CLASSES

    folder, shards = os.path.join(out, "coco"), os.path.join(out, "shards")
    ann = os.path.join(folder, "annotations.json")
    if os.path.exists(ann) and os.path.exists(os.path.join(shards, "manifest.json")):
        return folder, shards
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    os.makedirs(os.path.join(folder, "masks"), exist_ok=True)
    spread = SizeSpread(median=(160, 120), sigma=0.2, min_side=96, max_side=240) if quick else IMAGENET_LIKE
    sizes = _sizes(np.random.default_rng(24), n, spread)
    items = list(enumerate(sizes))
    chunks = [(folder, items[k::procs]) for k in range(procs)]
    if procs == 1:
        parts = [_write_chunk(chunks[0])]
    else:
        with mp.get_context("fork").Pool(procs) as pool:
            parts = pool.map(_write_chunk, chunks)
    records = sorted((r for part in parts for r in part), key=lambda r: r["i"])
    coco: dict[str, Any] = {
        "images": [
            {"id": r["i"], "file_name": r["name"] + ".jpg", "width": r["width"], "height": r["height"]} for r in records
        ],
        "annotations": [],
        "categories": [{"id": c, "name": name} for c, name in enumerate(CLASSES) if c],
    }
    for r in records:
        for b, c in zip(r["boxes"], r["labels"]):
            x0, y0, x1, y1 = b
            coco["annotations"].append(
                {
                    "id": len(coco["annotations"]) + 1,
                    "image_id": r["i"],
                    "category_id": c,
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "iscrowd": 0,
                }
            )
    with open(ann, "w") as f:
        json.dump(coco, f)
    _write_shards(folder, shards, records)
    return folder, shards


def _write_shards(folder: str, dest: str, records: list[dict], shard_size: int = 250) -> None:
    """The same JPEG bytes, boxes and masks as shards (``shardkit.format``: ``EncodedSample(objects=, mask=)``)."""
    from shardkit.demo.scenes import CLASSES
    from shardkit.format import EncodedSample, write_shard
    from shardkit.format.fields import Objects
    from shardkit.format.manifest import Manifest, ShardInfo, save_manifest

    os.makedirs(dest, exist_ok=True)
    shards = []
    for start in range(0, len(records), shard_size):
        samples = []
        for r in records[start : start + shard_size]:
            with open(os.path.join(folder, "images", r["name"] + ".jpg"), "rb") as f:
                jpeg = f.read()
            with open(os.path.join(folder, "masks", r["name"] + ".png"), "rb") as f:
                png = f.read()
            n = len(r["labels"])
            objects = Objects(
                np.asarray(r["boxes"], np.float32).reshape(n, 4), np.asarray(r["labels"], np.int64), np.zeros(n, bool)
            )
            meta = {"width": r["width"], "height": r["height"]}
            samples.append(EncodedSample(r["name"], jpeg, None, meta, objects=objects, mask=png))
        name = f"train-{len(shards):06d}.tar"
        with open(os.path.join(dest, name), "wb") as fh:
            cnt, nbytes, sha = write_shard(samples, fh)
        shards.append(ShardInfo(name=name, samples=cnt, bytes=nbytes, sha256=sha))
    manifest = Manifest(
        split="train",
        classes=list(CLASSES),
        shards=shards,
        options={"source": "tools/bench_detection.py"},
        shardkit_version="bench",
        fields=["image", "boxes", "mask"],
    )
    save_manifest(manifest, dest)


# ----------------------------------------------------------------------------- torchvision pipelines (in the child)


class CocoBoxes:
    """A map-style dataset: the source JPEGs and their COCO boxes as ``tv_tensors``, through a v2 pipeline."""

    def __init__(self, folder: str, transform: Any, pil: bool = False) -> None:
        self.pil = pil
        with open(os.path.join(folder, "annotations.json")) as f:
            coco = json.load(f)
        by_image: dict[int, list[dict]] = {}
        for a in coco["annotations"]:
            by_image.setdefault(a["image_id"], []).append(a)
        self.items = []
        for im in coco["images"]:
            anns = by_image.get(im["id"], [])
            boxes = np.asarray([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)], np.float32)
            labels = np.asarray([a["category_id"] for a in anns], np.int64)
            self.items.append((os.path.join(folder, "images", im["file_name"]), boxes.reshape(-1, 4), labels))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        import torch
        from torchvision import io as tvio
        from torchvision import tv_tensors

        path, boxes, labels = self.items[i]
        if self.pil:
            from PIL import Image

            image: Any = Image.open(path).convert("RGB")
            canvas = (image.height, image.width)
        else:
            image = tv_tensors.Image(tvio.decode_jpeg(tvio.read_file(path), mode=tvio.ImageReadMode.RGB))
            canvas = tuple(image.shape[-2:])
        sample = {
            "image": image,
            "boxes": tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY", canvas_size=canvas),
            "labels": torch.from_numpy(labels),
        }
        return self.transform(sample)


class MaskPairs:
    """A map-style dataset: the source JPEGs and their PNG masks as ``tv_tensors.Image`` + ``Mask``."""

    def __init__(self, folder: str, transform: Any, pil: bool = False) -> None:
        self.pil = pil
        names = sorted(f[:-4] for f in os.listdir(os.path.join(folder, "images")))
        self.items = [
            (os.path.join(folder, "images", n + ".jpg"), os.path.join(folder, "masks", n + ".png")) for n in names
        ]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        import torch
        from torchvision import io as tvio
        from torchvision import tv_tensors

        jpg, png = self.items[i]
        if self.pil:
            from PIL import Image

            return self.transform(
                {
                    "image": Image.open(jpg).convert("RGB"),
                    "mask": tv_tensors.Mask(torch.from_numpy(np.array(Image.open(png)))),
                }
            )
        image = tvio.decode_jpeg(tvio.read_file(jpg), mode=tvio.ImageReadMode.RGB)
        mask = tvio.decode_png(tvio.read_file(png))[0]
        return self.transform({"image": tv_tensors.Image(image), "mask": tv_tensors.Mask(mask)})


def pad_boxes(samples: list[dict]) -> dict:
    """Collate: images stacked; boxes padded to the most in the batch, ``box_labels`` -1 beyond each count."""
    import torch

    counts = [len(s["labels"]) for s in samples]
    m = max(counts, default=0)
    boxes = torch.zeros((len(samples), m, 4), dtype=torch.float32)
    labels = torch.full((len(samples), m), -1, dtype=torch.int64)
    for i, s in enumerate(samples):
        boxes[i, : counts[i]] = s["boxes"]
        labels[i, : counts[i]] = s["labels"]
    images = torch.stack([s["image"].as_subclass(torch.Tensor) for s in samples])
    return {"image": images, "boxes": boxes, "box_labels": labels, "box_count": torch.tensor(counts)}


def stack_masks(samples: list[dict]) -> dict:
    import torch

    return {
        "image": torch.stack([s["image"].as_subclass(torch.Tensor) for s in samples]),
        "mask": torch.stack([s["mask"].as_subclass(torch.Tensor) for s in samples]),
    }


def torchvision_loader(kind: str, opts: dict):
    import torch
    from torchvision.transforms import v2

    pil = kind.endswith("-pil")
    last = [v2.ToImage()] if pil else []  # PIL images until the end, then a tensor (torchvision's references)
    if kind.startswith("det"):
        transform = v2.Compose(
            [
                v2.ScaleJitter((SIZE, SIZE), scale_range=(0.5, 1.5), antialias=True),
                v2.RandomCrop(SIZE, pad_if_needed=True),
                v2.RandomHorizontalFlip(),
                v2.SanitizeBoundingBoxes(),
                *last,
            ]
        )
        ds: Any = CocoBoxes(opts["folder"], transform, pil)
        collate = pad_boxes
    else:
        transform = v2.Compose([v2.RandomResizedCrop(SIZE, antialias=True), v2.RandomHorizontalFlip(), *last])
        ds = MaskPairs(opts["folder"], transform, pil)
        collate = stack_masks
    workers = opts["workers"]
    return torch.utils.data.DataLoader(
        ds,
        batch_size=opts["batch_size"],
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        drop_last=True,
        collate_fn=collate,
    )


# ----------------------------------------------------------------------------- the child


def _check(kind: str, batch: dict, batch_size: int) -> None:
    """The first batch has the structure both sides must deliver."""
    import torch

    want = DET_FIELDS if kind.startswith("det") else SEG_FIELDS
    if tuple(batch) != want:
        raise SystemExit(f"{kind}: fields {tuple(batch)}, want {want}")
    img = batch["image"]
    if tuple(img.shape) != (batch_size, 3, SIZE, SIZE) or img.dtype != torch.uint8:
        raise SystemExit(f"{kind}: image {tuple(img.shape)} {img.dtype}")
    if kind.startswith("det"):
        b, lab, cnt = batch["boxes"], batch["box_labels"], batch["box_count"]
        live = lab >= 0
        if not torch.equal(live.sum(1), cnt) or int(cnt.sum()) == 0:
            raise SystemExit(f"{kind}: box_count {cnt.tolist()} disagrees with the labels")
        bl = b[live]
        if bool((bl[:, :2] < 0).any() or (bl[:, 2:] > SIZE).any() or (bl[:, 2:] <= bl[:, :2]).any()):
            raise SystemExit(f"{kind}: a box outside the image or empty")
    else:
        m = batch["mask"]
        if tuple(m.shape) != (batch_size, SIZE, SIZE) or m.dtype != torch.uint8:
            raise SystemExit(f"{kind}: mask {tuple(m.shape)} {m.dtype}")


def child(opts: dict) -> dict:
    """One measurement: img/s over ``batches`` batches after one start-up batch per worker."""
    kind, workers, batches = opts["kind"], opts["workers"], opts["batches"]
    if not kind.endswith("shardkit"):
        dl = torchvision_loader(kind, opts)

        def epochs():
            while True:
                yield from dl

        loader = None
    else:
        import shardkit

        loader = shardkit.load(
            opts["shards"],
            fields=DET_FIELDS if kind.startswith("det") else SEG_FIELDS,
            preset="detect" if kind.startswith("det") else "train",
            size=SIZE,
            batch_size=opts["batch_size"],
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=False,
            drop_last=True,
        )

        def epochs():
            e = 0
            while True:
                loader.set_epoch(e)
                yield from loader
                e += 1

    it = epochs()
    _check(kind, next(it), opts["batch_size"])
    for _ in range(max(0, workers - 1)):  # the rest of the start-up batches (one per worker)
        next(it)
    n, t0 = 0, time.perf_counter()
    for _ in range(batches):
        n += len(next(it)["image"])
    out: dict = {"img_s": n / (time.perf_counter() - t0)}
    if loader is not None:
        out["report"] = loader.report()
    return out


# ----------------------------------------------------------------------------- the parent


def run_child(opts: dict, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(opts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        return {"error": last[0][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def in_process(opts: dict) -> dict:
    """One measurement in this process (``--quick``: no child start-up; the figures mean nothing)."""
    try:
        return child(opts)
    except (Exception, SystemExit) as exc:  # reported like a child's last line
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5, help="rounds (each pipeline once per round, interleaved)")
    ap.add_argument("--batches", type=int, default=20, help="timed batches per measurement")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default="/tmp/skbench-det", help="data folder (written once, reused)")
    ap.add_argument("--procs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="processes making data")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ", ".join(KINDS))
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 16 small images, 1 round, 1 batch of 4, in process"
    )
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))))
        return 0
    if a.quick:
        a.images, a.runs, a.batches, a.batch_size, a.workers, a.procs = 16, 1, 1, 4, 0, 1
        if a.out == "/tmp/skbench-det":
            a.out = "/tmp/skbench-det-quick"
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise SystemExit(f"--kinds: unknown {bad} (known: {', '.join(KINDS)})")
    t0 = time.perf_counter()
    folder, shards = make_data(a.out, a.images, a.procs, quick=a.quick)
    print(f"data: {a.images} images under {a.out} ({time.perf_counter() - t0:.0f} s)", flush=True)
    rounds: list[dict[str, dict]] = []
    for r in range(a.runs):
        got: dict[str, dict] = {}
        for kind in kinds:
            opts = {
                "kind": kind,
                "workers": a.workers,
                "batches": a.batches,
                "batch_size": a.batch_size,
                "folder": folder,
                "shards": shards,
            }
            got[kind] = in_process(opts) if a.quick else run_child(opts, timeout=600)
            shown = got[kind].get("img_s")
            print(
                f"round {r + 1}/{a.runs} {kind}: " + (f"{shown:.1f} img/s" if shown else got[kind]["error"]), flush=True
            )
        rounds.append(got)
    summary = summarise(rounds, kinds)
    print(table(summary, a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rounds, "summary": summary}, f, indent=1)
    return 0


def summarise(rounds: list[dict[str, dict]], kinds: list[str]) -> dict:
    """Medians of img/s per pipeline and of the per-round ratios shardkit / torchvision per task."""
    out: dict[str, Any] = {}
    for kind in kinds:
        vals = [r[kind]["img_s"] for r in rounds if "img_s" in r[kind]]
        errors = [r[kind]["error"] for r in rounds if "error" in r[kind]]
        out[kind] = {"img_s": statistics.median(vals) if vals else None, "error": errors[0] if errors else None}
    for task in ("det", "seg"):
        for base in BASELINES:
            a, b = f"{task} shardkit", f"{task} {base}"
            ratios = [
                r[a]["img_s"] / r[b]["img_s"]
                for r in rounds
                if a in r and b in r and "img_s" in r[a] and "img_s" in r[b]
            ]
            out[f"{task} ratio {base}"] = statistics.median(ratios) if ratios else None
    return out


def table(summary: dict, a: argparse.Namespace) -> str:
    lines = [
        f"| task (512 px, batch {a.batch_size}, {a.workers} workers, medians of {a.runs}) | torchvision v2, PIL decode "
        "img/s | torchvision v2, decode_jpeg img/s | shardkit img/s | shardkit / PIL pipeline "
        "| shardkit / decode_jpeg pipeline |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "det": "detection: scale jitter + crop/pad + flip, boxes",
        "seg": "segmentation: RandomResizedCrop + flip, mask",
    }
    for task, name in names.items():
        cells = []
        for side in (*BASELINES, "shardkit"):
            s = summary.get(f"{task} {side}")
            if s is None or (not s["img_s"] and not s["error"]):
                cells.append("-")
            else:
                cells.append(f"{s['img_s']:.0f}" if s["img_s"] else f"error: {s['error']}")
        for base in BASELINES:
            ratio = summary.get(f"{task} ratio {base}")
            cells.append("-" if ratio is None else f"{ratio:.1f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
