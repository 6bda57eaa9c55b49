"""The ``shardkit`` command: a thin layer over the library.

Each subcommand lives in its own module in this package, ``cmd_<command>.py``
(so that ``cli/cmd_verify.py`` is not taken for ``ops/verify.py``), exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; each ``run`` parses
nothing itself and calls one public library function. User mistakes
(:class:`shardkit.ShardkitError`) print one line and exit with status 2.
Environment overrides, if any, are read here (``SHARDKIT_`` prefix), never in
the library.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import re
import sys
from typing import Any

from shardkit.errors import ShardkitError

#: subcommand name -> module in this package
COMMANDS = {
    "convert": "cmd_convert",
    "merge": "cmd_merge",
    "info": "cmd_info",
    "verify": "cmd_verify",
    "index": "cmd_index",
    "select": "cmd_select",
    "show": "cmd_show",
    "bench": "cmd_bench",
    "simulate": "cmd_simulate",
    "demo": "cmd_demo",
    "sample-data": "cmd_sample_data",
}


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def add_storage_arguments(p: argparse.ArgumentParser) -> None:
    """``--endpoint-url`` and ``--storage-option KEY=VALUE`` for fsspec URLs."""
    g = p.add_argument_group("storage (fsspec URLs)")
    g.add_argument(
        "--endpoint-url",
        default=os.environ.get("SHARDKIT_ENDPOINT_URL"),
        help="S3-compatible endpoint, e.g. http://127.0.0.1:9000 (default: $SHARDKIT_ENDPOINT_URL)",
    )
    g.add_argument(
        "--storage-option",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option (VALUE parsed as JSON when possible); repeatable, e.g. anon=true",
    )


def storage_options(args: argparse.Namespace) -> dict[str, Any]:
    """fsspec options from the storage arguments."""
    opts: dict[str, Any] = dict(args.storage_option)
    if args.endpoint_url:
        opts.setdefault("client_kwargs", {})["endpoint_url"] = args.endpoint_url
    return opts


_FIELD = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def option_error(exc: Exception, args: argparse.Namespace) -> str:
    """A library ``ValueError`` message with field names (``shard_size``) replaced by their options (``--shard-size``)."""
    dests = set(vars(args))
    return _FIELD.sub(lambda m: "--" + m.group(0).replace("_", "-") if m.group(0) in dests else m.group(0), str(exc))


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    from shardkit import __version__

    parser = argparse.ArgumentParser(
        prog="shardkit", description="Make PyTorch image training stop waiting on its input."
    )
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
    """Run the ``shardkit`` command line ``argv`` (default ``sys.argv[1:]``) in this process; returns the exit code."""
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


def script() -> int:
    """The ``shardkit`` console script and ``python -m shardkit``: :func:`main`, then a quick exit.

    ``gc.freeze()`` before the interpreter exits spares its final garbage collection the
    hundreds of thousands of objects torch creates on import (0.2-0.3 s of every command that
    imported it); everything is still closed and flushed as usual. Only here, not in
    :func:`main`, which programs and tests call in their own process.
    """
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(script())
