"""Benchmark: appending 10 % more data against converting everything again.

Usage::

    .venv/bin/python tools/bench_append.py                       # 6,000 base images + 600 appended, 5 runs
    .venv/bin/python tools/bench_append.py --images 400 --runs 1  # a smoke check

The source is a generated ImageFolder (``shardkit.demo.sampledata.make_imagefolder``, small photos-like JPEGs):
``BASE`` (``--images``), ``NEW`` (``--fraction`` of that, other images of the same and one new class) and
``ALL`` (both, as symlinks). Each run times, interleaved (the order alternates run by run, so background load
hits both alike):

* **full**: converting ``ALL`` into an empty DEST;
* **append**: ``convert NEW DEST --append`` into a copy of ``BASE`` converted once (the copy is not timed):
  read the split's tables (keys, source hashes), encode and write the new generation, its tables and the
  manifest.

Two ways each: ``in-process`` (``shardkit.convert.convert`` with imports done once: the conversion's own work)
and ``cli`` (a fresh ``python -m shardkit convert`` process: interpreter, torch import and pool start-up
included, as a user waits). The figure is the median of ``--runs``; the ratio is append / full. The machine
this runs on is usually shared: report ratios, not seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_sources(root: str, images: int, fraction: float) -> tuple[str, str, str]:
    """``(BASE, NEW, ALL)`` folders under ``root``."""
    from shardkit.demo.sampledata import make_imagefolder

    classes = 4
    base = make_imagefolder(os.path.join(root, "base"), num_classes=classes, per_class=images // classes, seed=1)
    extra = max(1, round(images * fraction))
    new = make_imagefolder(os.path.join(root, "new"), num_classes=classes + 1, per_class=extra // (classes + 1), seed=2)
    union = os.path.join(root, "all")
    for src, tag in ((base, "a"), (new, "b")):
        for d, _, names in os.walk(src):
            for n in names:
                rel = os.path.relpath(os.path.join(d, n), src)
                out = os.path.join(union, os.path.dirname(rel), f"{tag}-{os.path.basename(rel)}")
                os.makedirs(os.path.dirname(out), exist_ok=True)
                os.symlink(os.path.abspath(os.path.join(d, n)), out)
    return base, new, union


def _timed_cli(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shardkit", "convert", *argv, "--quiet"], check=True, env=env,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=6000, help="images in the base dataset (default 6000)")
    ap.add_argument("--fraction", type=float, default=0.10, help="appended images per base image (default 0.10)")
    ap.add_argument("--runs", type=int, default=5, help="interleaved runs per variant (default 5)")
    ap.add_argument("--workers", type=int, default=2, help="encoding processes (default 2)")
    ap.add_argument("--no-cli", action="store_true", help="only the in-process figures")
    args = ap.parse_args()

    from shardkit.convert import ConvertConfig, EncodeConfig, convert

    opts = ConvertConfig(image=EncodeConfig(short_side=128))
    app = ConvertConfig(image=EncodeConfig(short_side=128), append=True)
    cli = ["--short-side", "128", "--workers", str(args.workers)]
    tmp = tempfile.mkdtemp(prefix="bench-append-")
    try:
        base, new, union = make_sources(os.path.join(tmp, "src"), args.images, args.fraction)
        converted = os.path.join(tmp, "base-converted")
        convert(base, converted, opts, workers=args.workers, quiet=True)
        convert(union, os.path.join(tmp, "warm"), opts, workers=args.workers, quiet=True)  # page cache, untimed
        times: dict[str, list[float]] = {k: [] for k in ("full", "append", "full-cli", "append-cli")}
        for run in range(args.runs):
            order = ["full", "append"] if run % 2 == 0 else ["append", "full"]
            for kind in order:
                dest = os.path.join(tmp, f"d-{run}-{kind}")
                if kind == "append":
                    shutil.copytree(converted, dest, symlinks=True)
                    t0 = time.perf_counter()
                    convert(new, dest, app, workers=args.workers, quiet=True)
                else:
                    t0 = time.perf_counter()
                    convert(union, dest, opts, workers=args.workers, quiet=True)
                times[kind].append(time.perf_counter() - t0)
                shutil.rmtree(dest)
            if args.no_cli:
                continue
            for kind in order:
                dest = os.path.join(tmp, f"c-{run}-{kind}")
                if kind == "append":
                    shutil.copytree(converted, dest, symlinks=True)
                    times["append-cli"].append(_timed_cli([new, dest, "--append", *cli]))
                else:
                    times["full-cli"].append(_timed_cli([union, dest, *cli]))
                shutil.rmtree(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n_new = max(1, round(args.images * args.fraction))
    print(f"base {args.images} images, appended ~{n_new}, --workers {args.workers}, {args.runs} interleaved runs")
    print(f"{'variant':<12} {'full s':>8} {'append s':>9} {'append/full':>12}")
    for label, f, a in (("in-process", "full", "append"), ("cli", "full-cli", "append-cli")):
        if not times[f]:
            continue
        mf, ma = statistics.median(times[f]), statistics.median(times[a])
        print(f"{label:<12} {mf:8.2f} {ma:9.2f} {ma / mf:12.3f}")


if __name__ == "__main__":
    main()
