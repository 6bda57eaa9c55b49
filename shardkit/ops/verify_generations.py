"""``shardkit info`` and ``shardkit verify`` on a split's generations, and on a selection.

* :func:`generations_info`: one row per generation (shards, samples, classes added, duplicates skipped, removed,
  relabelled, when) and the split's counts after every correction (samples and per-class counts as a reader
  gets them, :func:`shardkit.format.snapshot.resolve`'s subset applied to the stored labels of the per-sample
  tables);
* :func:`generation_problems`: every generation's key and per-sample tables and corrections file against the
  manifest (size, sha256, the keys and classes a corrections file names), and keys unique over all generations;
* :func:`generation_strays`: table and corrections files in the split folder that no generation names (left by
  an unfinished append: ``shardkit convert --append ... --overwrite`` discards them);
* :func:`selection_info`: what a selection reads of its parent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.format.generations import is_corrections_name
from shardkit.format.manifest import Manifest
from shardkit.format.snapshot.pin import generations_of
from shardkit.format.tables import TABLES_FORMAT, KeyTable, checked, is_table_name, read_samples_table
from shardkit.storage import fs as storage


@dataclass
class GenerationRow:
    """One generation as ``shardkit info`` shows it."""

    number: int
    shards: int
    samples: int
    classes_added: list[str]
    duplicates: int
    removed: int
    relabeled: int
    created: str


@dataclass
class GenerationsInfo:
    """A split's generations and its counts after corrections (``class_counts`` ``[]``: no single label)."""

    generations: list[GenerationRow]
    samples: int
    class_counts: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "generations": [asdict(g) for g in self.generations],
            "samples_after_corrections": self.samples,
            "class_counts_after_corrections": self.class_counts,
        }


def _read(url: str, so: dict) -> bytes:
    return storage.read_bytes(url, **so)


def stored_classes(m: Manifest, so: dict) -> Optional[list[Optional[str]]]:
    """The stored class name of every sample of ``m`` in split order (from the per-sample tables), or ``None``
    when a generation has none."""
    out: list[Optional[str]] = []
    for g in generations_of(m):
        t = g.tables
        if not t or t.get("format") != TABLES_FORMAT:
            return None
        url = storage.join(m.base_url, t["samples"]["name"])
        _, rows = read_samples_table(checked(_read(url, so), t["samples"], url), url)
        out += [r.get("class") for r in rows]
    return out


def generations_info(m: Manifest, **storage_options: Any) -> GenerationsInfo:
    """The generations of ``m`` and its counts after corrections.

    Raises:
        ShardkitError: a table or corrections file is missing or damaged (``shardkit verify`` names which).
    """
    from shardkit.format.snapshot import resolve

    gens = generations_of(m)
    rows = []
    for i, g in enumerate(gens):
        before = gens[i - 1].classes if i else 0
        c = g.corrections
        rows.append(
            GenerationRow(
                g.number,
                g.shards,
                g.samples,
                m.classes[before : g.classes],
                g.duplicates,
                c.removed if c else 0,
                c.relabeled if c else 0,
                g.created,
            )  # fmt: skip
        )
    if not any(g.corrections for g in gens):
        return GenerationsInfo(rows, m.num_samples, list(m.class_counts))
    snap = resolve(m)
    counts: list[int] = []
    names = stored_classes(m, storage_options) if m.class_counts else None
    if names is not None:
        index = {c: i for i, c in enumerate(m.classes)}
        mask = snap.subset.mask(m.shard_sizes)
        labels = np.array([index.get(n, -1) if n is not None else -1 for n in names], np.int64)
        offsets = np.concatenate([[0], np.cumsum(m.shard_sizes)]).astype(np.int64)
        for shard, changed in enumerate(snap.subset.relabels):
            for pos, cls in changed.items():
                labels[offsets[shard] + pos] = cls
        tally = Counter(labels[mask].tolist())
        counts = [tally.get(i, 0) for i in range(len(m.classes))]
    return GenerationsInfo(rows, snap.num_samples, counts)


