"""Typed choices: a ``str`` Enum whose :meth:`Choice.parse` names the valid values when it refuses one."""

from __future__ import annotations

import enum
import re
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
