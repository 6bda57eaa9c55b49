"""``shardkit show URL``: a grid of samples, or of one training batch, as a PNG (maps to :func:`shardkit.viz.show`)."""

from __future__ import annotations

import argparse
from typing import Any

HELP = (
    "draw a grid of samples (boxes with class names, masks, keypoints, labels, captions) into a PNG; with "
    "--preset, one batch exactly as the loader yields it"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments

    p.add_argument("url", metavar="URL", help="a split folder (local or fsspec URL)")
    p.add_argument("--n", type=int, default=16, help="samples to draw (default 16), spread over the split")
    p.add_argument(
        "--preset",
        choices=("train", "eval", "detect", "letterbox"),
        help="draw one batch of --n samples as the loader yields it with this preset (default: stored samples)",
    )
    p.add_argument("--size", type=int, default=224, help="the batch's image size with --preset (default 224)")
    p.add_argument("--seed", type=int, default=0, help="the loader's seed with --preset (default 0)")
    p.add_argument("--ncol", type=int, default=4, help="samples per row (default 4)")
    p.add_argument("--out", default="grid.png", help="the PNG to write (default grid.png)")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import storage_options
    from shardkit.viz.grid import show
    from shardkit.viz.sample import batch_of, spread_items

    if args.n < 1:
        raise SystemExit("shardkit show: --n must be at least 1")
    so = storage_options(args)
    data: Any
    if args.preset:
        data, classes = batch_of(args.url, args.n, args.preset, args.size, args.seed, so)
    else:
        data, classes = spread_items(args.url, args.n, so)
    show(data, classes=classes, ncol=args.ncol).save(args.out)
    print(f"wrote {args.out} ({len(data) if isinstance(data, list) else args.n} samples)")
    return 0
