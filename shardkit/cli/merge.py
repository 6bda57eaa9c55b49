"""`shardkit merge` (not implemented yet)."""

from __future__ import annotations

import argparse

HELP = "merge (not implemented yet)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from ..errors import ShardkitError

    raise ShardkitError("'shardkit merge' is not implemented yet")
