"""``convert --append DEST --remove FILE --relabel FILE``: record removals and relabels as a new generation.

No shard is rewritten: the corrections become the new generation's corrections file
(:class:`~shardkit.format.generations.CorrectionRows`, ``<split>-g<N:06d>.corrections.json``), which every reader
applies through :func:`shardkit.format.snapshot.resolve`. The generation adds no shard (its key and per-sample
tables are empty); the manifest, now version 4, is replaced atomically after the files it names are written, so
a killed run leaves the split as it was and rerunning the command finishes it (a finished one is not recorded
twice).

``--remove FILE``: one sample per line, its key or its original relative path (a path that several samples share,
say the same ``cat/001.jpg`` appended in two generations, removes every one of them, and the result says so).
``--relabel FILE``: ``key,class`` rows; a class the split does not have yet is added at the end of its classes.
A line naming no sample of the split is refused with its file, line number and text.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional

from shardkit.errors import ConvertError, ShardkitError
from shardkit.format.generations import CorrectionRows, Corrections, Generation, corrections_name
from shardkit.format.manifest import MANIFEST_NAME, Manifest, load_manifest, save_manifest
from shardkit.format.snapshot.pin import corrections_of, generations_of
from shardkit.format.tablebuild import write_tables
from shardkit.format.tables import TABLES_FORMAT, KeyTable, checked, read_samples_table
from shardkit.storage import fs as storage


@dataclass
class Corrected:
    """What :func:`correct` recorded.

    Attributes:
        manifest: the split's manifest afterwards.
        generation: the generation holding the corrections (an earlier one when they were recorded already).
        removed: keys removed.
        relabeled: keys relabelled.
        added_classes: classes the relabels added.
        notes: facts to tell (a path naming several samples).
        recorded: ``False`` when the newest generation already held exactly these corrections.
    """

    manifest: Manifest
    generation: int
    removed: int = 0
    relabeled: int = 0
    added_classes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recorded: bool = True


def split_url_of(dest: str, split: str, storage_options: dict) -> str:
    """The split folder corrections go to: ``dest`` if it holds a split, else ``dest/<split>``."""
    import json

    from shardkit.format.snapshot.selection import SELECTION_FORMAT

    murl = storage.join(dest, MANIFEST_NAME)
    if storage.exists(murl, **storage_options):
        try:
            fmt = json.loads(storage.read_bytes(murl, **storage_options)).get("format")
        except (ValueError, UnicodeDecodeError, AttributeError):
            fmt = None
        if fmt == SELECTION_FORMAT:
            raise ConvertError(
                f"{dest} is a selection (shardkit select), not a dataset: correct the dataset it was taken from"
            )
        return dest
    return storage.join(dest, split)


def _index(m: Manifest, so: dict) -> tuple[set[str], dict[str, list[str]]]:
    """Every key of every generation of ``m``, and original path -> keys."""
    keys: set[str] = set()
    paths: dict[str, list[str]] = {}
    base = m.base_url
    for g in generations_of(m):
        t = g.tables
        if not t or t.get("format") != TABLES_FORMAT:
            raise ConvertError(
                f"{base}: generation {g.number} has no key table, which corrections need: run `shardkit index {base}`"
            )
        try:
            kurl = storage.join(base, t["keys"]["name"])
            table = KeyTable.from_bytes(checked(storage.read_bytes(kurl, **so), t["keys"], kurl), kurl)
            surl = storage.join(base, t["samples"]["name"])
            _, rows = read_samples_table(checked(storage.read_bytes(surl, **so), t["samples"], surl), surl)
            for row in rows:
                paths.setdefault(row.get("path") or "", []).append(row["key"])
        except ShardkitError as exc:
            raise ConvertError(str(exc)) from None
        keys.update(k.decode("utf-8") for k in table.keys.tolist())
    return keys, paths


def _lines(path: str) -> list[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            return [(i, line.strip()) for i, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConvertError(f"{path}: cannot read ({exc})") from None


def read_removals(path: str, keys: set[str], paths: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """``(keys removed, notes)`` of a ``--remove`` file (a line is a key if the split has it, else a path)."""
    out: list[str] = []
    notes: list[str] = []
    for n, line in _lines(path):
        if line in keys:
            out.append(line)
        elif line in paths:
            named = paths[line]
            if len(named) > 1:
                notes.append(f"{path}:{n}: {line} names {len(named)} samples ({', '.join(named)}): all removed")
            out += named
        else:
            raise ConvertError(
                f"{path}:{n}: {line!r} is neither a key nor an original path of a sample of the split; fix the line"
            )
    return sorted(set(out)), notes


def read_relabels(path: str, keys: set[str]) -> list[tuple[str, str]]:
    """The ``(key, class)`` rows of a ``--relabel`` file (the last row of a key wins)."""
    rows: dict[str, str] = {}
    for n, line in _lines(path):
        cells = next(csv.reader([line]))
        if len(cells) != 2 or not cells[0].strip() or not cells[1].strip():
            raise ConvertError(f"{path}:{n}: {line!r} is not a 'key,class' row; fix the line")
        key, name = cells[0].strip(), cells[1].strip()
        if key not in keys:
            raise ConvertError(f"{path}:{n}: key {key!r} is not a sample of the split; fix the line")
        rows[key] = name
    return sorted(rows.items())


def _same_as_latest(m: Manifest, rows: CorrectionRows, so: dict) -> bool:
    g = generations_of(m)[-1]
    if g.corrections is None or g.shards:
        return False
    data = storage.read_bytes(storage.join(m.base_url, g.corrections.name), **so)
    had = corrections_of(m, g.number, data)
    return (sorted(had.removed), sorted(had.relabeled)) == (sorted(rows.removed), sorted(rows.relabeled))


def correct(
    dest: str,
    *,
    remove: Optional[str] = None,
    relabel: Optional[str] = None,
    split: str = "train",
    storage_options: Optional[dict[str, Any]] = None,
) -> Corrected:
    """Record the removals in file ``remove`` and the relabels in file ``relabel`` as a new generation of a split.

    Args:
        dest: the split folder, or the dataset folder holding ``split``.
        remove: a file of keys or original relative paths, one per line.
        relabel: a file of ``key,class`` rows.
        split: the split of a dataset folder ``dest``.
        storage_options: fsspec options for ``dest``.

    Raises:
        ConvertError: ``dest`` is a selection or holds no such split; a line names no sample; a relabel in a split
            without a single label.
    """
    so = dict(storage_options or {})
    if remove is None and relabel is None:
        raise ConvertError("give --remove FILE and/or --relabel FILE to correct a split")
    url = split_url_of(dest, split, so)
    m = load_manifest(url, **so)
    keys, paths = _index(m, so)
    removed, notes = read_removals(remove, keys, paths) if remove else ([], [])
    relabels = read_relabels(relabel, keys) if relabel else []
    if relabels and "label" not in m.fields:
        raise ConvertError(f"{relabel}: split {m.split} has no single class label (fields {m.fields}) to relabel")
    classes = list(m.classes)
    added = [c for c in dict.fromkeys(name for _, name in relabels) if c not in classes]
    classes += added
    rows = CorrectionRows(tuple(removed), tuple(relabels))
    gens = [dataclasses.replace(g, tables=g.tables or (m.tables if g.number == 0 else {})) for g in generations_of(m)]
    if _same_as_latest(m, rows, so):
        return Corrected(m, gens[-1].number, len(removed), len(relabels), [], notes, recorded=False)
    number = len(gens)
    data = rows.to_bytes(m.split, number)
    name = corrections_name(m.split, number)
    storage.put_bytes(storage.join(url, name), data, **so)
    tables = write_tables(url, m.split, [], number, **so)  # a generation without shards: empty tables
    gen = Generation(
        number=number,
        shards=0,
        samples=0,
        classes=len(classes),
        class_counts=[0] * len(classes) if m.class_counts else [],
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        tables=tables,
        corrections=Corrections(name, len(data), hashlib.sha256(data).hexdigest(), len(removed), len(relabels)),
    )
    out = dataclasses.replace(
        m,
        classes=classes,
        class_counts=list(m.class_counts) + [0] * len(added) if m.class_counts else [],
        tables={},
        generations=[*gens, gen],
    )
    save_manifest(out, url, **so)  # last, atomically
    out.url = m.url
    return Corrected(out, number, len(removed), len(relabels), added, notes)


__all__ = ["Corrected", "correct", "read_relabels", "read_removals", "split_url_of"]
