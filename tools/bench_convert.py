"""Benchmark: `shardkit convert` against a plain one-process PIL + webdataset.ShardWriter loop, start-up included.

Usage::

    .venv/bin/python tools/bench_convert.py                 # 3,000 generated ImageNet-like JPEGs, 3 runs
    .venv/bin/python tools/bench_convert.py --src /data/imagenet/val --limit 2000 --workers 1 2 4 8
    .venv/bin/python tools/bench_convert.py --images 80 --runs 1   # a smoke check
    .venv/bin/python tools/bench_convert.py --before ../old-checkout  # before/after, interleaved

Every variant runs as a fresh process (``python -m shardkit convert ... --quiet``;
the loop as ``python tools/bench_convert.py --loop SRC DEST``), so its figure
includes everything a user waits for: interpreter and imports (torch, once per
conversion), the process pool, the pilot, discovery, writing and the manifest.
The variants of one run are interleaved (loop, ``--workers 1``, ``--workers 2``,
...), so background load hits them alike; the figure is the median of ``--runs``.
One untimed round first warms the page cache. The table reports seconds, img/s,
the speed-up over the loop and over ``--workers 1`` (of the same checkout); then
the start-up: the seconds to convert the first ``--startup-images`` (10) images.
``--before DIR`` adds the same ``--workers`` variants run from another checkout.

``--ablations`` adds, in this process and warm (no start-up), ``--workers 1``
with the fast path off ("Pillow only") and with ``Image.draft`` off.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def plain_loop(files: list[tuple[str, int]], out: str, short_side: int = 256, quality: int = 90) -> None:
    """The baseline: PIL open -> EXIF orientation -> RGB -> resize shorter side -> save JPEG -> webdataset.ShardWriter, one process.

    It resizes with the same filter as shardkit's default (antialiased bilinear), so the ratio measures
    the pipeline (draft decoding, no wasted work), not a cheaper filter.
    """
    import webdataset as wds
    from PIL import Image, ImageOps

    os.makedirs(out, exist_ok=True)
    with wds.ShardWriter(os.path.join(out, "train-%06d.tar"), maxsize=256 * 1024 * 1024, verbose=0) as sink:
        for i, (path, label) in enumerate(files):
            im = Image.open(path)
            im = (ImageOps.exif_transpose(im) or im).convert("RGB")
            w, h = im.size
            s = short_side / min(w, h)
            if s < 1:
                im = im.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.BILINEAR)
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=quality)
            sink.write({"__key__": f"{i:08d}", "jpg": buf.getvalue(), "cls": str(label).encode()})


def list_files(src: str, limit: int | None) -> list[tuple[str, int]]:
    classes = sorted(e.name for e in os.scandir(src) if e.is_dir())
    files = []
    for label, c in enumerate(classes):
        for d, _, names in os.walk(os.path.join(src, c)):
            files += [(os.path.join(d, n), label) for n in sorted(names)]
    files.sort()
    return files[:limit] if limit else files


def limited_copy(src: str, dest: str, limit: int) -> str:
    """An ImageFolder of symlinks to the first ``limit`` images of ``src``."""
    for path, _ in list_files(src, limit):
        rel = os.path.relpath(path, src)
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        os.symlink(os.path.abspath(path), os.path.join(dest, rel))
    return dest


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fresh_run(argv: list[str], dest: str, root: str = HERE) -> float:
    """Seconds a fresh ``python ARGV`` takes (``dest`` emptied first), importing shardkit from checkout ``root``."""
    shutil.rmtree(dest, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    t0 = time.perf_counter()
    # cwd=root too: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH
    subprocess.run([sys.executable, *argv], check=True, env=env, stdout=subprocess.DEVNULL, cwd=root)
    return time.perf_counter() - t0


def shardkit_argv(src: str, dest: str, workers: int) -> list[str]:
    return ["-m", "shardkit", "convert", src, dest, "--workers", str(workers), "--quiet"]


def ablations(src: str, dest: str, n: int, runs: int) -> None:
    """``--workers 1`` in this process (warm): as shipped, Pillow only, and draft decoding off."""
    from PIL import JpegImagePlugin

    from shardkit.convert import ConvertConfig, convert, imageproc

    def run() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        convert(src, dest, ConvertConfig(), workers=1, quiet=True)

    def pillow_only() -> None:
        real = imageproc._fast
        imageproc._fast = lambda: None  # type: ignore[assignment]
        try:
            run()
        finally:
            imageproc._fast = real  # type: ignore[assignment]

    def no_draft() -> None:
        real = JpegImagePlugin.JpegImageFile.draft
        JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None  # type: ignore[method-assign]
        try:
            run()
        finally:
            JpegImagePlugin.JpegImageFile.draft = real  # type: ignore[method-assign]

    variants = [
        ("--workers 1 (warm)", run),
        ("--workers 1, Pillow only", pillow_only),
        ("--workers 1, draft off", no_draft),
    ]
    for _, fn in variants:
        fn()
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for _ in range(runs):
        for name, fn in variants:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"\nablations (in-process, warm, median of {runs}):")
    for name, _ in variants:
        sec = statistics.median(times[name])
        print(f"  {name:32s} {sec:8.2f} s {n / sec:8.1f} img/s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", help="an ImageFolder to use (default: generate one)")
    p.add_argument("--images", type=int, default=3000, help="images to generate (default 3000)")
    p.add_argument(
        "--size",
        choices=["imagenet", "photo"],
        default="imagenet",
        help="generated image sizes: imagenet (median 500x375) or photo (median 1600x1200)",
    )
    p.add_argument("--limit", type=int, default=None, help="use at most this many images of --src")
    p.add_argument("--runs", type=int, default=3, help="timed runs per variant; the median is reported (default 3)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="shardkit --workers values (default 1 2)")
    p.add_argument("--startup-images", type=int, default=10, help="images for the start-up figure (default 10)")
    p.add_argument(
        "--before",
        metavar="DIR",
        help="also time --workers N of the shardkit checkout in DIR (before/after, interleaved)",
    )
    p.add_argument(
        "--ablations", action="store_true", help="also time the fast-path and draft ablations (warm, in-process)"
    )
    p.add_argument("--loop", nargs=2, metavar=("SRC", "DEST"), help=argparse.SUPPRESS)  # one plain-loop run (a variant)
    args = p.parse_args(argv)
    if args.loop:
        plain_loop(list_files(args.loop[0], None), args.loop[1])
        return 0

    from shardkit.demo.sampledata import IMAGENET_LIKE, SizeSpread, make_imagefolder

    spread = (
        IMAGENET_LIKE
        if args.size == "imagenet"
        else SizeSpread(median=(1600, 1200), sigma=0.25, min_side=256, max_side=4000)
    )
    work = tempfile.mkdtemp(prefix="bench-convert-")
    try:
        src = os.path.abspath(args.src) if args.src else None
        if src is None:
            src = os.path.join(work, "src")
            t0 = time.perf_counter()
            make_imagefolder(src, num_classes=8, per_class=max(1, args.images // 8), spread=spread, seed=0)
            print(
                f"generated {args.images} {args.size} JPEGs (median {spread.median[0]}x{spread.median[1]}) "
                f"in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
        if args.limit:
            src = limited_copy(src, os.path.join(work, "limited"), args.limit)
        small = limited_copy(src, os.path.join(work, "small"), args.startup_images)
        files = list_files(src, None)
        n = len(files)
        src_mb = sum(os.path.getsize(f) for f, _ in files) / 1e6
        dest = os.path.join(work, "out")
        me = os.path.abspath(__file__)
        here, before = HERE, os.path.abspath(args.before) if args.before else None
        variants = [("plain loop (1 process)", [me, "--loop", src, dest], here)]
        variants += [(f"shardkit convert --workers {w}", shardkit_argv(src, dest, w), here) for w in args.workers]
        startup = [(f"--workers {w}", shardkit_argv(small, dest, w), here) for w in args.workers]
        if before:
            variants += [(f"before: --workers {w}", shardkit_argv(src, dest, w), before) for w in args.workers]
            startup += [(f"before's --workers {w}", shardkit_argv(small, dest, w), before) for w in args.workers]
        for _, cmd, root in variants + startup:  # warm-up: page cache (each timed run still starts a fresh process)
            fresh_run(cmd, dest, root)
        times: dict[str, list[float]] = {name: [] for name, _, _ in variants + startup}
        for _ in range(args.runs):  # interleaved, so background load hits every variant alike
            for name, cmd, root in variants + startup:
                times[name].append(fresh_run(cmd, dest, root))
        sec = {name: statistics.median(t) for name, t in times.items()}
        loop = sec[variants[0][0]]
        w1 = sec.get("shardkit convert --workers 1")
        print(
            f"{n} images, {src_mb:.1f} MB, {os.cpu_count()} CPUs, median of {args.runs} fresh-process runs (start-up included)"
        )
        print(f"{'variant':32s} {'seconds':>8s} {'img/s':>8s} {'vs loop':>8s} {'vs w1':>6s}")
        w1_before = sec.get("before: --workers 1")
        for name, _, _ in variants:
            base = w1_before if name.startswith("before") else w1
            vs_w1 = f"{base / sec[name]:6.2f}" if base and name != variants[0][0] else ""
            print(f"{name:32s} {sec[name]:8.2f} {n / sec[name]:8.1f} {loop / sec[name]:8.2f} {vs_w1:>6s}")
        print(
            f"start-up: converting {args.startup_images} images takes "
            + ", ".join(f"{sec[name]:.2f} s with {name}" for name, _, _ in startup)
        )
        if args.ablations:
            ablations(src, dest, n, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
