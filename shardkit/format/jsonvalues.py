"""Checked reads of values out of parsed JSON (manifests, generation records, selections): each returns the value
or raises ``TypeError``/``ValueError`` saying what it is not, for the caller to turn into one line naming its file."""

from __future__ import annotations

from typing import Any


def is_int(x: Any) -> bool:
    """An ``int`` and not a ``bool``."""
    return isinstance(x, int) and not isinstance(x, bool)


def integer(x: Any) -> int:
    """``x`` if it is an integer (``TypeError`` otherwise)."""
    if not is_int(x):
        raise TypeError(f"count {x!r} is not an integer")
    return int(x)


def count(x: Any) -> int:
    """``x`` if it is an integer >= 0 (``ValueError`` otherwise)."""
    if not is_int(x) or x < 0:
        raise ValueError(f"{x!r} is not a count")
    return int(x)


def text(x: Any) -> str:
    """``x`` if it is a string."""
    if not isinstance(x, str):
        raise TypeError(f"{x!r} is not a string")
    return x


def obj(x: Any) -> dict:
    """``x`` if it is a JSON object."""
    if not isinstance(x, dict):
        raise TypeError(f"{x!r} is not an object")
    return x


def items(x: Any) -> list:
    """``x`` if it is a JSON list."""
    if not isinstance(x, list):
        raise TypeError(f"{x!r} is not a list")
    return x
