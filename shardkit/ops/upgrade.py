"""Add per-sample checksums, the key table and the per-sample table to a dataset written before them (``shardkit index``).

A dataset converted before the sample index had checksums (manifest ``sample_index`` ``"sidecar-1"``)
or before it existed at all (``""``) gets a :data:`~shardkit.format.index.INDEX_FORMAT` sidecar per
shard and then a manifest that says so. :func:`add_checksums` does it split by split:

1. each shard whose sidecar already loads with checksums is kept as it is (what makes a rerun after a
   kill finish the job, and a finished dataset "nothing to do");
2. every other shard is read once, and its size and sha256 are checked against the manifest before
   anything is built from those bytes: a shard that differs is refused (:class:`UpgradeError` naming it),
   because an index with checksums vouches for the bytes it describes;
3. its index is built from those same bytes (:func:`~shardkit.format.indexio.index_from_walk`) and
   written next to the shard atomically (:func:`shardkit.storage.fs.put_bytes`);
4. last, when every shard has an index, the manifest is rewritten atomically with ``sample_index``
   set and nothing else changed (a version 1 manifest, which predates ``sample_index``, becomes
   version 2, the first that reads it). A shard that cannot be indexed (its samples do not all have
   the same members, or a member needs an extended tar header) is reported, and the manifest keeps
   the ``sample_index`` it had: it cannot promise an index for every shard.

Tables: a split whose manifest names no key table and per-sample table in the format written now (or
whose files differ from the sizes and sha256s it records) gets both, built from its shards' keys and
``.json`` members (checked against the manifest like the index's bytes; no source hash: the source files
are not at hand) and written before the manifest that names them (:mod:`shardkit.format.tablebuild`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field, replace
from typing import IO, Any, Optional

from shardkit.errors import ManifestError, ShardkitError
from shardkit.format.index import INDEX_FORMAT, READABLE_INDEX_FORMATS, IndexDamage, index_url
from shardkit.format.indexio import index_from_walk, load_index
from shardkit.format.manifest import Manifest, ShardInfo
from shardkit.format.prefixes import prefix_of
from shardkit.format.splits import find_splits
from shardkit.format.tablebuild import rows_from_shard, write_tables
from shardkit.format.tables import TABLES_FORMAT, checked
from shardkit.storage import fs as storage

#: a shard up to this size is held in memory while it is indexed; a larger one in a local temporary file
SPOOL_BYTES = 512 << 20


class UpgradeError(ShardkitError):
    """The dataset cannot be upgraded as it is (a shard differs from its manifest, an unfinished split...)."""


@dataclass
class SplitUpgrade:
    """What :func:`add_checksums` did to one split.

    Attributes:
        split: the split's name.
        url: the split folder.
        shards: shards in the manifest.
        written: sample indexes written (built from the shard, with checksums).
        kept: sample indexes that already held checksums (left as they were).
        unindexable: shards that cannot be indexed (names as in the manifest).
        before, after: the manifest's ``sample_index`` before and after.
        tables: the split has its key table and per-sample table now.
        tables_written: they were built (from the shards: no source hash) and written.
    """

    split: str
    url: str
    shards: int
    written: int = 0
    kept: int = 0
    unindexable: list[str] = field(default_factory=list)
    before: str = ""
    after: str = ""
    tables: bool = False
    tables_written: bool = False

    @property
    def changed(self) -> bool:
        """True when a sidecar, a table or the manifest was written."""
        return bool(self.written) or self.before != self.after or self.tables_written


@dataclass
class UpgradeReport:
    """Result of :func:`add_checksums`, one entry per split."""

    splits: list[SplitUpgrade] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every split's manifest now says :data:`~shardkit.format.index.INDEX_FORMAT` and names its tables."""
        return all(s.after == INDEX_FORMAT and s.tables for s in self.splits)


def add_checksums(url: str, *, storage_options: Optional[dict[str, Any]] = None, quiet: bool = True) -> UpgradeReport:
    """Give every shard of the dataset at ``url`` a sample index with per-sample checksums (see the module docstring).

    Args:
        url: a split folder or a dataset root whose sub-folders are splits, local or any fsspec URL.
        storage_options: fsspec options.
        quiet: no progress bar.

    Returns:
        what was done per split; a split whose shards all had checksums already is left untouched.

    Raises:
        UpgradeError: a shard's size or sha256 differs from the manifest (nothing is built from it, the
            manifest is not rewritten), a split is unfinished or its index format is unknown.
        ManifestError: no dataset at ``url``, or a manifest is unreadable.
    """
    from tqdm.auto import tqdm

    so = dict(storage_options or {})
    found = find_splits(url, **so)
    if found.unreadable:
        raise ManifestError(found.unreadable[0].detail)
    if found.incomplete:
        inc = found.incomplete[0]
        raise UpgradeError(f"{inc.url}: {inc.detail}")
    for m in found.manifests:
        if m.sample_index and m.sample_index not in READABLE_INDEX_FORMATS:
            raise UpgradeError(
                f"{m.url}: sample index format {m.sample_index!r} is unknown to this shardkit; upgrade shardkit"
            )
    report = UpgradeReport()
    total = sum(m.num_bytes for m in found.manifests)
    with tqdm(total=total, unit="B", unit_scale=True, desc="index", disable=quiet, dynamic_ncols=True) as bar:
        for m in found.manifests:
            report.splits.append(_upgrade_split(m, so, bar.update))
    return report


