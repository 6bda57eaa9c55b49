"""Ground truth for the source oracles: tiny solid-colour images whose colour names the file, and plain readers.

Nothing here calls shardkit: the shards are read with :mod:`tarfile` and :mod:`json`, the colours with
Pillow, and the expected outcome of every listing row is decided by :func:`reference_listing`, a
deliberately simple re-statement of the rules in the README (not the library's code).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from PIL import Image

#: JPEG re-encoding moves a solid colour by a few levels at most; ids are 48 levels apart on some channel
COLOUR_TOLERANCE = 12


def colour(i: int) -> tuple[int, int, int]:
    """The solid colour of image ``i`` (0 <= i < 64): distinct ids differ by 48+ levels on some channel."""
    return (24 + 48 * (i % 4), 24 + 48 * (i // 4 % 4), 24 + 48 * (i // 16 % 4))


def image_id(rgb: tuple[float, float, float]) -> int | None:
    """The id whose colour is within :data:`COLOUR_TOLERANCE` of ``rgb``, or ``None``."""
    for i in range(64):
        if all(abs(a - b) <= COLOUR_TOLERANCE for a, b in zip(colour(i), rgb)):
            return i
    return None


def write_image(path: str, i: int, size: tuple[int, int] = (12, 10)) -> None:
    """A solid image of colour ``i`` at ``path`` (format from the extension)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fmt = "PNG" if path.lower().endswith(".png") else "JPEG"
    Image.new("RGB", size, colour(i)).save(path, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))


def mean_colour(jpeg: bytes) -> tuple[float, float, float]:
    import numpy as np

    with Image.open(io.BytesIO(jpeg)) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.float64).reshape(-1, 3)
    return tuple(float(v) for v in px.mean(axis=0))  # type: ignore[return-value]


@dataclass
class ReadSplit:
    """A converted split read back with :mod:`tarfile`: ``samples`` path -> (class name, image id, cls index)."""

    classes: list[str]
    samples: dict[str, tuple[str, int | None, int]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    keys: int = 0


def read_split(directory: str) -> ReadSplit:
    """Every sample of the shards in ``directory`` and the manifest's ``classes`` and ``skipped``."""
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    out = ReadSplit(
        classes=list(manifest["classes"]), skipped=[(s["path"], s["reason"]) for s in manifest.get("skipped", [])]
    )
    groups: dict[str, dict[str, bytes]] = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".tar"):
            continue
        with tarfile.open(os.path.join(directory, name)) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                assert ext not in groups.setdefault(key, {}), f"{m.name} twice"
                groups[key][ext] = tf.extractfile(m).read()  # type: ignore[union-attr]
    out.keys = len(groups)
    for g in groups.values():
        meta = json.loads(g["json"])
        assert meta["path"] not in out.samples, f"{meta['path']} is two samples"
        out.samples[meta["path"]] = (meta["class"], image_id(mean_colour(g["jpg"])), int(g["cls"]))
    return out


# -------------------------------------------------------------------------------------------------
# The reference reader of a listing
# -------------------------------------------------------------------------------------------------

_INT = re.compile(r"^\s*[+-]?[0-9]+\s*$")


class Refused(Exception):
    """The reference says the whole listing must be refused (one-line error); ``args[0]`` a word it must contain."""


@dataclass
class Expected:
    """What the reference expects: per split, path -> (class name, image id); skips as (path, reason, split)."""

    samples: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)

    def splits(self) -> list[str]:
        return sorted(set(self.samples) | {s for _, _, s in self.skipped})


