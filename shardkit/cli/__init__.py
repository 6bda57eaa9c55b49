"""The ``shardkit`` command: a thin layer over the library.

Each subcommand lives in its own module in this package, exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; each ``run`` parses
nothing itself and calls one public library function. User mistakes
(:class:`shardkit.ShardkitError`) print one line and exit with status 2.
Environment overrides, if any, are read here (``SHARDKIT_`` prefix), never in
the library.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import ShardkitError

#: subcommand name -> module in this package
COMMANDS = {
    "convert": "convert",
    "merge": "merge",
    "info": "info",
    "verify": "verify",
    "bench": "bench",
    "demo": "demo",
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="shardkit", description="Make PyTorch image training stop waiting on its input.")
    parser.add_argument("--version", action="version", version=f"shardkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(f"{__name__}.{modname}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


_BACKEND_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "fsspec", "google", "requests", "urllib3")


def _from_storage_backend(exc: BaseException) -> bool:
    """True for errors raised by a storage backend (credentials, endpoint, network), not by shardkit."""
    return any(c.__module__.split(".")[0] in _BACKEND_MODULES for c in type(exc).__mro__)


def _quiet_broken_pipe() -> int:
    """`shardkit info URL | head`: the reader went away; not an error of ours."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``shardkit`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ShardkitError as exc:
        print(f"shardkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except Exception as exc:
        if not _from_storage_backend(exc):
            raise  # a bug of ours: keep the traceback
        print(
            f"shardkit {args.command}: error: the storage backend failed ({type(exc).__name__}: {exc}); "
            "check the URL, the endpoint (--endpoint-url) and the credentials",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"shardkit {args.command}: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
