"""``shardkit sample-data DIR``: write a sample ImageFolder to experiment with (maps to :func:`shardkit.demo.sampledata.make_imagefolder`)."""

from __future__ import annotations

import argparse
import os
import re

from shardkit.cli import positive_int

HELP = "write a sample ImageFolder of photo-like JPEGs (no download): DIR/<class>/*.jpg, or DIR/train and DIR/val"

_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def _size(text: str) -> tuple[int, int]:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT like 160x120, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="folder to create (must not exist, or be empty)")
    p.add_argument("--classes", type=positive_int, default=4, help="number of classes, 1-8 (default 4)")
    p.add_argument(
        "--per-class",
        type=positive_int,
        default=50,
        help="images per class (in train, with --val-per-class; default 50)",
    )
    p.add_argument(
        "--val-per-class",
        type=int,
        default=0,
        metavar="M",
        help="also write DIR/val with M images per class (then the training images go to DIR/train)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--size", type=_size, default=None, metavar="WxH", help="every image this size (default: about 160x120, varied)"
    )
    size.add_argument(
        "--imagenet-like", action="store_true", help="ImageNet-like sizes: median 500x375, a tail past 1000 px"
    )
    p.add_argument("--seed", type=int, default=0, help="the same seed writes the same bytes (default 0)")
    from shardkit.cli.cmd_convert import quality_help

    p.add_argument("--quality", type=int, default=90, help=quality_help())


def run(args: argparse.Namespace) -> int:
    from shardkit.convert.imageproc import QUALITY_RANGE
    from shardkit.demo.sampledata import IMAGENET_LIKE, SMALL, SizeSpread, class_names, make_imagefolder
    from shardkit.errors import ShardkitError

    try:
        class_names(args.classes)
        spread = SizeSpread.fixed(*args.size) if args.size else IMAGENET_LIKE if args.imagenet_like else SMALL
        if args.val_per_class < 0:
            raise ValueError(f"--val-per-class must be at least 0, not {args.val_per_class}")
        low, high = QUALITY_RANGE
        if not low <= args.quality <= high:
            raise ValueError(
                f"--quality must be between {low} and {high}, not {args.quality} (above 95 files grow ~2x for little gain)"
            )
    except ValueError as exc:
        raise ShardkitError(str(exc).replace("num_classes", "--classes")) from None
    if os.path.exists(args.dir) and (not os.path.isdir(args.dir) or os.listdir(args.dir)):
        raise ShardkitError(f"{args.dir}: exists and is not an empty folder; choose a new DIR")
    splits = {"train": args.per_class, "val": args.val_per_class} if args.val_per_class else None
    make_imagefolder(
        args.dir,
        num_classes=args.classes,
        per_class=args.per_class,
        spread=spread,
        seed=args.seed,
        quality=args.quality,
        splits=splits,
    )
    n = args.classes * (args.per_class + args.val_per_class)
    where = f"{args.dir}/train and {args.dir}/val" if splits else f"{args.dir}/<class>/"
    print(f"wrote {n} images of {args.classes} classes ({', '.join(class_names(args.classes))}) to {where}")
    print(f"next: shardkit convert {args.dir} {args.dir.rstrip('/')}-shards")
    return 0