def parse_listing(kind: str, text: str) -> tuple[list[str], list[tuple[int, Any]]]:
    """Header and ``(line, row)`` pairs, a row being a dict, or ``None`` for a CSV row of the wrong length."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if kind == "jsonl":
        rows = [(n + 1, json.loads(line)) for n, line in enumerate(text.splitlines()) if line.strip()]
        return sorted({k for _, r in rows for k in r}), rows
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if kind == "tsv" else ",")
    header = next(reader)
    if len(set(header)) != len(header):
        raise Refused("twice")
    out: list[tuple[int, Any]] = []
    for fields in reader:
        if fields:
            out.append((reader.line_num, dict(zip(header, fields)) if len(fields) == len(header) else None))
    return header, out


def reference_listing(
    kind: str,
    text: str,
    root: str,
    name: str,
    ids: dict[str, int | None],
    split_col: str | None,
    label_type: str = "auto",
) -> Expected:
    """The outcome the README promises for the listing ``text`` (file ``name``) of images below ``root``.

    ``ids``: real path of each existing file -> its image id (``None``: a file that is not an image).
    Raises :class:`Refused` where the whole listing must be refused.
    """
    header, rows = parse_listing(kind, text)
    real_root = os.path.realpath(root)
    paths_seen: dict[str, int] = {}
    files_seen: dict[str, str] = {}  # real path -> the plain absolute path that first named it
    pending: list[tuple[str, Any, str, str]] = []  # identity, label, split, real file
    exp = Expected()
    bad_rows: list[str] = []
    for n, row in rows:
        if row is None:
            bad_rows.append(f"{name}:{n}")
            continue
        split = "train"
        if split_col and row.get(split_col) not in (None, ""):
            split = str(row[split_col]).strip()
        path = row.get("path")
        if not isinstance(path, str) or not path.strip():
            exp.skipped.append((f"{name}:{n}", "missing_file", split))
            continue
        path = path.strip()
        if os.path.isabs(path):
            ident = os.path.normpath(path)
        else:
            ident = os.path.relpath(os.path.normpath(os.path.join(os.path.abspath(root), path)), os.path.abspath(root))
            if ident.split(os.sep)[0] == "..":
                raise Refused("outside the root")
        if ident in paths_seen:
            exp.skipped.append((f"{ident} ({name}:{n})", "duplicate_path", split))
            continue
        paths_seen[ident] = n
        real = os.path.realpath(os.path.join(real_root, ident))
        plain = os.path.normpath(os.path.join(os.path.abspath(root), ident))  # symlinks not resolved
        if real in files_seen:  # the same path written another way (absolute, relative), or through a symlink
            same = files_seen[real] == plain
            exp.skipped.append((f"{ident} ({name}:{n})", "duplicate_path" if same else "duplicate_file", split))
            continue
        files_seen[real] = plain
        label = row.get("label")
        if label is None or label == [] or (isinstance(label, str) and label.strip() == ""):
            exp.skipped.append((ident, "no_label", split))
            continue
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            exp.skipped.append((ident, "bad_label", split))
            continue
        pending.append((ident, label.strip() if isinstance(label, str) else label, split, real))
    if not pending:
        raise Refused("no row with a usable path and label")
    is_int = [isinstance(lab, int) or bool(_INT.match(lab)) for _, lab, _, _ in pending]
    mode = label_type
    if mode == "auto":
        if any(is_int) and not all(is_int):
            raise Refused("mixed labels")
        mode = "index" if all(is_int) else "name"
    if mode == "name":
        names = {p: str(lab) for p, lab, _, _ in pending}
        exp.classes = sorted(set(names.values()))
    else:
        values = {p: int(str(lab).strip()) if ok else -1 for (p, lab, _, _), ok in zip(pending, is_int)}
        good = [v for v in values.values() if v >= 0]
        if good and max(good) >= min(1_000_000, max(1000, 10 * len(set(good)))):
            raise Refused("far above")
        if label_type == "auto" and good and min(good) > 0:
            raise Refused("not 0")
        exp.classes = [str(i) for i in range(max(good, default=-1) + 1)]
        names = {p: str(v) for p, v in values.items() if v >= 0}
    kept = 0
    for ident, _label, split, real in pending:
        if ident not in names:
            exp.skipped.append((ident, "bad_label", split))
        elif real not in ids:
            exp.skipped.append((ident, "missing_file", split))
        elif ids[real] is None:
            exp.skipped.append((ident, "not_an_image", split))
        else:
            exp.samples.setdefault(split, {})[ident] = (names[ident], ids[real])  # type: ignore[assignment]
            kept += 1
    splits = exp.splits() or ["train"]
    exp.skipped += [(b, "bad_row", splits[0]) for b in bad_rows]
    if not any(names.get(i) is not None for i, _, _, _ in pending):
        raise Refused("no row with a usable path and label")
    return exp


def reference_val_count(fraction: float, n: int) -> int:
    """``fraction x n`` rounded half up, ``fraction`` as the decimal it is written as."""
    return int((Decimal(repr(fraction)) * n).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# -------------------------------------------------------------------------------------------------
# The reference of the fields beside a class label: multi-label sets, targets, text
# -------------------------------------------------------------------------------------------------

_DECIMAL_CHARS = set("0123456789+-.eE")


def reference_number(raw: Any) -> float | None:
    """A target cell as the docs promise it: an int or float, or text of a decimal number; finite; else ``None``."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        try:
            value = float(raw)
        except OverflowError:
            return None
    elif isinstance(raw, str) and raw.strip() and set(raw.strip()) <= _DECIMAL_CHARS:
        try:
            value = float(raw.strip())  # with only these characters, Python reads exactly the decimal numbers
        except ValueError:
            return None
    else:
        return None
    return value if value not in (float("inf"), float("-inf")) and value == value else None


def reference_text(raw: Any) -> tuple[str | None, str | None]:
    """``(text, None)`` or ``(None, "no_text" | "bad_text")``: missing or empty is no_text, a non-string or
    unencodable string bad_text; text is kept exactly."""
    if raw is None or raw == "" or raw == b"":
        return None, "no_text"
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None, "bad_text"
    if not isinstance(raw, str):
        return None, "bad_text"
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        return None, "bad_text"
    return raw, None


