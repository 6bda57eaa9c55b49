"""A listing file as SRC: a ``.csv``, ``.tsv`` or ``.jsonl`` of (path, label[, split], other fields...).

Columns are named by :class:`~shardkit.convert.options.SourceOptions`
(``--path-col``, ``--label-col``, ``--split-col``). Paths are relative to
``root`` (default: the listing's folder), absolute, or fsspec URLs. Every row
is accounted for: it becomes a sample, or it is skipped with a reason: empty
path or no such file (``missing_file``, found when the file is read, so that
a listing gives the same keys on local disk and on object storage), empty label (``no_label``), a label that is not a valid index
(``bad_label``), a path already listed by an earlier row (``duplicate_path``).
Other columns are kept in each sample's ``.json`` (a row whose other columns are too large or
deep for it is ``bad_metadata``, see :func:`~shardkit.convert.source.extra_problem`).

Labels (``--label-type``): ``name`` makes every label a class name (classes
sorted, as ImageFolder does); ``index`` reads integer class indices (classes
named ``"0"`` .. ``"K-1"``, ``K`` = largest index + 1); ``auto`` picks
``index`` when every label is an integer and ``name`` when none is, and
refuses a mix. The summary says which was used.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
from typing import Any, Iterator

from .. import storage
from ..errors import ConvertError, ShardkitError
from .imageproc import SkipReason
from .options import SourceOptions, valid_split_name
from .source import Reader, Source, SourceFile, SplitSource, extra_problem, read_labels

#: file name endings read as listings
LISTING_SUFFIXES = (".csv", ".tsv", ".jsonl")
#: fields of a sample's ``.json`` that shardkit writes itself (a listing column may not use them)
RESERVED_FIELDS = ("path", "class", "width", "height")


def is_listing(src: str) -> bool:
    """True if ``src`` names a listing file (by its suffix)."""
    return src.lower().endswith(LISTING_SUFFIXES)


def _rows(url: str, text: str) -> tuple[list[str], Iterator[tuple[int, dict[str, Any]]]]:
    """The column names and ``(line number, row)`` pairs of a listing."""
    if url.lower().endswith(".jsonl"):
        lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
        rows = []
        for n, line in lines:
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise ConvertError(f"{url}: line {n} is not valid JSON ({type(exc).__name__}: {str(exc)[:100]}); fix or remove that line") from None
            if not isinstance(row, dict):
                raise ConvertError(f"{url}: line {n} is not a JSON object; each line must be one object like {{\"path\": ..., \"label\": ...}}")
            rows.append((n, row))
        columns = sorted({k for _, r in rows for k in r})
        return columns, iter(rows)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if url.lower().endswith(".tsv") else ",")
    columns = list(reader.fieldnames or [])

    def gen() -> Iterator[tuple[int, dict[str, Any]]]:
        for row in reader:
            yield reader.line_num, {k: v for k, v in row.items() if k is not None}

    return columns, gen()


def _location(root: str, path: str) -> tuple[str, str]:
    """``(identity, where to read)`` of a listed path."""
    if "://" in path:
        return path, path
    if path.startswith("/"):
        p = posixpath.normpath(path)
        return p, p
    rel = posixpath.normpath(path.replace("\\", "/"))
    return rel, storage.join(root, *rel.split("/"))


def scan_listing(url: str, opts: SourceOptions, split: str = "train", **storage_options: Any) -> Source:
    """Read the listing at ``url`` (see module docstring); :class:`ConvertError` for a listing that cannot be used."""
    try:
        raw = storage.read_bytes(url, **storage_options)
    except ShardkitError as exc:
        raise ConvertError(f"cannot read the listing: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConvertError(f"{url}: not UTF-8 text ({exc}); save the listing as UTF-8") from None
    columns, rows = _rows(url, text)
    wanted = [("--path-col", opts.path_col), ("--label-col", opts.label_col)] + ([("--split-col", opts.split_col)] if opts.split_col else [])
    for flag, col in wanted:
        if col not in columns:
            raise ConvertError(
                f"{url}: no column {col!r} ({flag}); its columns are: {', '.join(columns) or '(none)'}"
            )
    used = {opts.path_col, opts.label_col, opts.split_col}
    clash = [c for c in columns if c not in used and c in RESERVED_FIELDS]
    if clash:
        raise ConvertError(f"{url}: column {clash[0]!r} would overwrite the field shardkit writes in each sample's .json; rename it")
    root = opts.root if opts.root is not None else (posixpath.dirname(url) if "://" in url else _dirname(url))
    name = url.rstrip("/").rsplit("/", 1)[-1]
    entries: list[tuple[int, str, str, Any, str, dict[str, Any]]] = []  # line, identity, where, label, split, extra
    skipped: dict[str, list[tuple[str, SkipReason, str]]] = {}
    seen: dict[str, int] = {}
    for n, row in rows:
        s = row.get(opts.split_col) if opts.split_col else None
        s = split if s in (None, "") else str(s).strip()
        if not valid_split_name(s):
            raise ConvertError(f"{url}: line {n}: split {s!r} ({opts.split_col}) must use letters, digits, '_', '-' and '.'")
        path = row.get(opts.path_col)
        if path in (None, "") or not isinstance(path, str):
            skipped.setdefault(s, []).append((f"{name}:{n}", SkipReason.MISSING_FILE, f"line {n}: no path in column {opts.path_col!r}"))
            continue
        ident, where = _location(root, path.strip())
        if ident in seen:
            skipped.setdefault(s, []).append((f"{ident} ({name}:{n})", SkipReason.DUPLICATE_PATH, f"line {n}: already listed on line {seen[ident]}"))
            continue
        seen[ident] = n
        label = row.get(opts.label_col)
        if label is None or (isinstance(label, str) and not label.strip()):
            skipped.setdefault(s, []).append((ident, SkipReason.NO_LABEL, f"line {n}: empty {opts.label_col!r}"))
            continue
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            skipped.setdefault(s, []).append((ident, SkipReason.BAD_LABEL, f"line {n}: {label!r} is not a class name or index"))
            continue
        extra = {k: v for k, v in row.items() if k not in used}
        problem = extra_problem(extra)
        if problem:
            skipped.setdefault(s, []).append((ident, SkipReason.BAD_METADATA, f"line {n}: {problem}"))
            continue
        entries.append((n, ident, where, label.strip() if isinstance(label, str) else label, s, extra))
    if not entries:
        first = next((d for sk in skipped.values() for _, _, d in sk), "the listing has no rows")
        raise ConvertError(f"{url}: no row with a usable path and label (e.g. {first})")
    classes, indices, ltype = read_labels(url, [(f"line {e[0]}", e[3]) for e in entries], opts.label_type)
    good = []
    for (n, ident, where, label, s, extra), index in zip(entries, indices):
        if index is None:
            skipped.setdefault(s, []).append((ident, SkipReason.BAD_LABEL, f"line {n}: {label!r} is not a class index (0, 1, ...)"))
        else:
            good.append((ident, where, index, s, extra))
    splits: dict[str, SplitSource] = {}
    for s in sorted({g[3] for g in good} | set(skipped)):
        splits[s] = SplitSource(name=s, directory=url, files=[], skipped=skipped.get(s, []))
    for ident, where, label, s, extra in good:  # a missing file is found when read, local or remote alike (same keys)
        size = (_local_size(where) or 0) if storage.is_local(where) else 0
        splits[s].files.append(SourceFile(ident, label, size, where, extra or None))
    empty = [sp for sp in splits.values() if not sp.files]
    kept = [sp for sp in splits.values() if sp.files]
    if not kept:
        first = next(d for sp in empty for _, _, d in sp.skipped)
        raise ConvertError(f"{url}: no row with a usable path and label (e.g. {first})")
    for sp in empty:  # a split with nothing to convert: its rows are accounted in the first split
        kept[0].skipped += sp.skipped
    for sp in kept:
        sp.files.sort(key=lambda f: f.relpath)
        sp.skipped.sort()
        sp.class_names = sorted({classes[f.label] for f in sp.files})
    kind = "class names" if ltype.value == "name" else "class indices"
    note = f"labels read as {kind} (--label-type {ltype.value}): {len(classes)} classes"
    return Source(
        root=url, classes=classes, splits=kept, nested=bool(opts.split_col),
        reader=Reader(root, storage_options), notes=[note],
    )


def _dirname(path: str) -> str:
    return os.path.dirname(storage.local_path(path)) or "."


def _local_size(path: str) -> int | None:
    try:
        return os.stat(storage.local_path(path)).st_size
    except OSError:
        return None
