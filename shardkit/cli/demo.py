"""`shardkit demo` (not implemented yet)."""

from __future__ import annotations

import argparse

HELP = "demo (not implemented yet)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from ..errors import ShardkitError

    raise ShardkitError("'shardkit demo' is not implemented yet")
