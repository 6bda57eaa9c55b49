"""``shardkit bench URL``: the loader doctor (throughput, per-stage costs, worker sweep, decode ceiling)."""

from __future__ import annotations

import argparse
import sys

from . import add_storage_arguments, positive_int, storage_options

HELP = "measure the loader on a dataset: img/s, MB/s, per-stage breakdown, worker sweep, decode-only ceiling"


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 0,1,2, got {text!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError("worker counts must be >= 0")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="URL", help="dataset split directory or manifest.json (path or fsspec URL)")
    p.add_argument("--workers", type=_int_list, default=[0, 1, 2], help="worker counts to sweep (default 0,1,2)")
    p.add_argument("--batches", type=positive_int, default=30, help="batches measured per worker count (default 30)")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--preset", choices=["train", "eval"], default="train")
    p.add_argument("--size", type=int, default=224, help="output image size (default 224)")
    p.add_argument("--plot", metavar="PNG", help="also save a plot (needs matplotlib)")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ..loader.bench import bench, plot

    so = storage_options(args)
    opts = {"storage_options": so} if so else {}
    report = bench(args.url, workers=args.workers, batches=args.batches, batch_size=args.batch_size, preset=args.preset, size=args.size, **opts)
    print(report.format())
    if args.plot:
        try:
            plot(report, args.plot)
            print(f"plot saved to {args.plot}")
        except ImportError:
            print("--plot needs matplotlib: pip install matplotlib (the numbers above are complete without it)", file=sys.stderr)
            return 1
    return 0
