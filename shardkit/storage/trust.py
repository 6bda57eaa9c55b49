"""What the manifest vouches for, checked on every path that delivers shard bytes.

The manifest records each shard's size and sha256. An open checks the size the
store (or the filesystem) reports against it; a cache download hashes the bytes
as they stream and keeps them only when the digest matches; a retry reopens
only the object it was reading (same size, same ETag where the backend gives
one). An object that changed is never retried: reading it at the old offsets
would splice two versions of a shard.
"""

from __future__ import annotations

import posixpath
from typing import IO, Any, Optional

from shardkit.errors import StorageError

#: exception class names that say "the object changed since it was opened" (s3fs's ``FileExpired``)
_CHANGED = ("FileExpired",)


def dataset_of(url: str) -> str:
    """The folder holding shard ``url`` (what ``shardkit verify`` takes)."""
    return posixpath.dirname(url.rstrip("/")) or "."


def changed_since_conversion(url: str, found: str) -> StorageError:
    """The error for a shard whose bytes are not the manifest's (``found``: what was seen)."""
    return StorageError(
        f"{url}: {found}; the shard changed since conversion: reconvert, "
        f"or check with `shardkit verify {dataset_of(url)}`"
    )


def size_mismatch(url: str, size: int, nbytes: int) -> StorageError:
    """A shard of ``size`` bytes where the manifest says ``nbytes``."""
    return changed_since_conversion(url, f"has {size} bytes, the manifest says {nbytes}")


def digest_mismatch(url: str, sha256: str, expected: str) -> StorageError:
    """A download whose sha256 is not the manifest's."""
    return changed_since_conversion(
        url, f"its bytes differ from the manifest (sha256 {sha256[:16]}..., the manifest says {expected[:16]}...)"
    )


def changed_while_reading(url: str) -> StorageError:
    """The object was replaced between two requests of one read."""
    return StorageError(f"{url}: changed while reading; was the dataset rewritten?")


def is_changed_object(exc: BaseException) -> bool:
    """True when ``exc`` says the object is not the one that was opened (s3fs's ``FileExpired``)."""
    return any(c.__name__ in _CHANGED for c in type(exc).__mro__)


def identity(f: IO[bytes]) -> tuple[Optional[int], Optional[str]]:
    """``(size, ETag)`` of an open remote file, each None where the backend does not say."""
    size = getattr(f, "size", None)
    details: Any = getattr(f, "details", None)
    etag = details.get("ETag") if isinstance(details, dict) else None
    return (int(size) if isinstance(size, int) else None, str(etag) if etag is not None else None)


def check_size(url: str, size: Optional[int], nbytes: Optional[int]) -> None:
    """Raise :func:`size_mismatch` when both sizes are known and differ."""
    if size is not None and nbytes is not None and size != nbytes:
        raise size_mismatch(url, size, nbytes)


class RangeUnsupported(StorageError):
    """The server ignores Range requests: only whole-file reads (a cache download) work."""


def no_range(url: str) -> RangeUnsupported:
    """The error for a read past the start of a file on a server that ignores Range requests."""
    return RangeUnsupported(
        f"{url}: the server does not support Range requests (it answers every read with the whole file); "
        "pass cache_dir= to read whole shards through the cache"
    )


def is_no_range(exc: BaseException) -> bool:
    """True for fsspec's HTTP error on a server that answered a range request with the whole file."""
    return isinstance(exc, ValueError) and "support range requests" in str(exc)
