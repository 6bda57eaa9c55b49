"""Write a split's key table and per-sample table (:mod:`shardkit.format.tables`) from its rows.

Both writers use this: the converter at the end of a split (its rows kept in the journal while its shards
were written: :mod:`shardkit.convert.tablesout`) and ``shardkit index`` for a dataset written before the
tables (its rows read back from the shards' ``.json`` members: :func:`rows_from_shard`, with no source
hash, as the source files are not at hand). Each table is written atomically, before the manifest that
names it, so a manifest never names a missing table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from shardkit.format.tables import KeyTable, TableError, sample_row, samples_bytes, table_entry
from shardkit.format.tar import ShardReader, TarDamage
from shardkit.storage import fs as storage


def rows_from_shard(f: IO[bytes], url: str) -> list[dict[str, Any]]:
    """The per-sample table's rows of the shard open as ``f`` (its keys and ``.json`` metadata; the
    ``source_sha256`` column empty), in order.

    Raises:
        TableError: the shard is damaged (the message names it).
    """
    r = ShardReader(f, url)
    out = []
    try:
        while (s := r.read(r.index)) is not None:
            out.append(sample_row(s.key, s.meta))
    except TarDamage as exc:
        raise TableError(f"{url}: {exc}; cannot list its samples") from None
    return out


def write_tables(
    split_url: str,
    split: str,
    shard_rows: Sequence[Sequence[dict[str, Any]]],
    generation: int = 0,
    **storage_options: Any,
) -> dict[str, Any]:
    """Write the key table and per-sample table of ``split`` (``shard_rows[j]``: the rows of shard ``j`` in
    order) into ``split_url``; return the manifest's ``tables`` value naming them.

    Raises:
        TableError: a key appears twice.
    """
    keys = KeyTable.build([[r["key"] for r in rows] for rows in shard_rows], generation).to_bytes()
    samples = samples_bytes(split, (r for rows in shard_rows for r in rows), generation)
    entry = table_entry(split, keys, samples, generation)
    storage.put_bytes(storage.join(split_url, entry["keys"]["name"]), keys, **storage_options)
    storage.put_bytes(storage.join(split_url, entry["samples"]["name"]), samples, **storage_options)
    return entry


__all__ = ["rows_from_shard", "write_tables"]
