"""``shardkit index DATASET``: add per-sample checksums to a dataset's sample indexes, and its key table and
per-sample table (maps to :func:`shardkit.ops.upgrade.add_checksums`)."""

from __future__ import annotations

import argparse

HELP = (
    "give every shard a sample index with per-sample checksums and every split its key table and per-sample "
    "table (datasets converted before them); checks each shard against its manifest first, then rewrites the "
    "manifest; safe to rerun"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments

    p.add_argument("url", metavar="DATASET", help="a split folder or dataset root (local or fsspec URL)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import storage_options
    from shardkit.ops.upgrade import add_checksums

    report = add_checksums(args.url, storage_options=storage_options(args), quiet=args.quiet)
    for s in report.splits:
        if not s.changed and not s.unindexable:
            print(f"{s.split}: nothing to do (every shard's sample index holds checksums; the tables are there)")
            continue
        done = f"{s.split}: {s.written} sample index(es) written with checksums"
        if s.kept:
            done += f", {s.kept} already had them"
        if s.before != s.after:
            done += f"; manifest sample_index {s.before!r} -> {s.after!r}"
        if s.tables_written:
            done += "; key table and per-sample table written (no source hash: the sources are not at hand)"
        print(done)
        if s.unindexable:
            print(
                f"{s.split}: {len(s.unindexable)} shard(s) cannot be indexed ({', '.join(s.unindexable[:10])}"
                + (" ..." if len(s.unindexable) > 10 else "")
                + "): their samples differ in members or need extended tar headers; the loader reads them with the "
                f"header walk, and the manifest keeps sample_index {s.after!r} as it cannot promise an index for "
                "every shard"
            )
    return 0 if report.complete else 1
