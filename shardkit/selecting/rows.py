"""The rows ``shardkit select`` chooses from: a resolved split's per-sample tables, one row per stored sample.

:func:`table_rows` reads the per-sample table of every generation of a :class:`~shardkit.format.snapshot.Snapshot`
(checked against the sizes and sha256s its manifest records; never a shard), in split order, with each row's
``class`` as of the pinned generation (relabels applied), and which rows are in the snapshot (corrections and,
for a selection, its bits). Lists of keys or paths (``--include``/``--exclude``) are matched by
:func:`match_entries`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.format.snapshot import Snapshot
from shardkit.format.snapshot.pin import generations_of
from shardkit.format.tables import BUILD_COMMAND, TableError, checked, read_samples_table
from shardkit.storage import fs as storage

#: what ``select`` does with a listed entry that is neither a key nor a path of the split
Unknown = Literal["refuse", "count"]
UNKNOWN_CHOICES: tuple[str, ...] = ("refuse", "count")


class SelectError(ShardkitError):
    """A selection that cannot be taken as asked (an unknown class, list entry or option)."""


@dataclass(frozen=True, eq=False)
class TableRows:
    """A snapshot's stored samples as table rows.

    Attributes:
        rows: one per stored sample of the pinned split, split order (``class`` relabelled).
        kept: one bool per row: whether the sample is in the snapshot.
    """

    rows: list[dict[str, Any]]
    kept: np.ndarray


def table_rows(snap: Snapshot, **storage_options: Any) -> TableRows:
    """The rows of every generation's per-sample table of ``snap`` (see the module docstring).

    Raises:
        TableError: a generation has no per-sample table, or it is damaged or describes other samples.
    """
    m = snap.manifest
    base = m.base_url
    rows: list[dict[str, Any]] = []
    for g in generations_of(m):
        t = g.tables or (m.tables if g.number == 0 else {})
        if not t or "samples" not in t:
            raise TableError(
                f"{base}: generation {g.number} has no per-sample table, which select reads; build it with "
                f"`{BUILD_COMMAND} {base}`"
            )
        url = storage.join(base, t["samples"]["name"])
        try:
            data = storage.read_bytes(url, **storage_options)
        except ShardkitError as exc:
            raise TableError(f"{url}: cannot read ({exc}); rebuild it with `{BUILD_COMMAND} {base}`") from None
        _, it = read_samples_table(checked(data, t["samples"], url), url)
        part = list(it)
        if len(part) != g.samples:
            raise TableError(
                f"{url}: {len(part)} rows for generation {g.number}'s {g.samples} samples; "
                f"rebuild it with `{BUILD_COMMAND} {base}`"
            )
        rows.extend(part)
    sizes = m.shard_sizes
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    for shard, relabels in enumerate(snap.subset.relabels):
        for pos, c in relabels.items():
            rows[int(offsets[shard]) + int(pos)]["class"] = m.classes[c]
    return TableRows(rows, snap.subset.mask(sizes))


def read_entries(source: "str | os.PathLike[str] | Iterable[str]", what: str) -> list[tuple[str, str]]:
    """``(where, entry)`` of each entry of a list file (one per line; blank lines and ``#`` comments skipped;
    ``where`` is ``FILE:LINE``) or of an iterable of strings (``where`` is ``include[i]``)."""
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        try:
            with open(name, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SelectError(f"{name}: cannot read the --{what} list ({exc})") from None
        return [
            (f"{name}:{i}", s.strip()) for i, s in enumerate(lines, 1) if s.strip() and not s.lstrip().startswith("#")
        ]
    out = []
    for i, s in enumerate(source):
        if not isinstance(s, str):
            raise SelectError(f"{what}[{i}] is {type(s).__name__}, not a key or path string")
        out.append((f"{what}[{i}]", s.strip()))
    return out


def _norm_path(p: str) -> str:
    p = p.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def match_entries(
    entries: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], *, unknown: Unknown, what: str, url: str
) -> tuple[np.ndarray, int]:
    """``(mask, unknown)``: the rows an entry names (a key, else a relative path: every sample from that source
    file) and how many entries named none. With ``unknown="refuse"`` the first such entry raises
    :class:`SelectError` naming its line."""
    by_key = {r["key"]: i for i, r in enumerate(rows)}
    by_path: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.get("path"):
            by_path.setdefault(_norm_path(str(r["path"])), []).append(i)
    mask = np.zeros(len(rows), bool)
    missing = 0
    for where, entry in entries:
        if entry in by_key:
            mask[by_key[entry]] = True
            continue
        hits = by_path.get(_norm_path(entry))
        if hits:
            mask[hits] = True
            continue
        if unknown == "refuse":
            raise SelectError(
                f"{where}: {entry!r} is neither a sample key nor a source path of {url}; fix the --{what} list, "
                "or pass --unknown count to skip such entries"
            )
        missing += 1
    return mask, missing


__all__ = ["SelectError", "TableRows", "UNKNOWN_CHOICES", "Unknown", "match_entries", "read_entries", "table_rows"]
