"""Small storage helpers the converter needs beyond :mod:`shardkit.storage`: list, delete, publish a tar."""

from __future__ import annotations

import os
import tempfile
from typing import IO, Any, Callable

from .. import storage
from ..errors import ShardkitError, StorageError


def list_dir(url: str, **storage_options: Any) -> tuple[list[str], list[str]]:
    """``(sub-folder names, file names)`` directly under ``url``, sorted; empty if it does not exist."""
    try:
        if storage.is_local(url):
            path = storage.local_path(url)
            if not os.path.isdir(path):
                return [], []
            with os.scandir(path) as it:
                entries = [(e.name, e.is_dir()) for e in it]
        else:
            fs, path = storage.get_fs(url, **storage_options)
            if not fs.exists(path):
                return [], []
            entries = [(e["name"].rstrip("/").rsplit("/", 1)[-1], e["type"] == "directory") for e in fs.ls(path, detail=True)]
    except ShardkitError:
        raise
    except OSError as exc:
        raise StorageError(f"{url}: cannot list ({exc})") from None
    return sorted(n for n, d in entries if d), sorted(n for n, d in entries if not d)


def remove(url: str, *, recursive: bool = False, **storage_options: Any) -> None:
    """Delete a file (or a folder with ``recursive``); missing is fine."""
    try:
        if storage.is_local(url):
            path = storage.local_path(url)
            if recursive and os.path.isdir(path):
                import shutil

                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
        else:
            fs, path = storage.get_fs(url, **storage_options)
            if fs.exists(path):
                fs.rm(path, recursive=recursive)
    except OSError as exc:
        raise StorageError(f"{url}: cannot delete ({exc})") from None


def size_of(url: str, **storage_options: Any) -> int | None:
    """Size in bytes of the file at ``url``, or ``None`` if there is none."""
    try:
        if storage.is_local(url):
            return os.stat(storage.local_path(url)).st_size
        fs, path = storage.get_fs(url, **storage_options)
        return int(fs.size(path)) if fs.exists(path) else None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{url}: cannot stat ({exc})") from None


#: shardkit's work directory inside a split directory (journal, temporary files); see journal.JOURNAL_DIR
_WORK_DIR = "_shardkit"


def publish(url: str, write: Callable[[IO[bytes]], Any], *, tag: str = "", **storage_options: Any) -> Any:
    """Run ``write(f)`` into a temporary file and make ``url`` appear complete, all at once.

    Locally the temporary file is ``_shardkit/.<name>[.<tag>].part`` below
    ``url``'s directory (same filesystem, so the rename is atomic, and out of
    sight of anyone listing the shards even after a SIGKILL): a name only the
    owner of ``url`` (or, with ``tag``, that one task) uses, so a rerun after a
    crash overwrites it instead of leaving litter. It is fsync'ed and renamed.
    Remotely it is a local temporary file uploaded in one go. Returns what
    ``write`` returns.
    """
    if storage.is_local(url):
        path = storage.local_path(url)
        d, name = os.path.split(path)
        tmp_dir = d if os.path.basename(d) == _WORK_DIR else os.path.join(d, _WORK_DIR)
        tmp = os.path.join(tmp_dir, f".{name}.{tag}.part" if tag else f".{name}.part")
        try:
            os.makedirs(tmp_dir, exist_ok=True)
            with open(tmp, "wb") as f:
                out = write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return out
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StorageError(
                f"{url}: cannot write ({exc.strerror or exc}); free space or fix permissions, "
                "then rerun the same command to resume"
            ) from None
    fd, tmp = tempfile.mkstemp(prefix="shardkit-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            out = write(f)
        storage.write_atomic(url, src_file=tmp, **storage_options)
        return out
    except OSError as exc:
        raise StorageError(f"{url}: cannot write ({exc.strerror or exc}); rerun the same command to resume") from None
    finally:
        os.unlink(tmp)


def put_bytes(url: str, data: bytes, *, tag: str = "", **storage_options: Any) -> None:
    """:func:`publish` for bytes in memory."""
    publish(url, lambda f: f.write(data), tag=tag, **storage_options)


def sha256_of(url: str, **storage_options: Any) -> tuple[int, str]:
    """``(size, sha256)`` of the file at ``url`` (read sequentially)."""
    from ..shardformat import sha256_file

    with storage.open_read(url, **storage_options) as f:
        return sha256_file(f)
