"""Error types. Every error a user can cause is a :class:`ShardkitError` whose
message names the file or URL involved and says how to fix it; the CLI prints
it as one line and exits with status 2."""

from __future__ import annotations


class ShardkitError(Exception):
    """Base class for user-facing errors (bad input, bad options, bad data)."""


class ManifestError(ShardkitError):
    """A manifest is missing, malformed, of an unknown version, or unsafe."""


class StorageError(ShardkitError):
    """A URL cannot be opened, read or written (missing backend, permissions, full disk)."""


class ConvertError(ShardkitError):
    """A conversion cannot start or cannot finish (bad SRC, DEST conflict, --strict skip)."""


class DataError(ShardkitError):
    """A shard or sample is corrupt and the reader runs with ``strict=True``."""
