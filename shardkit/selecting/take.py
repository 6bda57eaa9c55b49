"""``shardkit.select``: write a selection of a split's samples chosen by class, lists of keys or paths, and a
``where`` predicate, reading only the per-sample tables.

The samples in are those of the split (as of its newest generation, or ``generation``) that are not removed by
a correction, of one of ``classes`` (each sample's class as of that generation), named by the ``include`` list,
satisfying ``where`` (:mod:`shardkit.selecting.where`), and not named by the ``exclude`` list; an option left
out does not narrow. The result is a selection folder (:mod:`shardkit.format.snapshot.selection`): the bits of the
samples in, never the criteria as something to run (they are recorded for people in ``criteria``).

Selecting from a selection selects within it: the URL is resolved (its parent checked), the criteria narrow the
samples it holds, and the new selection is written over the same parent split and generation, so no reader
ever follows a chain of selections. Why it works this way: ``docs/design/selections.md``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from shardkit.format.manifest import MANIFEST_NAME
from shardkit.format.snapshot import Snapshot, read_manifest, resolve
from shardkit.format.snapshot.selection import Selection, write_selection
from shardkit.selecting.rows import SelectError, Unknown, match_entries, read_entries, table_rows
from shardkit.selecting.where import Node, check_fields, evaluate, parse
from shardkit.storage import fs as storage

ListSource = Union[str, "os.PathLike[str]", Iterable[str]]
#: classes named in the summary line before the rest are counted as "+N more classes"
SUMMARY_CLASSES = 12


@dataclass(frozen=True)
class Selected:
    """What :func:`select` wrote.

    Attributes:
        selection: the selection's manifest (``selection.url`` is where it lies).
        source: the URL selected from (a split or a selection).
        total: samples in ``source`` (at the selection's generation, removed ones left out).
        per_class: samples in per class name, in class order (``{}`` for a split without single labels).
        unknown: list entries that named no sample (counted with ``unknown="count"``).
        outside: list entries naming samples that are not in ``source`` (removed, or outside its selection).
    """

    selection: Selection
    source: str
    total: int
    per_class: dict[str, int]
    unknown: int = 0
    outside: int = 0

    def summary(self) -> str:
        """One line: samples in of total, per class."""
        s = self.selection
        line = f"selected {s.samples} of {self.total} samples of {self.source} (generation {s.generation})"
        if self.per_class:
            parts = [f"{c} {n}" for c, n in self.per_class.items() if n]
            more = len(parts) - SUMMARY_CLASSES
            line += ": " + (", ".join(parts[:SUMMARY_CLASSES]) or "none")
            if more > 0:
                line += f", +{more} more classes"
        if self.unknown:
            line += f"; {self.unknown} list entries named no sample"
        if self.outside:
            line += f"; {self.outside} list entries name samples not in {self.source}"
        return line


def _list_record(source: ListSource, entries: Sequence[tuple[str, str]]) -> dict[str, Any]:
    text = "\n".join(e for _, e in entries).encode("utf-8")
    rec: dict[str, Any] = {"entries": len(entries), "sha256": hashlib.sha256(text).hexdigest()}
    if isinstance(source, (str, os.PathLike)):
        rec["file"] = os.fspath(source)
    return rec


def _check_out(out: str, **storage_options: Any) -> None:
    murl = storage.join(out, MANIFEST_NAME)
    if not storage.exists(murl, **storage_options):
        return
    try:
        found = read_manifest(out, **storage_options)
    except Exception:  # noqa: BLE001 - whatever it is, it is not a selection to replace
        found = None
    if not isinstance(found, Selection):
        raise SelectError(f"{out} holds a manifest that is not a selection; write the selection to another folder")


def _class_mask(
    url: str, snap: Snapshot, rows: Sequence[dict[str, Any]], classes: Union[str, Sequence[str]]
) -> tuple[np.ndarray, list[str]]:
    """The rows of one of ``classes`` (by class name), and the names as recorded in the criteria.

    Raises:
        SelectError: the split has no class names, or not one of those named.
    """
    names = [classes] if isinstance(classes, str) else list(classes)
    if not snap.manifest.classes:
        raise SelectError(f"{url} has no class names (no single label per sample); select with where= instead")
    bad = [c for c in names if c not in snap.manifest.classes]
    if bad:
        raise SelectError(
            f"{url} has no class {bad[0]!r} (generation {snap.generation}); its classes: "
            + ", ".join(snap.manifest.classes[:30])
            + (" ..." if len(snap.manifest.classes) > 30 else "")
        )
    wanted = set(names)
    return np.fromiter((r.get("class") in wanted for r in rows), bool, len(rows)), names


def _where_mask(where: str, tree: Node, rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """The rows satisfying ``tree``, the parsed ``where`` (its field names checked first against the rows' meta fields)."""
    known = {k for r in rows for k in (r.get("meta") or {})}
    check_fields(tree, where, known)
    return np.fromiter((evaluate(tree, r) for r in rows), bool, len(rows))


def _per_class(classes: Sequence[str], rows: list[dict[str, Any]], keep: np.ndarray) -> dict[str, int]:
    """Rows kept per class name, in class order."""
    counts: dict[Any, int] = {}
    for r in (rows[i] for i in np.flatnonzero(keep)):
        counts[r.get("class")] = counts.get(r.get("class"), 0) + 1
    return {c: counts.get(c, 0) for c in classes}


def select(
    url: str,
    *,
    out: str,
    classes: Optional[Sequence[str]] = None,
    include: Optional[ListSource] = None,
    exclude: Optional[ListSource] = None,
    where: Optional[str] = None,
    generation: Optional[int] = None,
    unknown: Unknown = "refuse",
    storage_options: Optional[dict[str, Any]] = None,
) -> Selected:
    """Write into the folder ``out`` the selection of the samples of ``url`` chosen by the criteria.

    Args:
        url: a split folder, a selection folder (select within it), or either's ``manifest.json``.
        out: the selection folder to write (a selection there is replaced; a split there is refused).
        classes: keep samples of these class names (``None``: every class).
        include: keep only the samples a list names: a file of sample keys or source relative paths, one per
            line (blank lines and ``#`` comments skipped), or an iterable of them.
        exclude: leave out the samples such a list names.
        where: a predicate over the per-sample table's columns and meta fields (:mod:`shardkit.selecting.where`).
        generation: the generation of the split to select from (``None``: the newest; a selection: its own).
        unknown: a list entry naming no sample: ``"refuse"`` (a one-line error naming its line) or ``"count"``.
        storage_options: passed to fsspec.

    Returns:
        :class:`Selected`; ``summary()`` is the line ``shardkit select`` prints.

    Raises:
        SelectError: no sample selected (nothing is written), an unknown class or list entry, a malformed ``where`` (:class:`~shardkit.selecting.where.WhereError`),
            ``out`` holding a split.
        ManifestError: no such generation; a selection whose parent changed underneath it.
        TableError: the split has no per-sample table (build it with ``shardkit index``).
    """
    so = dict(storage_options or {})
    if unknown not in ("refuse", "count"):
        raise ValueError(f"unknown must be 'refuse' or 'count', not {unknown!r}")
    tree = parse(where) if where is not None else None  # a malformed expression fails before any read
    snap = resolve(url, generation=generation, **so)
    parent = snap.selection.parent if snap.selection is not None else snap.url
    table = table_rows(snap, **so)
    rows = table.rows
    keep = table.kept.copy()
    criteria: dict[str, Any] = {}
    if snap.selection is not None:
        criteria["within"] = {"url": str(url), "samples": snap.selection.samples, "criteria": snap.selection.criteria}
    if classes is not None:
        in_classes, criteria["classes"] = _class_mask(str(url), snap, rows, classes)
        keep &= in_classes
    missing = outside = 0
    for what, source in (("include", include), ("exclude", exclude)):
        if source is None:
            continue
        entries = read_entries(source, what)
        named, n = match_entries(entries, rows, unknown=unknown, what=what, url=str(url))
        missing += n
        outside += int((named & ~table.kept).sum())
        keep &= named if what == "include" else ~named
        criteria[what] = _list_record(source, entries)
    if tree is not None:
        assert where is not None
        keep &= _where_mask(where, tree, rows)
        criteria["where"] = where
    if include is not None or exclude is not None:
        criteria["unknown"] = unknown
    if not keep.any():
        raise SelectError(f"the criteria select no sample of {url} (generation {snap.generation}); nothing written")
    _check_out(out, **so)
    sel = write_selection(parent, keep, out, generation=snap.generation, criteria=criteria, **so)
    per_class = _per_class(snap.manifest.classes, rows, keep) if snap.manifest.classes else {}
    return Selected(sel, str(url), int(table.kept.sum()), per_class, missing, outside)


__all__ = ["Selected", "select"]