def reference_items(raw: Any, sep: str | None) -> list[Any] | None:
    """A multi-label cell's distinct items (strings stripped, ints), ``[]`` for an empty one, ``None`` for bad_label."""
    if raw is None:
        return []
    if isinstance(raw, str):
        parts: list[Any] = raw.split(sep) if sep else [raw]
    elif isinstance(raw, list):
        parts = raw
    else:
        parts = [raw]
    out: list[Any] = []
    for p in parts:
        if isinstance(p, bool) or not isinstance(p, (str, int)) or (isinstance(p, int) and p < 0):
            return None
        item = p.strip() if isinstance(p, str) else p
        if item != "" and item not in out:
            out.append(item)
    return out


@dataclass
class FieldsExpected:
    """Per path: ``(class names or None, target or None, text or None)``; skips path -> reason; the classes."""

    samples: dict[str, tuple[frozenset[str] | None, tuple[float, ...] | None, str | None]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)


def reference_fields_listing(
    kind: str,
    text: str,
    label_col: str | None,
    sep: str | None,
    target_cols: list[str],
    text_col: str | None,
    multi: bool = True,
) -> FieldsExpected:
    """The outcome the docs promise for a listing whose rows each name a distinct existing image (path column
    ``path``): label (a set of classes when ``multi``), then targets, then text decide sample or skip."""
    _, rows = parse_listing(kind, text)
    exp = FieldsExpected()
    pending: list[tuple[str, list[Any] | Any, tuple[float, ...] | None, str | None]] = []
    for _, row in rows:
        path = row["path"]
        items: Any = None
        if label_col is not None and multi:
            if label_col not in row:
                exp.skipped[path] = "no_label"
                continue
            items = reference_items(row[label_col], sep)
            if items is None:
                exp.skipped[path] = "bad_label"
                continue
        elif label_col is not None:
            items = row.get(label_col)
            if items is None or (isinstance(items, str) and not items.strip()):
                exp.skipped[path] = "no_label"
                continue
            items = items.strip()
        target = None
        if target_cols:
            values = [reference_number(row.get(c)) for c in target_cols]
            if any(v is None for v in values):
                exp.skipped[path] = "bad_target"
                continue
            target = tuple(values)  # type: ignore[arg-type]
        txt = None
        if text_col is not None:
            txt, why = reference_text(row.get(text_col))
            if why:
                exp.skipped[path] = why
                continue
        pending.append((path, items, target, txt))
    every = [i for _, items, _, _ in pending if label_col is not None for i in (items if multi else [items])]
    is_int = [isinstance(i, int) or bool(_INT.match(i)) for i in every]
    if any(is_int) and not all(is_int):
        raise Refused("mixed labels")
    as_index = bool(every) and all(is_int)
    valid = [int(i) for i in every if isinstance(i, int) or not str(i).strip().startswith("-")] if as_index else []
    if as_index and valid and min(valid) > 0:
        raise Refused("not 0")
    exp.classes = [str(i) for i in range(max(valid, default=-1) + 1)] if as_index else sorted({str(i) for i in every})
    for path, items, target, txt in pending:
        if label_col is None:
            exp.samples[path] = (None, target, txt)
            continue
        got = items if multi else [items]
        if as_index and any(isinstance(i, str) and i.strip().startswith("-") for i in got):
            exp.skipped[path] = "bad_label"
            continue
        names = frozenset(str(int(i)) if as_index else str(i) for i in got)
        exp.samples[path] = (names, target, txt)
    return exp


@dataclass
class FieldsSplit:
    """A converted split read back with tarfile + json: per ``.json`` path, its fields as stored."""

    manifest: dict[str, Any]
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_fields_split(directory: str) -> FieldsSplit:
    """Each sample of the split in ``directory``: ``{"members": set of extensions, "labels": class names,
    "label": class name, "target": floats, "text": str, "image": image id, "txt_bytes": raw .txt}``."""
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    out = FieldsSplit(manifest)
    classes = manifest["classes"]
    for shard in manifest["shards"]:
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(os.path.join(directory, shard["name"])) as tf:
            for m in tf.getmembers():
                key, ext = m.name.split(".", 1)
                assert ext not in groups.setdefault(key, {}), f"{m.name} twice"
                groups[key][ext] = tf.extractfile(m).read()  # type: ignore[union-attr]
        for g in groups.values():
            meta = json.loads(g["json"])
            path = meta["path"]
            assert path not in out.samples, f"{path} is two samples"
            got: dict[str, Any] = {"members": set(g), "image": image_id(mean_colour(g["jpg"])), "meta": meta}
            if "cls" in g:
                got["label"] = classes[int(g["cls"])]
            if "labels.json" in g:
                idx = json.loads(g["labels.json"])
                assert idx == sorted(set(idx)), f"{path}: labels {idx} not sorted and distinct"
                got["labels"] = frozenset(classes[i] for i in idx)
            if "target.json" in g:
                got["target"] = tuple(json.loads(g["target.json"]))
            if "txt" in g:
                got["text"] = g["txt"].decode("utf-8")
                got["txt_bytes"] = g["txt"]
            out.samples[path] = got
    return out
