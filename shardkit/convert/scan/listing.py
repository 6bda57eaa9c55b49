"""A listing file as SRC: a ``.csv``, ``.tsv`` or ``.jsonl`` of (path, label[, split], other fields...).

Columns are named by :class:`~shardkit.convert.options.ScanConfig`
(``--path-col``, ``--label-col``, ``--split-col``). Paths are relative to
``root`` (default: the listing's folder), absolute, or fsspec URLs; a relative
path that climbs above the root (``../x.jpg``) is refused in one line. Every
row is accounted for: it becomes a sample, or it is skipped with a reason:

* ``bad_row``: a CSV/TSV row with more or fewer fields than the header (its
  split is unknown: it is recorded in the first split); a header naming a
  column twice is refused in one line;
* ``missing_file``: an empty path, or no such file (found when the file is
  read, so that a listing gives the same keys on local disk and on object storage);
* ``duplicate_path``: the same path again (after normalising ``./``, ``a/../``
  and ``//``, and written once relative to the root and once absolute); ``duplicate_file``:
  another path to a file an earlier row listed through a symlink (real paths for local files,
  normalised URLs for remote ones). The first row naming a file decides it;
* ``no_label`` / ``bad_label``: see :func:`~shardkit.convert.scan.source.label_value`
  (empty; a list, float or bool) and :func:`~shardkit.convert.scan.source.read_labels`
  (a negative index under ``--label-type index``);
* ``bad_metadata``: other columns too large or deep for the sample's ``.json``
  (see :func:`~shardkit.convert.scan.source.extra_problem`);
* ``bad_target`` / ``no_text`` / ``bad_text``: a ``--target-col`` or ``--text-col`` cell
  that breaks its rule (:mod:`shardkit.convert.scan.values`).

Multi-label (``--label-sep``, ``--multi-label``): the label cell is a set of classes
(:func:`~shardkit.convert.scan.values.label_items`); an empty cell is a sample with no
class, a JSONL row without the label column ``no_label``. Checks run in the order path,
label, targets, text, other columns.

Other columns are kept in each sample's ``.json``. A split whose every row was
skipped is still returned (no files, its skips kept).

Labels (``--label-type``): ``name`` makes every label a class name (classes
sorted, as ImageFolder does); ``index`` reads integer class indices (classes
named ``"0"`` .. ``"K-1"``, ``K`` = largest index + 1); ``auto`` picks
``index`` when every label is an integer and ``name`` when none is, and
refuses a mix or integers without a 0. The summary says which was used.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import stat
from collections.abc import Iterator
from typing import Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig, valid_split_name
from shardkit.convert.scan.source import (
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    extra_problem,
    label_value,
    read_labels,
)
from shardkit.convert.scan.values import fields_of, label_items, read_label_sets, target_values, text_value
from shardkit.errors import ConvertError, ShardkitError
from shardkit.storage import fs as storage

#: file name endings read as listings
LISTING_SUFFIXES = (".csv", ".tsv", ".jsonl")
#: fields of a sample's ``.json`` that shardkit writes itself (a listing column may not use them)
RESERVED_FIELDS = ("path", "class", "width", "height")


def is_listing(src: str) -> bool:
    """True if ``src`` names a listing file (by its suffix)."""
    return src.lower().endswith(LISTING_SUFFIXES)


def _csv_rows(url: str, text: str) -> tuple[list[str], Iterator[tuple[int, dict[str, Any] | str]]]:
    """The header and ``(line number, row or why the row is bad)`` of a CSV/TSV; a repeated column name is a :class:`ConvertError`."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if url.lower().endswith(".tsv") else ",")
    header = next(reader, [])
    twice = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if twice is not None:
        raise ConvertError(
            f"{url}: the header names column {twice!r} twice; rename one of them so each column has its own name"
        )

    sep = "tab" if url.lower().endswith(".tsv") else "comma"

    def gen() -> Iterator[tuple[int, dict[str, Any] | str]]:
        for fields in reader:
            if not fields:  # a blank line
                continue
            if len(fields) != len(header):
                count = f"{len(fields)} field{'s' if len(fields) != 1 else ''}"
                yield reader.line_num, f"{count} but the header has {len(header)} (quote a field that holds a {sep})"
            else:
                yield reader.line_num, dict(zip(header, fields))

    return header, gen()


