"""The per-sample table's rows of each planned shard, kept in the conversion's journal while the split is converted.

:meth:`~shardkit.convert.splitjob.SplitJob.finish_shard` knows each sample's key, metadata and the sha256 of its
source file's bytes while it writes the shard; it keeps them in ``_shardkit/<split>-NNNNNN.rows.json.gz``
(:func:`write_rows`, written before the shard's record, so a record implies its rows), the rows of the
shard's samples apart from those of its overflow (which go into the shards numbered after the planned ones).
:func:`split_rows` gives :func:`shardkit.convert.merge.finalize_split` every shard's rows in order; a
planned shard whose rows file is missing (a journal an older shardkit wrote) has its rows read back from
the shard, without the source hash.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from typing import Any, Optional

from shardkit.convert import journal
from shardkit.format.tablebuild import rows_from_shard
from shardkit.format.tables import sample_row
from shardkit.storage import fs as storage

Rows = list[dict[str, Any]]


def rows_name(split: str, j: int) -> str:
    """Journal file name of the rows of planned shard ``j``."""
    return f"{split}-{j:06d}.rows.json.gz"


def write_rows(url: str, split: str, j: int, shard: Rows, overflow: Rows, storage_options: dict) -> None:
    """Keep the rows of planned shard ``j`` (``shard``: its samples in order; ``overflow``: its overflow's)."""
    data = json.dumps({"shard": shard, "overflow": overflow}, ensure_ascii=False, sort_keys=True).encode("utf-8")
    storage.put_bytes(journal.journal_url(url, rows_name(split, j)), gzip.compress(data, mtime=0), **storage_options)


def read_rows(url: str, split: str, j: int, storage_options: dict) -> Optional[tuple[Rows, Rows]]:
    """``(shard rows, overflow rows)`` of planned shard ``j``, or ``None`` when none were kept (or unreadable)."""
    try:
        d = json.loads(
            gzip.decompress(storage.read_bytes(journal.journal_url(url, rows_name(split, j)), **storage_options))
        )
        return list(d["shard"]), list(d["overflow"])
    except Exception:  # noqa: BLE001 - missing or damaged: the rows are read back from the shard instead
        return None


def split_rows(
    url: str,
    split: str,
    records: Sequence[journal.ShardRecord],
    overflow: Sequence[Any],
    overflow_keys: Sequence[Sequence[str]],
    storage_options: dict,
) -> list[Rows]:
    """The rows of every shard of the split in manifest order: the planned shards of ``records`` (those with a
    shard), then the overflow shards holding ``overflow_keys`` (``overflow``: the overflow samples, for rows
    a journal did not keep)."""
    out: list[Rows] = []
    by_key: dict[str, dict[str, Any]] = {}
    for r in records:
        kept = read_rows(url, split, r.index, storage_options)
        if kept is not None:
            by_key.update((row["key"], row) for row in kept[1])
        if r.shard is None:
            continue
        if kept is None:
            shard_url = storage.join(url, r.shard.name)
            with storage.open_read(shard_url, **storage_options) as f:
                out.append(rows_from_shard(f, shard_url))
        else:
            out.append(kept[0])
    for s in overflow:
        if s.key not in by_key:
            by_key[s.key] = sample_row(s.key, s.meta)
    out += [[by_key[k] for k in keys] for keys in overflow_keys]
    return out


__all__ = ["read_rows", "rows_name", "split_rows", "write_rows"]
