"""``shardkit verify URL``: check every shard against the manifest (maps to :func:`shardkit.ops.verify.verify`)."""

from __future__ import annotations

import argparse
import sys

HELP = (
    "check that every shard is present, intact (size, sha256, sample index and its checksums) and decodes, and that "
    "no split is half-converted; warn about files the manifest does not list; exit 1 on any problem"
)


def _pixels(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a pixel count >= 1, got {text!r}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments

    p.add_argument("url", metavar="URL", help="a split folder or dataset root (local or fsspec URL)")
    p.add_argument("--quick", action="store_true", help="sizes and checksums only, no decoding")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--strict",
        action="store_true",
        help="warnings (files the manifest does not list, sample indexes without checksums) are problems: exit 1",
    )
    p.add_argument(
        "--max-pixels",
        type=_pixels,
        default=None,
        metavar="N",
        help="an image declaring more pixels is a problem, as the loader skips it (default: the loader's default)",
    )
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import storage_options
    from shardkit.ops.verify import verify

    report = verify(
        args.url,
        quick=args.quick,
        quiet=args.quiet,
        max_pixels=args.max_pixels,
        strict=args.strict,
        **storage_options(args),
    )
    for w in report.warnings:  # with --strict a problem line; else a warning on stderr, as `shardkit info` warns
        if args.strict:
            print(w)
        else:
            print(f"warning: {w}", file=sys.stderr)
    for p in report.problems:
        print(p)
    problems = len(report.problems) + (len(report.warnings) if args.strict else 0)
    status = "OK" if report.ok else f"{problems} problem(s)"
    if args.quick:
        what = f"checksums of {report.shards} shards ({report.samples} samples listed, not decoded)"
    else:
        what = f"samples in {report.shards} shards, {report.samples} samples"
    warned = f", {len(report.warnings)} warning(s)" if report.warnings and not args.strict else ""
    print(f"{status}: {what}, {report.bytes / 1e6:.1f} MB in {report.splits} split(s){warned}")
    return 0 if report.ok else 1
