"""``shardkit merge DEST``: finish a conversion split over ``--num-tasks`` (maps to :func:`shardkit.convert.merge`)."""

from __future__ import annotations

import argparse

from shardkit.cli import add_storage_arguments, storage_options

HELP = "after a multi-task 'shardkit convert': check that every shard is there and write the manifests"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="the DEST given to every 'shardkit convert' task")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardkit.convert import merge

    for m in merge(args.dest, **storage_options(args)):
        print(
            f"{m.split}: {m.num_samples} samples in {len(m.shards)} shards, {m.num_bytes / 1e6:.1f} MB, "
            f"{len(m.skipped)} skipped -> {m.url}"
        )
    return 0
