"""Benchmark: `shardkit convert` against a plain one-process PIL + webdataset.ShardWriter loop.

Usage::

    .venv/bin/python tools/bench_convert.py                 # 480 generated ImageNet-like JPEGs, 3 runs
    .venv/bin/python tools/bench_convert.py --src /data/imagenet/val --limit 2000 --workers 1 2 4 8

All variants process the same images in one run and produce the same kind
of output (shorter side 256, JPEG q90, tar shards); the figure is the median
of ``--runs`` interleaved timed runs (images per second, wall clock, including
pool start-up). Every variant runs once untimed first, so one-time imports
(torch: ~2.7 s once per conversion, in the forkserver for ``--workers N``) and
the page cache are warm. Ablations, all ``--workers 1``:

* "Pillow only": shardkit with its fast path off (Pillow decode, resize and
  encode, as before the torch/simplejpeg path existed);
* "draft off": ``Image.draft`` disabled, to show what DCT-scaled decoding is worth.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time


def plain_loop(files: list[tuple[str, int]], out: str, short_side: int = 256, quality: int = 90) -> None:
    """The baseline: PIL open -> resize shorter side -> save JPEG -> webdataset.ShardWriter, one process.

    It resizes with the same filter as shardkit's default (antialiased bilinear), so the ratio measures
    the pipeline (draft decoding, no wasted work), not a cheaper filter.
    """
    import webdataset as wds
    from PIL import Image

    os.makedirs(out, exist_ok=True)
    with wds.ShardWriter(os.path.join(out, "train-%06d.tar"), maxsize=256 * 1024 * 1024, verbose=0) as sink:
        for i, (path, label) in enumerate(files):
            im = Image.open(path).convert("RGB")
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


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", help="an ImageFolder to use (default: generate one)")
    p.add_argument("--images", type=int, default=480, help="images to generate (default 480)")
    p.add_argument("--size", choices=["imagenet", "photo"], default="imagenet",
                   help="generated image sizes: imagenet (median 500x375) or photo (median 1600x1200)")
    p.add_argument("--limit", type=int, default=None, help="use at most this many images of --src")
    p.add_argument("--runs", type=int, default=3, help="timed runs per variant; the median is reported (default 3)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="shardkit --workers values (default 1 2)")
    args = p.parse_args(argv)

    from shardkit.convert import ConvertOptions, convert
    from shardkit.sampledata import IMAGENET_LIKE, SizeSpread, make_imagefolder

    spread = IMAGENET_LIKE if args.size == "imagenet" else SizeSpread(median=(1600, 1200), sigma=0.25, min_side=256, max_side=4000)

    work = tempfile.mkdtemp(prefix="bench-convert-")
    try:
        src = args.src
        if src is None:
            src = os.path.join(work, "src")
            t0 = time.perf_counter()
            make_imagefolder(src, num_classes=8, per_class=max(1, args.images // 8), spread=spread, seed=0)
            print(f"generated {args.images} {args.size} JPEGs (median {spread.median[0]}x{spread.median[1]}) "
                  f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        if args.limit:
            limited = os.path.join(work, "limited")
            for path, label in list_files(src, args.limit):
                rel = os.path.relpath(path, src)
                os.makedirs(os.path.dirname(os.path.join(limited, rel)), exist_ok=True)
                os.symlink(os.path.abspath(path), os.path.join(limited, rel))
            src = limited
        files = list_files(src, None)
        n = len(files)
        src_mb = sum(os.path.getsize(f) for f, _ in files) / 1e6
        dest = os.path.join(work, "out")

        def fresh() -> str:
            shutil.rmtree(dest, ignore_errors=True)
            return dest

        def run_shardkit(workers: int) -> None:
            convert(src, fresh(), ConvertOptions(), workers=workers, quiet=True)

        from PIL import JpegImagePlugin

        real_draft = JpegImagePlugin.JpegImageFile.draft

        def no_draft() -> None:
            JpegImagePlugin.JpegImageFile.draft = lambda self, mode, size: None  # type: ignore[method-assign]
            try:
                run_shardkit(1)
            finally:
                JpegImagePlugin.JpegImageFile.draft = real_draft  # type: ignore[method-assign]

        variants = [("plain loop (1 process)", 1, lambda: plain_loop(files, fresh()))]
        variants += [(f"shardkit convert --workers {w}", w, lambda w=w: run_shardkit(w)) for w in args.workers]
        from shardkit.convert import imageproc

        def pillow_only() -> None:
            real_fast = imageproc._fast
            imageproc._fast = lambda: None  # type: ignore[assignment]
            try:
                run_shardkit(1)
            finally:
                imageproc._fast = real_fast  # type: ignore[assignment]

        variants.append(("shardkit --workers 1, Pillow only", 1, pillow_only))
        variants.append(("shardkit --workers 1, draft off", 1, no_draft))
        for _, _, fn in variants:  # warm-up: imports (torch), forkserver, page cache
            fn()
        times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for _ in range(args.runs):  # interleaved, so background load hits every variant alike
            for name, _, fn in variants:
                times[name].append(timed(fn, 1))
        rows = [(name, cores, statistics.median(times[name])) for name, cores, _ in variants]
        base = n / rows[0][2]
        w1 = n / rows[1][2] if args.workers[0] == 1 else None
        print(f"{n} images, {src_mb:.1f} MB, {os.cpu_count()} CPUs, median of {args.runs} runs")
        print(f"{'variant':34s} {'seconds':>8s} {'img/s':>8s} {'img/s/core':>10s} {'vs loop/core':>12s} {'vs w1':>6s}")
        for name, cores, sec in rows:
            ips = n / sec
            vs_w1 = f"{ips / w1:6.2f}" if w1 and name.startswith("shardkit convert") else ""
            print(f"{name:34s} {sec:8.2f} {ips:8.1f} {ips / cores:10.1f} {ips / cores / base:12.2f} {vs_w1:>6s}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
