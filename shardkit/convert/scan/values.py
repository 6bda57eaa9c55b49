"""The value rules of the fields beside a class label, shared by every source: multi-label items, targets, text.

* **labels** (a multi-label source: a listing with ``--label-sep`` or ``--multi-label``, tars with
  ``--multi-label``, a Hugging Face ``Sequence(ClassLabel)`` column): :func:`label_items` turns one raw
  value into its class items. A list is its items; a string is split at the separator (without one it
  is one item; in a tar it may spell a JSON list); each item is stripped and an empty item (a stray or
  trailing separator) is dropped; an item that is not a class name or index (a bool, float, negative
  number, object, nested list) makes the value ``bad_label``. An empty value (``""``, ``[]``,
  ``null``) is a sample with no class, not a skip. A class named twice in one value is one class
  (``"cat;cat"`` is ``{cat}``). :func:`read_label_sets` then reads every item of every value as class
  names or indices by the one rule of :func:`~shardkit.convert.scan.source.read_labels`.
* **target** (``--target-col a,b``): :func:`target_value` reads one number: an int or float, or a
  string spelling a decimal number (``"1.5"``, ``" -2e3 "``); missing, empty, non-numeric, a bool,
  or not finite (``nan``, ``inf``, ``1e999``) is ``bad_target``.
* **text** (``--text-col``, ``--text-key``): :func:`text_value`: a string (or UTF-8 bytes) kept exactly
  as it is; missing or empty is ``no_text``; not a string, not UTF-8, or over
  :data:`~shardkit.format.fields.MAX_TEXT_BYTES` is ``bad_text``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.scan.source import is_index, read_labels, spelled_label_value
from shardkit.format.fields import MAX_TEXT_BYTES

if TYPE_CHECKING:
    from shardkit.convert.options import LabelType

_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def _item(value: Any) -> Any:
    """A usable class item (a stripped non-empty string, an int >= 0), ``""`` for an empty one, ``None`` for a bad one."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    return None


def _spelled_item(value: Any) -> Any:
    """:func:`_item` of a value spelled as text (a tar's): by :func:`~shardkit.convert.scan.source.spelled_label_value`."""
    if not isinstance(value, str):
        return _item(value)
    value, bad = spelled_label_value(value)
    return "" if bad is SkipReason.NO_LABEL else None if bad is not None else value


def label_items(raw: Any, sep: str | None, *, spelled: bool = False) -> tuple[list[Any] | None, SkipReason | None]:
    """The distinct class items of one multi-label value, or ``(None, bad_label)`` (see module docstring).

    ``spelled``: a string that is a JSON list is that list (a tar's label member); otherwise a string is
    split at ``sep`` (``None``: the whole string is one item).
    """
    if raw is None:
        return [], None
    if isinstance(raw, str) and spelled and raw.strip()[:1] == "[":
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return None, SkipReason.BAD_LABEL
    elif isinstance(raw, str) and spelled and raw.strip() == "null":
        return [], None
    if isinstance(raw, str):
        parts = raw.split(sep) if sep else [raw]
    elif isinstance(raw, (list, tuple)):
        parts = list(raw)
    else:
        parts = [raw]
    items = [_spelled_item(p) if spelled else _item(p) for p in parts]
    if any(i is None for i in items):
        return None, SkipReason.BAD_LABEL
    out: list[Any] = []
    for i in items:
        if i != "" and i not in out:
            out.append(i)
    return out, None


def read_label_sets(
    src: str, values: Sequence[tuple[str, list[Any]]], wanted: "LabelType"
) -> tuple[list[str], list[tuple[int, ...] | None], "LabelType"]:
    """Classes and each value's sorted class indices (``None``: an item is not a valid index) from
    ``(where, items)`` pairs: every item of every value is one label of
    :func:`~shardkit.convert.scan.source.read_labels` (names, indices, or a refused mix)."""
    flat = [(w, item) for w, items in values for item in items]
    classes, indices, kind = read_labels(src, flat, wanted)
    out: list[tuple[int, ...] | None] = []
    pos = 0
    for _, items in values:
        got = indices[pos : pos + len(items)]
        pos += len(items)
        out.append(None if any(i is None for i in got) else tuple(sorted(set(got))))  # type: ignore[arg-type]
    return classes, out, kind


def is_number(value: Any) -> bool:
    """True for a value :func:`target_value` reads as a number (finite or not)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
        isinstance(value, str) and bool(_NUMBER.match(value.strip()))
    )


def target_value(raw: Any) -> float | None:
    """The finite number ``raw`` is (an int, a float, or a string spelling a decimal number), else ``None``."""
    if not is_number(raw):
        return None
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except OverflowError:  # an int beyond float range
        return None
    return value if math.isfinite(value) else None


def target_values(get: Any, columns: Sequence[str]) -> tuple[tuple[float, ...] | None, str]:
    """The target of one row (``get(column)`` gives a cell), or ``(None, why)`` naming the first bad column."""
    out = []
    for c in columns:
        raw = get(c)
        value = target_value(raw)
        if value is None:
            what = "missing" if raw is None or (isinstance(raw, str) and not raw.strip()) else f"{str(raw)[:40]!r}"
            return None, f"target column {c!r} is {what}, not a finite number"
        out.append(value)
    return tuple(out), ""


def text_value(raw: Any) -> tuple[str | None, SkipReason | None, str]:
    """``(text, None, "")`` for usable text (kept exactly), else ``(None, no_text | bad_text, why)``."""
    if raw is None or (isinstance(raw, (str, bytes)) and not raw):
        return None, SkipReason.NO_TEXT, "no text"
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, SkipReason.BAD_TEXT, f"text is not UTF-8 (byte {exc.start})"
    if not isinstance(raw, str):
        return None, SkipReason.BAD_TEXT, f"text is a {type(raw).__name__} ({str(raw)[:40]!r}), not a string"
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return None, SkipReason.BAD_TEXT, f"text is not valid Unicode (character {exc.start})"
    if size > MAX_TEXT_BYTES:
        return None, SkipReason.BAD_TEXT, f"text of {size} bytes (limit {MAX_TEXT_BYTES})"
    return raw, None, ""


def fields_of(label: bool, multi: bool, target: bool, text: bool) -> tuple[str, ...]:
    """The stored fields of a source with these (``image`` first, in :data:`~shardkit.format.fields.STORED_FIELDS` order)."""
    return (
        ("image",)
        + (("labels",) if multi else ("label",) if label else ())
        + (("target",) if target else ())
        + (("text",) if text else ())
    )


__all__ = [
    "fields_of",
    "is_index",
    "is_number",
    "label_items",
    "read_label_sets",
    "target_value",
    "target_values",
    "text_value",
]
