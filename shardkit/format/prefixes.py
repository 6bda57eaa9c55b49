"""Prefix spreading: shard names under N hashed directories, so an object store can partition the load.

S3 throttles per partitioned key prefix (about 5,500 GET/s each) and partitions a busy prefix by the
characters after it; shards named ``train-000000.tar`` ... share one prefix. With ``--prefixes N`` a
conversion writes shard ``j`` as ``<dir>/train-00000j.tar`` where ``<dir>`` is one of N short hex names
(:func:`prefix_dirs`), shard ``j`` going to directory ``j % N``: consecutive shards (which neighbouring
readers read at the same time) land on different prefixes, and every prefix holds the same number of
shards, give or take one. The manifest records each shard's name with its directory; the loader, verify
and merge read names from the manifest, so nothing else changes meaning.

A prefix directory's name is always four lowercase hex digits (:data:`PREFIX_DIR`): the one shape that
manifest validation accepts in front of a shard's file name, and the one a conversion clears.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

#: the default prefix count of a conversion (``ConvertConfig.prefixes``, ``--prefixes``): flat names
DEFAULT_PREFIXES = 1
#: the most prefixes a conversion spreads over
MAX_PREFIXES = 4096
#: the shape of every name :func:`prefix_dirs` makes (the manifest's name rule and DEST clearing use it)
PREFIX_DIR = re.compile(r"[0-9a-f]{4}")


@lru_cache(maxsize=16)
def prefix_dirs(prefixes: int) -> tuple[str, ...]:
    """The ``prefixes`` directory names: 4 hex digits of sha256 of the prefix number (distinct; hashes, so
    they spread over the key space that S3 splits into partitions by their leading characters).

    The names of ``N`` prefixes are the first ``N`` of any larger count, so a prefix's name depends only on
    its number.

    Raises:
        ValueError: ``prefixes`` outside ``[1, MAX_PREFIXES]``.
    """
    check_prefixes(prefixes)
    out: list[str] = []
    seen: set[str] = set()
    for p in range(prefixes):
        salt = 0
        while True:
            d = hashlib.sha256(f"{p}:{salt}".encode()).hexdigest()[:4]
            if d not in seen:
                break
            salt += 1
        seen.add(d)
        out.append(d)
    return tuple(out)


def check_prefixes(prefixes: int) -> int:
    """``prefixes`` if it is a usable prefix count, else :class:`ValueError` naming the range."""
    if isinstance(prefixes, bool) or not isinstance(prefixes, int) or not 1 <= prefixes <= MAX_PREFIXES:
        raise ValueError(f"prefixes (--prefixes) must be an integer in [1, {MAX_PREFIXES}], not {prefixes!r}")
    return prefixes


def spread_name(name: str, index: int, prefixes: int) -> str:
    """Shard ``index``'s stored name: ``name`` itself with one prefix, else ``<dir>/name``
    (``<dir>`` = ``prefix_dirs(prefixes)[index % prefixes]``)."""
    if check_prefixes(prefixes) == 1:
        return name
    return f"{prefix_dirs(prefixes)[index % prefixes]}/{name}"


def prefix_of(name: str) -> str:
    """The prefix directory of a manifest shard name (``""`` for a flat name)."""
    head, sep, _ = name.rpartition("/")
    return head if sep else ""


def is_prefix_dir(name: str) -> bool:
    """Whether a folder name has the shape of a prefix directory (:data:`PREFIX_DIR`)."""
    return PREFIX_DIR.fullmatch(name) is not None
