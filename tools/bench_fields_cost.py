"""What the fields beside the label cost the single-label path: the loader before any fields code against HEAD.

    python tools/bench_fields_cost.py --images 3000 --workers 2 0 --runs 5 --out /tmp/skfields

``--before REV`` (default ``175a97a``: the on-disk contract for fields, before any loader or convert code
for them) is exported with ``git archive`` into ``OUT/before-REV`` (untouched if there); ``--after`` is a
checkout (default: this one). Two datasets of the same ImageNet-sized photos (``tools/bench_loader.py``'s
generator), both re-encoded at short side 256 with ``--shard-size``:

- ``single``: an ImageFolder converted by the *before* checkout (classes, ``.cls``): what every existing dataset is;
- ``fields``: a CSV listing of the same images with a ``tags`` column (the class and 0-3 more, ``;``-separated)
  and a ``caption`` column, converted by the *after* checkout (``--label-col tags --label-sep ';'
  --text-col caption``): fields ``labels`` and ``text``.

Each measurement is a fresh process with ``PYTHONPATH`` set to one checkout: ``shardkit.load(shards,
batch_size=64, num_workers=W, persistent_workers=W > 0, pin_memory=False[, fields=...])``, one untimed
warm-up epoch, then ``--epochs`` timed epochs. Per round, interleaved:

- ``before``: default ``(images, labels)`` batches on ``single``;
- ``after``: the same, with the after checkout (the single-label path: the cost asked about);
- ``after fields=(image,label)``: dict batches on ``single``;
- ``after fields=(image,labels,text)``: dict batches on ``fields`` (multi-hot tensors and caption lists).

The table gives medians of img/s over ``--runs`` rounds and the medians of the per-round ratios to ``before``.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loader import _make_class  # noqa: E402  (the ImageNet-like photo generator)

CHILD = r"""
import json, sys, time
import shardkit
shards, workers, epochs, fields = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
opts = {"fields": tuple(fields)} if fields else {}
loader = shardkit.load(shards, batch_size=64, num_workers=workers, persistent_workers=workers > 0, pin_memory=False, **opts)
for _ in loader:
    pass
n, t = 0, time.perf_counter()
for _ in range(epochs):
    for b in loader:
        n += len(b["image"] if fields else b[0])
print(json.dumps({"img_s": n / (time.perf_counter() - t)}))
loader.close()
"""

CLI = "import sys; from shardkit.cli import main; sys.exit(main(sys.argv[1:]))"


def run_in(tree: str, args: list[str], what: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    # cwd=tree: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH
    r = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=1800, cwd=os.path.abspath(tree)
    )
    if r.returncode:
        raise SystemExit(f"{tree}: {what} failed:\n{r.stdout[-1500:]}{r.stderr[-2000:]}")
    return r.stdout


def export(rev: str, out: str) -> str:
    """``git archive REV`` of the repository this tool lives in, extracted under ``out``."""
    dest = os.path.join(out, f"before-{rev}")
    if not os.path.exists(os.path.join(dest, "shardkit", "__init__.py")):
        os.makedirs(dest, exist_ok=True)
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        archive = subprocess.run(["git", "-C", repo, "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def make_data(out: str, n: int, per_shard: int, procs: int, before: str, after: str) -> tuple[str, str]:
    """Photos; ``single`` converted by ``before`` from an ImageFolder, ``fields`` by ``after`` from a CSV."""
    from shardkit.demo.sampledata import class_names

    src = os.path.join(out, "images")
    names = class_names(8)
    with mp.get_context("fork").Pool(procs) as pool:
        pool.map(_make_class, [(src, i, c, n // len(names), 0) for i, c in enumerate(names)])
    single, fields = os.path.join(out, "single"), os.path.join(out, "fields")
    common = ["--shard-size", str(per_shard), "--workers", str(procs)]
    if not os.path.exists(os.path.join(single, "manifest.json")):
        run_in(before, ["-c", CLI, "convert", src, single, *common], "convert (before)")
    if not os.path.exists(os.path.join(fields, "manifest.json")):
        listing = os.path.join(out, "tags.csv")
        rng = np.random.default_rng(1)
        with open(listing, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["path", "tags", "caption"])
            for c in names:
                for f in sorted(os.listdir(os.path.join(src, c))):
                    extra = rng.choice([x for x in names if x != c], size=int(rng.integers(0, 4)), replace=False)
                    caption = f"a {c} " + " ".join(rng.choice(names, size=int(rng.integers(2, 20))))
                    w.writerow([f"images/{c}/{f}", ";".join([c, *extra]), caption])
        tags = ["--label-col", "tags", "--label-sep", ";", "--text-col", "caption"]
        run_in(after, ["-c", CLI, "convert", listing, fields, *tags, *common], "convert (after)")
    return _split(single), _split(fields)


def _split(dest: str) -> str:
    return os.path.join(dest, "train") if os.path.exists(os.path.join(dest, "train", "manifest.json")) else dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="175a97a", help="git revision of 'before' (default 175a97a)")
    ap.add_argument("--after", default=".", help="checkout whose shardkit is 'after' (default: this one)")
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--per-shard", type=int, default=250)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 0])
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per measurement")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="/tmp/skfields")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="processes for making data")
    a = ap.parse_args()
    if a.images < 8 or a.per_shard < 1 or a.runs < 1 or a.epochs < 1 or min(a.workers) < 0:
        ap.error("--images >= 8, --per-shard, --runs, --epochs >= 1, --workers >= 0")
    before = export(a.before, a.out)
    single, fields = make_data(a.out, a.images, a.per_shard, a.procs, before, a.after)

    configs = {
        "before": (before, single, None),
        "after": (a.after, single, None),
        "after fields=(image,label)": (a.after, single, ["image", "label"]),
        "after fields=(image,labels,text)": (a.after, fields, ["image", "labels", "text"]),
    }
    res: dict[tuple[int, str], list[float]] = {}
    for r in range(a.runs):
        for w in a.workers:
            for name, (tree, shards, flds) in configs.items():
                out = run_in(tree, ["-c", CHILD, shards, str(w), str(a.epochs), json.dumps(flds)], name)
                v = json.loads(out.strip().splitlines()[-1])["img_s"]
                res.setdefault((w, name), []).append(v)
                print(f"round {r}: workers {w} {name:<33} {v:>7.0f} img/s", flush=True)
    load = os.getloadavg()
    print(
        f"\n{a.images} images, batch 64, {a.epochs} timed epoch(s) after a warm-up, medians of {a.runs} "
        f"interleaved rounds, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
    )
    print("| workers | loader | img/s | / before |")
    print("|---:|---|---:|---:|")
    for w in a.workers:
        base = res[(w, "before")]
        for name in configs:
            v = res[(w, name)]
            ratio = statistics.median(x / y for x, y in zip(v, base))
            print(f"| {w} | {name} | {statistics.median(v):.0f} | {ratio:.2f} |")
    print(f"\ncommand: python tools/bench_fields_cost.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