def _rows(url: str, text: str) -> tuple[list[str], Iterator[tuple[int, dict[str, Any] | str]]]:
    """The column names and ``(line number, row)`` pairs of a listing (a ``str`` in place of a row: why it is malformed)."""
    if not url.lower().endswith(".jsonl"):
        return _csv_rows(url, text)
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    rows: list[tuple[int, dict[str, Any] | str]] = []
    for n, line in lines:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ConvertError(
                f"{url}: line {n} is not valid JSON ({type(exc).__name__}: {str(exc)[:100]}); fix or remove that line"
            ) from None
        if not isinstance(row, dict):
            raise ConvertError(
                f'{url}: line {n} is not a JSON object; each line must be one object like {{"path": ..., "label": ...}}'
            )
        rows.append((n, row))
    columns = sorted({k for _, r in rows if isinstance(r, dict) for k in r})  # every row is a dict here
    return columns, iter(rows)


class _Where:
    """Where listed paths point: the sample identity and read location of a path, and the file it names."""

    def __init__(self, url: str, root: str):
        self.url, self.root = url, root
        self.local = storage.is_local(root)
        self.base = os.path.abspath(storage.local_path(root)) if self.local else root.split("://", 1)[1]
        self._dirs: dict[str, str] = {}  # folder -> its real path (a listing names many files per folder)

    def real(self, path: str) -> str:
        """``os.path.realpath(path)`` of a normalised local path, resolving each folder once (one ``lstat`` per file)."""
        folder, name = os.path.split(path)
        real_folder = self._dirs.get(folder)
        if real_folder is None:
            real_folder = self._dirs[folder] = os.path.realpath(folder)
        full = os.path.join(real_folder, name)
        try:
            return os.path.realpath(full) if stat.S_ISLNK(os.lstat(full).st_mode) else full
        except OSError:
            return full

    def plain(self, where: str) -> str:
        """The absolute, normalised path (symlinks not resolved) or normal URL of a read location."""
        if "://" in where or not self.local:
            return _normal_url(where) if "://" in where else where
        return os.path.normpath(os.path.abspath(storage.local_path(where)))

    def locate(self, n: int, path: str) -> tuple[str, str, str]:
        """``(identity, where to read, the file)`` of the path on line ``n``; a relative path climbing above the root is refused."""
        if "://" in path:
            return path, path, _normal_url(path)
        if path.startswith("/"):
            p = posixpath.normpath(path)
            return p, p, self.real(p)
        full = posixpath.normpath(posixpath.join(self.base.replace(os.sep, "/"), path.replace("\\", "/")))
        rel = posixpath.relpath(full, self.base.replace(os.sep, "/"))
        if rel == ".." or rel.startswith("../"):
            raise ConvertError(
                f"{self.url}: line {n}: path {path!r} leads outside the root {self.root} (--root); "
                "list it relative to a --root folder that holds every listed file, or by its absolute path"
            )
        where = storage.join(self.root, *rel.split("/"))
        return rel, where, self.real(storage.local_path(where)) if self.local else _normal_url(where)