def _upgrade_split(m: Manifest, so: dict[str, Any], progress: Any) -> SplitUpgrade:
    out = SplitUpgrade(m.split, m.base_url, len(m.shards), before=m.sample_index, after=m.sample_index)
    out.tables = tables_ok(m, so)
    if m.generations and not out.tables:
        raise UpgradeError(
            f"{m.url}: a generation's key or per-sample table is missing or damaged (`shardkit verify` names it); "
            "a split with generations keeps a table per generation, which this command does not rebuild: "
            "restore the file from a copy of the dataset"
        )
    rows: list[list[dict[str, Any]]] = []
    for i, s in enumerate(m.shards):
        url = m.shard_url(i)
        indexed = _has_checksums(url, s, so)
        if indexed:
            out.kept += 1
        if not indexed or not out.tables:
            with _checked_bytes(url, s, so) as f:
                if not indexed:
                    idx = index_from_walk(f, url, s.bytes, s.sha256)
                    if idx is None:
                        out.unindexable.append(s.name)
                    else:
                        storage.put_bytes(index_url(url), idx.to_bytes(), **so)
                        out.written += 1
                if not out.tables:
                    f.seek(0)
                    rows.append(rows_from_shard(f, url))
        progress(s.bytes)
    tables = m.tables
    if not out.tables:
        tables = write_tables(m.base_url, m.split, rows, **so)  # before the manifest that names them
        out.tables = out.tables_written = True
    _tidy(m.base_url, {prefix_of(s.name) for s in m.shards}, so)  # a killed run's work folders too
    index = INDEX_FORMAT if not out.unindexable else m.sample_index
    if index != m.sample_index or tables != m.tables:
        _set_manifest(m, so, index, tables)
        out.after = index
    return out


def tables_ok(m: Manifest, so: dict[str, Any]) -> bool:
    """Whether ``m`` names tables in the format written now whose files have the recorded size and sha256 (a split
    with generations: every generation's)."""
    for t in [g.tables for g in m.generations] or [m.tables]:
        if not t or t.get("format") != TABLES_FORMAT:
            return False
        try:
            for part in ("keys", "samples"):
                url = storage.join(m.base_url, t[part]["name"])
                checked(storage.read_bytes(url, **so), t[part], url)
        except ShardkitError:
            return False
    return True


def _has_checksums(url: str, s: ShardInfo, so: dict[str, Any]) -> bool:
    """Whether the shard's sidecar loads (it names the manifest's size and sha256) and holds checksums."""
    try:
        return load_index(url, shard_bytes=s.bytes, shard_sha256=s.sha256, **so).has_checksums
    except IndexDamage:
        return False


def _checked_bytes(url: str, s: ShardInfo, so: dict[str, Any]) -> IO[bytes]:
    """The shard's bytes, read once, in a file positioned at 0, after checking them against the manifest.

    Raises:
        UpgradeError: the size or sha256 differs from the manifest.
    """
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    try:
        sha, n = hashlib.sha256(), 0
        with storage.open_read(url, **so) as f:
            while (b := f.read(8 << 20)) and n <= s.bytes:
                sha.update(b)
                spool.write(b)
                n += len(b)
        if n != s.bytes:
            what = (
                f"holds more than the {s.bytes} bytes the manifest says"
                if n > s.bytes
                else f"size is {n} bytes, the manifest says {s.bytes}"
            )
        elif sha.hexdigest() != s.sha256:
            what = "sha256 differs from the manifest"
        else:
            spool.seek(0)
            return spool
    except BaseException:
        spool.close()
        raise
    spool.close()
    raise UpgradeError(
        f"{url}: {what}: the shard changed or is damaged, and an index with checksums would vouch for these bytes; "
        "restore the shard (or re-convert the split), then rerun"
    )


def _tidy(base: str, dirs: set[str], so: dict[str, Any]) -> None:
    """Remove the work folders that local atomic writes left empty in ``base`` and its prefix directories ``dirs``
    (``""``: ``base`` itself)."""
    if not storage.is_local(base):
        return
    for d in sorted(dirs):
        work = storage.join(base, d, storage.WORK_DIR) if d else storage.join(base, storage.WORK_DIR)
        if storage.list_dir(work, **so) == ([], []):
            storage.remove(work, recursive=True, **so)


def _set_manifest(m: Manifest, so: dict[str, Any], index: str, tables: dict[str, Any]) -> None:
    """Rewrite ``m``'s manifest with ``sample_index`` = ``index`` and ``tables``, every other key and its order kept.

    Raises:
        UpgradeError: the manifest changed since it was loaded.
    """
    text = storage.read_bytes(m.url, **so)
    if Manifest.from_json(text, m.url) != m:
        raise UpgradeError(f"{m.url}: the manifest changed while its shards were indexed; rerun")
    d = json.loads(text)
    if index:
        d["sample_index"] = index
        d["version"] = max(d["version"], 2)  # version 1 predates sample_index: its readers ignore the key
    d["tables"] = tables  # any version: a reader that does not know the key ignores it
    new = json.dumps(d, indent=1, sort_keys=False, ensure_ascii=False) + "\n"  # as Manifest.to_json
    check = Manifest.from_json(new, m.url)
    if (
        check.sample_index != index
        or check.tables != tables
        or replace(check, sample_index=m.sample_index, version=m.version, tables=m.tables) != m
    ):
        raise UpgradeError(
            f"{m.url}: the rewritten manifest would differ in more than sample_index and tables; not written"
        )
    storage.put_bytes(m.url, new.encode("utf-8"), **so)
    _tidy(m.base_url, {""}, so)


__all__ = ["SPOOL_BYTES", "SplitUpgrade", "UpgradeError", "UpgradeReport", "add_checksums", "tables_ok"]
