"""The read-only, seekable raw file that the storage layer's remote readers share."""

from __future__ import annotations

import io
from typing import Any, Optional


class PositionedReader(io.RawIOBase):
    """A read-only, seekable raw file: a subclass reads ``size`` bytes at ``self._pos`` in :meth:`read` (and moves
    it); the rest of the file protocol follows from that."""

    _pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def read(self, size: Optional[int] = -1) -> bytes:  # pragma: no cover - every subclass reads
        raise NotImplementedError

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)