def _normal_url(url: str) -> str:
    """``url`` with its scheme in lower case and its path normalised (``a/./b``, ``a//b``, ``a/x/../b``)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.lower()}://{posixpath.normpath(rest)}"


#: a usable row: line, identity, where, (label, target, text), split, extra fields
_Entry = tuple[int, str, str, Any, str, dict[str, Any]]


def scan_listing(url: str, opts: ScanConfig, split: str = "train", **storage_options: Any) -> ScannedSource:
    """Read the listing at ``url`` (see module docstring); :class:`ConvertError` for a listing that cannot be used."""
    rows, used = _listing_rows(url, opts, **storage_options)
    root = opts.root if opts.root is not None else (posixpath.dirname(url) if "://" in url else _dirname(url))
    places = _Where(url, root)
    entries, skipped, bad_rows = _entries(url, rows, used, places, opts, split)
    if not entries:
        first = next((d for sk in [*skipped.values(), bad_rows] for _, _, d in sk), "the listing has no rows")
        raise ConvertError(f"{url}: no row with a usable path and label (e.g. {first})")
    where_labels = [(f"line {e[0]}", e[3][0]) for e in entries]
    classes: list[str]
    indices: list[Any]
    ltype: Any
    if not opts.labelled:
        classes, indices, ltype = [], [()] * len(entries), None
    elif opts.is_multi_label:
        classes, indices, ltype = read_label_sets(url, where_labels, opts.label_type)
    else:
        classes, indices, ltype = read_labels(url, where_labels, opts.label_type)
    good = []
    for (n, ident, where, values, s, extra), index in zip(entries, indices):
        if index is None:
            skipped.setdefault(s, []).append(
                (ident, SkipReason.BAD_LABEL, f"line {n}: {values[0]!r} is not a class index (0, 1, ...)")
            )
        else:
            good.append((ident, where, (index, *values[1:]), s, extra))
    names = sorted({g[3] for g in good} | set(skipped)) or [split]
    if bad_rows:  # a malformed row's split column cannot be trusted: its skip is recorded in the first split
        skipped.setdefault(names[0], []).extend(bad_rows)
    splits = {s: SplitSource(name=s, directory=url, files=[], skipped=skipped.get(s, [])) for s in names}
    multi = opts.is_multi_label
    for ident, where, (index, target, text), s, extra in good:  # a missing file is found when read (same keys anywhere)
        size = (_local_size(where) or 0) if storage.is_local(where) else 0
        label = index if opts.labelled and not multi else None
        labels = index if multi else None
        splits[s].files.append(SourceFile(ident, label, size, where, extra or None, labels, target, text))
    if not good:
        first = next(d for sp in splits.values() for _, _, d in sp.skipped)
        raise ConvertError(f"{url}: no row with a usable path and label (e.g. {first})")
    for sp in splits.values():  # every split, also one whose every row was skipped (files=[]): the job reports it
        sp.close(classes)
    if ltype is None:
        note = "no labels (--no-label)"
    else:
        kind = "class names" if ltype.value == "name" else "class indices"
        sets = " (sets of classes: multi-label)" if multi else ""
        note = f"labels read as {kind}{sets} (--label-type {ltype.value}): {len(classes)} classes"
    return ScannedSource(
        root=url,
        classes=classes,
        splits=list(splits.values()),
        nested=bool(opts.split_col),
        reader=Reader(root, storage_options),
        notes=[note],
        fields=fields_of(opts.labelled, multi, bool(opts.target_cols), opts.text_col is not None),
        targets=list(opts.target_cols),
    )


def _listing_rows(
    url: str, opts: ScanConfig, **storage_options: Any
) -> tuple[Iterator[tuple[int, dict[str, Any] | str]], set[str]]:
    """The rows of the listing at ``url`` (a row that cannot be read: its problem) and the columns the options
    name; refuses a listing that is not UTF-8, lacks a named column or has a column shardkit writes itself."""
    try:
        raw = storage.read_bytes(url, **storage_options)
    except ShardkitError as exc:
        raise ConvertError(f"cannot read the listing: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConvertError(f"{url}: not UTF-8 text ({exc}); save the listing as UTF-8") from None
    columns, rows = _rows(url, text)
    wanted = (
        [("--path-col", opts.path_col)]
        + ([("--label-col", opts.label_col)] if opts.labelled else [])
        + ([("--split-col", opts.split_col)] if opts.split_col else [])
        + [("--target-col", c) for c in opts.target_cols]
        + ([("--text-col", opts.text_col)] if opts.text_col else [])
    )
    for flag, col in wanted:
        if col not in columns:
            raise ConvertError(f"{url}: no column {col!r} ({flag}); its columns are: {', '.join(columns) or '(none)'}")
    used = {c for _, c in wanted}
    clash = [c for c in columns if c not in used and c in RESERVED_FIELDS]
    if clash:
        raise ConvertError(
            f"{url}: column {clash[0]!r} would overwrite the field shardkit writes in each sample's .json; rename it"
        )
    return rows, used


def _entries(
    url: str,
    rows: Iterator[tuple[int, dict[str, Any] | str]],
    used: set[str],
    places: _Where,
    opts: ScanConfig,
    split: str,
) -> tuple[list[_Entry], dict[str, list[tuple[str, SkipReason, str]]], list[tuple[str, SkipReason, str]]]:
    """The rows that list a usable file, each split's skipped rows with their reasons, and the malformed rows
    (their split is not known): a missing path, a path or file listed before, a bad target or text, extra columns
    that cannot go into a ``.json``."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    entries: list[_Entry] = []
    skipped: dict[str, list[tuple[str, SkipReason, str]]] = {}
    bad_rows: list[tuple[str, SkipReason, str]] = []  # malformed rows: their split is not known
    seen: dict[str, int] = {}  # identity -> line
    files: dict[str, tuple[int, str, str]] = {}  # the file (real path, normal URL) -> (line, identity, plain path)
    for n, row in rows:
        if isinstance(row, str):
            bad_rows.append((f"{name}:{n}", SkipReason.BAD_ROW, f"line {n}: {row}"))
            continue
        s = row.get(opts.split_col) if opts.split_col else None
        s = split if s in (None, "") else str(s).strip()
        if not valid_split_name(s):
            raise ConvertError(
                f"{url}: line {n}: split {s!r} ({opts.split_col}) must use letters, digits, '_', '-' and '.'"
            )
        path = row.get(opts.path_col)
        if path in (None, "") or not isinstance(path, str) or not path.strip():
            skipped.setdefault(s, []).append(
                (f"{name}:{n}", SkipReason.MISSING_FILE, f"line {n}: no path in column {opts.path_col!r}")
            )
            continue
        ident, where, real = places.locate(n, path.strip())
        if ident in seen:
            skipped.setdefault(s, []).append(
                (f"{ident} ({name}:{n})", SkipReason.DUPLICATE_PATH, f"line {n}: already listed on line {seen[ident]}")
            )
            continue
        seen[ident] = n
        plain = places.plain(where)
        if real in files:
            first_line, other, other_plain = files[real]
            same_path = plain == other_plain  # the same path written twice (absolute and relative), no symlink
            skipped.setdefault(s, []).append(
                (
                    f"{ident} ({name}:{n})",
                    SkipReason.DUPLICATE_PATH if same_path else SkipReason.DUPLICATE_FILE,
                    f"line {n}: the same path as {other} (line {first_line}), written another way"
                    if same_path
                    else f"line {n}: the same file as {other}, listed on line {first_line} (through a symlink)",
                )
            )
            continue
        files[real] = (n, ident, plain)
        skip, values = _row_fields(row, opts)
        if skip is not None:
            skipped.setdefault(s, []).append((ident, skip[0], f"line {n}: {skip[1]}"))
            continue
        extra = {k: v for k, v in row.items() if k not in used}
        problem = extra_problem(extra)
        if problem:
            skipped.setdefault(s, []).append((ident, SkipReason.BAD_METADATA, f"line {n}: {problem}"))
            continue
        entries.append((n, ident, where, values, s, extra))
    return entries, skipped, bad_rows


