"""Let plain ``webdataset`` pipelines open shardkit datasets on object storage.

webdataset 1.0.2 opens URLs through its ``gopen`` table, which has no ``s3://`` or generic fsspec support;
:func:`register_with_webdataset` plugs fsspec in there for users who run plain webdataset pipelines on shardkit
datasets (an explicit call: shardkit's own loader never changes webdataset's globals).
"""

from __future__ import annotations

from typing import IO, Any

from shardkit.errors import StorageError
from shardkit.storage import fs as storage


def _gopen_fsspec(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> IO[bytes]:
    if mode != "rb":
        raise StorageError(f"{url}: shardkit's fsspec hook only reads")
    return storage.open_read(url, **kw)


def register_with_webdataset(*schemes: str) -> None:
    """Let plain ``webdataset`` open ``s3://``, ``gs://`` (or the given schemes) through fsspec.

    Storage options come from the environment (e.g. ``AWS_*``) as fsspec reads them.
    """
    from webdataset import gopen

    for s in schemes or ("s3", "gs", "gcs", "abfs", "az"):
        gopen.gopen_schemes[s] = _gopen_fsspec
