"""Key lookups of a snapshot for ``shardkit.open``: every generation's key table, and which keys are in.

A split written once has one key table; an appended split has one per generation, each over the shards that
generation added (:mod:`shardkit.format.generations`). :class:`SnapshotKeys` finds a key's stored place in any of
them and says whether the snapshot keeps it: a key a correction removed or a selection left out is not an item.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import numpy as np

from shardkit.errors import StorageError
from shardkit.format.snapshot import Snapshot
from shardkit.format.snapshot.pin import generations_of, shard_span
from shardkit.format.tables import BUILD_COMMAND, TABLES_FORMAT, KeyTable, TableError, checked
from shardkit.storage import fs as storage


@dataclass(frozen=True, eq=False)
class SnapshotKeys:
    """The key tables of a snapshot's generations, and its kept positions.

    Attributes:
        snapshot: what is read.
        tables: ``(first shard, table)`` per generation, its rows' shards counted from ``first shard``.
    """

    snapshot: Snapshot
    tables: tuple[tuple[int, KeyTable], ...]

    @classmethod
    def load(cls, snapshot: Snapshot, fetch: Callable[[str], bytes]) -> "SnapshotKeys":
        """Read and check every generation's key table (``fetch(url) -> bytes``).

        Raises:
            TableError: a generation has no key table, or it is unreadable or for other shards (named, with the
                command that builds it).
        """
        m = snapshot.manifest
        base = m.base_url
        out = []
        for g in generations_of(m):
            t = g.tables or (m.tables if g.number == 0 else {})
            if not t:
                raise TableError(
                    f"{base}: this split has no key table (written before them); build it with `{BUILD_COMMAND} {base}`"
                )
            if t.get("format") != TABLES_FORMAT:
                raise TableError(
                    f"{base}: tables format {t.get('format')!r} is unknown to this shardkit; upgrade shardkit"
                )
            url = storage.join(base, t["keys"]["name"])
            try:
                data = fetch(url)
            except (FileNotFoundError, StorageError) as exc:
                raise TableError(
                    f"{url}: cannot read the key table ({exc}); rebuild it with `{BUILD_COMMAND} {base}`"
                ) from None
            table = KeyTable.from_bytes(checked(data, t["keys"], url), url)
            first, stop = shard_span(m, g.number)
            table.check(m.shard_sizes[first:stop], url)
            out.append((first, table))
        return cls(snapshot, tuple(out))

    def stored(self, key: str) -> Optional[tuple[int, int]]:
        """``(shard, stored position)`` of ``key`` in the pinned split, or ``None``."""
        for first, table in self.tables:
            at = table.find(key)
            if at is not None:
                return first + at[0], at[1]
        return None

    def planned(self, shard: int, position: int) -> Optional[int]:
        """The position among ``shard``'s kept samples of stored ``position``, or ``None`` when it is not kept."""
        kept = self.snapshot.subset.kept[shard]
        if kept is None:
            return position
        j = int(np.searchsorted(kept, position))
        return j if j < len(kept) and int(kept[j]) == position else None

    def in_order(self) -> list[str]:
        """Every kept key, in the snapshot's order (shard by shard, position by position)."""
        m = self.snapshot.manifest
        stored = np.concatenate([[0], np.cumsum(np.asarray(m.shard_sizes, np.int64))])
        keys: list[str] = []
        for first, table in self.tables:
            keys += table.in_order(stored[first:] - stored[first])
        mask = self.snapshot.subset.mask(m.shard_sizes)
        return [k for k, kept in zip(keys, mask.tolist()) if kept]


__all__ = ["SnapshotKeys"]