def _row_fields(row: dict[str, Any], opts: ScanConfig) -> tuple[tuple[SkipReason, str] | None, tuple[Any, Any, Any]]:
    """``(None, (label or class items, target, text))`` of a listing row, or ``((reason, why), ...)`` for a skip."""
    label: Any = None
    if opts.labelled and opts.is_multi_label:
        raw = row.get(opts.label_col)
        if opts.label_col not in row:  # a JSONL row without the column (an empty cell is a sample with no class)
            return (SkipReason.NO_LABEL, f"no {opts.label_col!r}"), (None, None, None)
        label, reason = label_items(raw, opts.label_sep)
        if reason is not None:
            return (reason, f"{raw!r} is not a set of class names or indices"), (None, None, None)
    elif opts.labelled:
        label, reason = label_value(row.get(opts.label_col))
        if reason is SkipReason.NO_LABEL:
            return (reason, f"empty {opts.label_col!r}"), (None, None, None)
        if reason is not None:
            return (reason, f"{row.get(opts.label_col)!r} is not a class name or index"), (None, None, None)
    target, why = target_values(row.get, opts.target_cols) if opts.target_cols else (None, "")
    if why:
        return (SkipReason.BAD_TARGET, why), (None, None, None)
    text = None
    if opts.text_col is not None:
        text, reason, why = text_value(row.get(opts.text_col))
        if reason is not None:
            return (reason, f"{why} in column {opts.text_col!r}"), (None, None, None)
    return None, (label, target, text)


def _dirname(path: str) -> str:
    return os.path.dirname(storage.local_path(path)) or "."


def _local_size(path: str) -> int | None:
    try:
        return os.stat(storage.local_path(path)).st_size
    except OSError:
        return None