def generation_problems(m: Manifest, **storage_options: Any) -> list[tuple[str, str]]:
    """``(file, what is wrong)`` for every table and corrections file of every generation of ``m``."""
    from shardkit.format.snapshot import corrected
    from shardkit.format.snapshot.pin import shard_span

    so = storage_options
    out: list[tuple[str, str]] = []
    seen: set[bytes] = set()
    tables_ok = True
    for g in generations_of(m):
        t = g.tables
        if not t or t.get("format") != TABLES_FORMAT:
            tables_ok = False
            continue
        first, stop = shard_span(m, g.number)
        for part in ("keys", "samples"):
            name = t[part]["name"]
            url = storage.join(m.base_url, name)
            try:
                data = checked(_read(url, so), t[part], url)
                if part == "keys":
                    table = KeyTable.from_bytes(data, url)
                    table.check(m.shard_sizes[first:stop], url)
                    dup = seen.intersection(table.keys.tolist())
                    if dup:
                        out.append((name, f"key {sorted(dup)[0]!r} is also a key of an earlier generation"))
                    seen.update(table.keys.tolist())
                else:
                    _, rows = read_samples_table(data, url)
                    n = sum(1 for _ in rows)
                    if n != g.samples:
                        out.append((name, f"{n} rows for generation {g.number}'s {g.samples} samples"))
            except ShardkitError as exc:
                tables_ok = False
                out.append((name, str(exc)))
    if any(g.corrections for g in generations_of(m)):
        if not tables_ok:
            out.append(("manifest.json", "corrections cannot be checked without every generation's key table"))
        else:
            try:
                corrected(m, lambda u: _read(u, so))
            except ShardkitError as exc:
                out.append(("manifest.json", str(exc)))
    return out


def generation_strays(m: Manifest, **storage_options: Any) -> list[str]:
    """Table and corrections files of ``m``'s split that no generation names (sorted)."""
    named = set()
    for g in generations_of(m):
        if g.tables and g.tables.get("format") == TABLES_FORMAT:
            named |= {g.tables["keys"]["name"], g.tables["samples"]["name"]}
        if g.corrections is not None:
            named.add(g.corrections.name)
    files = storage.list_dir(m.base_url, **storage_options)[1]
    if not storage.is_local(m.base_url):  # leave no listing in the client's cache (see shardkit.ops.strays)
        fs, path = storage.get_fs(m.base_url, **storage_options)
        fs.invalidate_cache(path)
    return sorted(f for f in files if (is_table_name(m.split, f) or is_corrections_name(m.split, f)) and f not in named)


@dataclass
class SelectionInfo:
    """What a selection reads: its parent, the generation, samples in, and the parent shards it reads."""

    url: str
    parent: str
    generation: int
    samples: int
    stored: int
    shards_read: list[int]
    manifest: Manifest

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "selection": self.url,
            "parent": self.parent,
            "generation": self.generation,
            "samples": self.samples,
            "parent_samples": self.stored,
            "parent_shards_read": [self.manifest.shards[i].name for i in self.shards_read],
        }


def is_selection(url: str, **storage_options: Any) -> bool:
    """Whether ``url`` (a folder or its ``manifest.json``) holds a selection."""
    import json

    from shardkit.format.manifest import manifest_url
    from shardkit.format.snapshot.selection import SELECTION_FORMAT

    murl = manifest_url(url)
    try:
        d = json.loads(storage.read_bytes(murl, **storage_options))
    except (ShardkitError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(d, dict) and d.get("format") == SELECTION_FORMAT


def selection_info(url: str, **storage_options: Any) -> SelectionInfo:
    """Resolve the selection at ``url`` (checking its parent's fingerprint and its bits file).

    Raises:
        ManifestError: its parent changed, or its files are damaged (the message says what to do).
    """
    from shardkit.format.snapshot import resolve

    snap = resolve(url, **storage_options)
    assert snap.selection is not None
    sizes = snap.shard_sizes
    return SelectionInfo(
        url,
        snap.selection.parent,
        snap.generation,
        snap.num_samples,
        snap.manifest.num_samples,
        [i for i, n in enumerate(sizes) if n],
        snap.manifest,
    )


__all__ = [
    "GenerationRow",
    "GenerationsInfo",
    "SelectionInfo",
    "generation_problems",
    "generation_strays",
    "generations_info",
    "is_selection",
    "selection_info",
    "stored_classes",
]
