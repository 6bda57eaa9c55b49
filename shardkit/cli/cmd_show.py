"""``shardkit show URL``: a grid of samples, or of one training batch, as a PNG (maps to :func:`shardkit.viz.show`)."""

from __future__ import annotations

import argparse
import re
from typing import Any

HELP = (
    "draw a grid of samples (boxes with class names, masks, keypoints, labels, captions) into a PNG; with "
    "--preset or --views, one batch exactly as the loader yields it (--views: every view of each sample)"
)


def _view(text: str) -> Any:
    """``SIZE`` or ``SIZExCOUNT`` as a :class:`~shardkit.loader.view.View` (default scale, ratio and flip)."""
    from shardkit.loader.view import View

    m = re.fullmatch(r"(\d+)(?:x(\d+))?", text.strip().lower())
    try:
        if m is None:
            raise ValueError("not two whole numbers")
        return View(int(m.group(1)), count=int(m.group(2) or 1))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a view is SIZE or SIZExCOUNT (e.g. 224x2), not {text!r} ({exc})") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments

    p.add_argument("url", metavar="URL", help="a split or selection folder (local or fsspec URL)")
    p.add_argument("--n", type=int, default=16, help="samples to draw (default 16), spread over the split")
    p.add_argument(
        "--preset",
        choices=("train", "eval", "detect", "letterbox"),
        help="draw one batch of --n samples as the loader yields it with this preset (default: stored samples)",
    )
    p.add_argument(
        "--views",
        nargs="+",
        type=_view,
        metavar="SIZExCOUNT",
        help="draw one batch of --n multi-crop samples, one row per sample with every view, e.g. --views 224x2 96x6",
    )
    p.add_argument("--size", type=int, default=224, help="the batch's image size with --preset (default 224)")
    p.add_argument("--seed", type=int, default=0, help="the loader's seed with --preset (default 0)")
    p.add_argument("--ncol", type=int, help="cells per row (default: 4, or with --views a sample's views)")
    p.add_argument("--out", default="grid.png", help="the PNG to write (default grid.png)")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import storage_options
    from shardkit.viz.grid import show
    from shardkit.viz.sample import batch_of, spread_items

    if args.n < 1:
        raise SystemExit("shardkit show: --n must be at least 1")
    if args.preset and args.views:
        raise SystemExit("shardkit show: --preset and --views are exclusive: each view has its own size and crop")
    so = storage_options(args)
    data: Any
    if args.preset or args.views:
        data, classes = batch_of(args.url, args.n, args.preset, args.size, args.seed, so, views=args.views)
    else:
        data, classes = spread_items(args.url, args.n, so)
    image = show(data, classes=classes, ncol=args.ncol)
    image.save(args.out)
    samples = len(data) if isinstance(data, list) else len(data["key"]) if "key" in data else args.n
    views = f", {sum(v.count for v in args.views)} views each" if args.views else ""
    print(f"wrote {args.out} ({samples} samples{views})")
    return 0
