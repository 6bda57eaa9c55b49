"""`shardkit verify` (not implemented yet)."""

from __future__ import annotations

import argparse

HELP = "verify (not implemented yet)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from ..errors import ShardkitError

    raise ShardkitError("'shardkit verify' is not implemented yet")
