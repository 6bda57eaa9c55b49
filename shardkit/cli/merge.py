"""``shardkit merge DEST``: finish a conversion split over ``--num-tasks`` (maps to :func:`shardkit.convert.merge`)."""

from __future__ import annotations

import argparse

HELP = "after a multi-task 'shardkit convert': check that every shard is there and write the manifests"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .convert import add_storage_arguments

    p.add_argument("dest", metavar="DEST", help="the DEST given to every 'shardkit convert' task")
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ..convert import merge
    from .convert import storage_options

    for m in merge(args.dest, **storage_options(args)):
        print(f"{m.split}: {m.num_samples} samples in {len(m.shards)} shards, {m.num_bytes / 1e6:.1f} MB, "
              f"{len(m.skipped)} skipped -> {m.url}")
    return 0
