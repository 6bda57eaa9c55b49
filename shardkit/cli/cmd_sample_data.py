"""``shardkit sample-data DIR``: write a sample dataset to experiment with: an ImageFolder
(:func:`shardkit.demo.sampledata.make_imagefolder`) or, with ``--format coco|voc|yolo|masks``, a detection or
segmentation source of demo scenes (:func:`shardkit.demo.sources.write_source`); prints the command to run next."""

from __future__ import annotations

import argparse
import os
import re
import shlex

from shardkit.cli import positive_int

HELP = (
    "write sample data (no download): an ImageFolder of photo-like JPEGs (DIR/<class>/*.jpg, or DIR/train and "
    "DIR/val), or with --format coco|voc|yolo|masks a detection/segmentation source; prints the convert command"
)
_IMAGEFOLDER_ONLY = ("classes", "per_class", "val_per_class", "imagenet_like")

_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def _size(text: str) -> tuple[int, int]:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT like 160x120, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="folder to create (must not exist, or be empty)")
    p.add_argument(
        "--format",
        choices=["imagefolder", *_formats()],
        default="imagefolder",
        help="imagefolder (default); coco: DIR/annotations.json + DIR/images/; voc: a VOC2012-style folder; "
        "yolo: DIR/images/, DIR/labels/, DIR/data.yaml; masks: DIR/images/, DIR/masks/, DIR/classes.txt "
        "(scenes of coloured rectangles with exact boxes and masks)",
    )
    p.add_argument(
        "--images",
        type=positive_int,
        default=None,
        metavar="N",
        help="--format coco|voc|yolo|masks: number of images (default 64)",
    )
    p.add_argument("--classes", type=positive_int, default=None, help="imagefolder: number of classes, 1-8 (default 4)")
    p.add_argument(
        "--per-class",
        type=positive_int,
        default=None,
        help="imagefolder: images per class (in train, with --val-per-class; default 50)",
    )
    p.add_argument(
        "--val-per-class",
        type=int,
        default=None,
        metavar="M",
        help="imagefolder: also write DIR/val with M images per class (then the training images go to DIR/train)",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--size",
        type=_size,
        default=None,
        metavar="WxH",
        help="every image this size (default: about 160x120, varied; scenes: exactly 160x120)",
    )
    size.add_argument(
        "--imagenet-like",
        action="store_true",
        help="imagefolder: ImageNet-like sizes: median 500x375, a tail past 1000 px",
    )
    p.add_argument("--seed", type=int, default=0, help="the same seed writes the same bytes (default 0)")
    from shardkit.cli.convert_args import quality_help

    p.add_argument("--quality", type=int, default=90, help=quality_help())


def _formats() -> tuple[str, ...]:
    from shardkit.demo.sources import SOURCE_FORMATS

    return SOURCE_FORMATS


def _check_dir(path: str) -> None:
    from shardkit.errors import ShardkitError

    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise ShardkitError(f"{path}: exists and is not an empty folder; choose a new DIR")


def _run_source(args: argparse.Namespace) -> int:
    """``--format coco|voc|yolo|masks``: demo scenes as that source, then the command that converts it."""
    from shardkit.demo.sources import convert_command, shell_command, write_source
    from shardkit.errors import ShardkitError

    given = [f"--{a.replace('_', '-')}" for a in _IMAGEFOLDER_ONLY if getattr(args, a) not in (None, False)]
    if given:
        raise ShardkitError(f"{', '.join(given)}: only for --format imagefolder; scenes take --images N")
    if not 1 <= args.quality <= 100:
        raise ShardkitError(f"--quality must be between 1 and 100, not {args.quality}")
    if args.size and min(args.size) < 32:
        raise ShardkitError(f"--size must be at least 32x32 for scenes, not {args.size[0]}x{args.size[1]}")
    _check_dir(args.dir)
    images = args.images or 64
    objects = write_source(
        args.dir, args.format, images=images, size=args.size or (160, 120), seed=args.seed, quality=args.quality
    )
    print(f"wrote a {args.format} source to {args.dir}: {images} images, {objects} objects")
    print(f"next: {shell_command(convert_command(args.dir, args.format))}")
    return 0


def run(args: argparse.Namespace) -> int:
    from shardkit.convert.imageproc import QUALITY_RANGE
    from shardkit.demo.sampledata import IMAGENET_LIKE, SMALL, SizeSpread, class_names, make_imagefolder
    from shardkit.errors import ShardkitError

    if args.format != "imagefolder":
        return _run_source(args)
    if args.images is not None:
        raise ShardkitError("--images: only for --format coco|voc|yolo|masks; an ImageFolder takes --per-class")
    args.classes = 4 if args.classes is None else args.classes
    args.per_class = 50 if args.per_class is None else args.per_class
    args.val_per_class = 0 if args.val_per_class is None else args.val_per_class
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
    _check_dir(args.dir)
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
    print(f"next: {shlex.join(['shardkit', 'convert', args.dir, args.dir.rstrip('/') + '-shards'])}")
    return 0
