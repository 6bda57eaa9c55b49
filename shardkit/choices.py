"""Typed options: a ``str`` Enum whose :meth:`Choice.parse` names the valid values when it refuses one, and
:func:`check_types`, which refuses an option dataclass field of the wrong kind, naming it."""

from __future__ import annotations

import enum
import numbers
import re
from dataclasses import fields
from typing import TypeVar

_C = TypeVar("_C", bound="Choice")


class Choice(str, enum.Enum):
    """A string option with a fixed set of values (members compare equal to their strings)."""

    @classmethod
    def parse(cls: type[_C], value: "_C | str") -> _C:
        """The member for ``value``.

        Raises:
            ValueError: ``value`` is not one of the members' values (the message lists them).
        """
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"invalid {cls._label()} {value!r}; choose one of {[m.value for m in cls]}") from None

    @classmethod
    def _label(cls) -> str:
        """``EpochPolicy`` -> ``"epoch policy"``."""
        return re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()

    def __str__(self) -> str:
        return str(self.value)


_KINDS = {"int": "an integer", "bool": "True or False", "float": "a number"}


def check_types(options: object) -> None:
    """Refuse an option of a config dataclass whose value is not of its declared kind (int, bool,
    float, optionally None), naming it: ``batch_size=2.5`` fails here, in one line, not later as a
    bare ``TypeError`` deep in the loader. Accepted values are stored as plain Python numbers
    (a numpy integer seed becomes an ``int``, so states compare equal)."""
    for f in fields(options):  # type: ignore[arg-type]
        if not f.init:
            continue
        kind, optional = str(f.type), False
        if kind.startswith("Optional[") and kind.endswith("]"):
            kind, optional = kind[len("Optional[") : -1], True
        if kind not in _KINDS:
            continue
        v = getattr(options, f.name)
        if v is None and optional:
            continue
        plain: type
        if kind == "bool":
            ok, plain = isinstance(v, bool) or type(v).__name__ == "bool_", bool
        elif kind == "int":
            ok, plain = isinstance(v, numbers.Integral) and not isinstance(v, bool), int
        else:
            ok, plain = isinstance(v, numbers.Real) and not isinstance(v, bool), float
        if not ok:
            valid = _KINDS[kind] + (" or None" if optional else "")
            raise ValueError(f"loader option {f.name!r} must be {valid}, got {type(v).__name__} {v!r}")
        object.__setattr__(options, f.name, plain(v))
