"""``shardkit select URL --out SEL``: write a selection of a split's samples (maps to :func:`shardkit.select`)."""

from __future__ import annotations

import argparse

HELP = (
    "write a selection (a small folder of bits, read wherever a split is) of the samples of a split chosen by "
    "class, lists of keys or paths and a --where predicate over the per-sample table"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments
    from shardkit.selecting.rows import UNKNOWN_CHOICES

    p.add_argument("url", metavar="URL", help="a split folder, or a selection folder to select within")
    p.add_argument("--out", required=True, metavar="SEL", help="the selection folder to write")
    p.add_argument("--classes", metavar="A,B", help="keep samples of these classes (comma-separated names)")
    p.add_argument(
        "--include", metavar="FILE", help="keep only the samples FILE names (keys or source paths, one a line)"
    )
    p.add_argument("--exclude", metavar="FILE", help="leave out the samples FILE names (keys or source paths)")
    p.add_argument(
        "--where",
        metavar="EXPR",
        help="keep samples whose per-sample table row satisfies EXPR, e.g. \"width >= 256 and class in ['cat', 'dog']\"",
    )
    p.add_argument("--generation", type=int, metavar="N", help="select from generation N (default: the newest)")
    p.add_argument(
        "--unknown",
        choices=UNKNOWN_CHOICES,
        default="refuse",
        help="a list entry naming no sample: refuse (default: a one-line error naming its line) or count it",
    )
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import storage_options
    from shardkit.selecting import select

    classes = [c.strip() for c in args.classes.split(",") if c.strip()] if args.classes is not None else None
    done = select(
        args.url,
        out=args.out,
        classes=classes,
        include=args.include,
        exclude=args.exclude,
        where=args.where,
        generation=args.generation,
        unknown=args.unknown,
        storage_options=storage_options(args),
    )
    print(done.summary() + f" -> {args.out}")
    return 0
