"""Storage behind fsspec: URL handling, listing, atomic writes and publishing, one place for backend errors.

Local paths (and ``file://`` URLs) are handled with the standard library so the
hot path has no fsspec overhead; every other scheme goes through fsspec, which
is imported lazily. A missing backend (``s3fs`` for ``s3://``) is reported with
the extra to install.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import tempfile
from collections.abc import Callable
from typing import IO, Any

from shardkit.errors import StorageError

#: scheme -> the shardkit extra that installs its fsspec backend
BACKEND_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}


def scheme(url: str) -> str:
    """The URL scheme (``"s3"``, ``"https"``...), or ``""`` for a local path."""
    if "://" in url:
        return url.split("://", 1)[0].lower()
    if url.startswith("pipe:"):
        return "pipe"
    return ""


def is_local(url: str) -> bool:
    """True for plain paths and ``file://`` URLs."""
    return scheme(url) in ("", "file")


def local_path(url: str) -> str:
    """The filesystem path of a local URL (strips ``file://``)."""
    return url[len("file://") :] if url.startswith("file://") else url


def join(url: str, *names: str) -> str:
    """Join path components onto a local path or URL."""
    if is_local(url) and not url.startswith("file://"):
        return os.path.join(url, *names)
    return posixpath.join(url.rstrip("/"), *names)


def get_fs(url: str, **storage_options: Any) -> tuple[Any, str]:
    """``(fsspec filesystem, path)`` for ``url``; clear error for a missing backend."""
    if scheme(url) == "pipe":
        raise StorageError(f"{url}: pipe: URLs run shell commands and are refused; use a path or fsspec URL")
    try:
        from fsspec.core import url_to_fs

        return url_to_fs(url, **storage_options)
    except ImportError as exc:
        extra = BACKEND_EXTRAS.get(scheme(url))
        hint = f"pip install 'shardkit[{extra}]'" if extra else "install the fsspec backend for this scheme"
        raise StorageError(f"{url}: no fsspec backend for '{scheme(url)}://' ({exc}); fix: {hint}") from None
    except ValueError as exc:
        raise StorageError(f"{url}: unsupported URL ({exc})") from None


def exists(url: str, **storage_options: Any) -> bool:
    """True if a file exists at ``url``."""
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = get_fs(url, **storage_options)
    try:
        return bool(fs.exists(path))
    except Exception as exc:  # noqa: BLE001 - backends raise their own types (botocore, aiohttp...)
        raise StorageError(
            f"{url}: cannot check ({type(exc).__name__}: {exc}); check the URL, endpoint and credentials"
        ) from None


def read_bytes(url: str, **storage_options: Any) -> bytes:
    """The whole content of ``url``; :class:`StorageError` naming the URL on failure."""
    try:
        if is_local(url):
            with open(local_path(url), "rb") as f:
                return f.read()
        fs, path = get_fs(url, **storage_options)
        try:
            try:  # a range from 0: s3fs probes the size first without one
                return bytes(fs.cat_file(path, start=0))
            except OSError as exc:
                if not _past_end(exc):
                    raise
                return bytes(fs.cat_file(path))  # an empty object has no byte 0
        except (FileNotFoundError, StorageError):
            raise
        except Exception as exc:  # noqa: BLE001 - backends raise their own types (aiohttp, botocore...)
            raise StorageError(
                f"{url}: cannot read ({type(exc).__name__}: {exc}); check the URL, endpoint and credentials, then retry"
            ) from None
    except FileNotFoundError:
        raise StorageError(f"{url}: not found") from None
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{url}: cannot read ({exc})") from None


def _past_end(exc: BaseException) -> bool:
    """True for a store's "range not satisfiable" answer (``416``, S3's ``InvalidRange``)."""
    resp = getattr(exc.__cause__, "response", None)
    code = resp.get("Error", {}).get("Code") if isinstance(resp, dict) else None
    return code in ("InvalidRange", "416") or getattr(exc, "status", None) == 416


def open_read(
    url: str,
    block_size: int = 8 << 20,
    *,
    raw_errors: bool = False,
    cache_type: str = "readahead",
    size: int | None = None,
    **storage_options: Any,
) -> IO[bytes]:
    """A binary file object for sequential reading with read-ahead.

    Local files use a large OS-level buffer; remote files use fsspec's
    ``cache_type`` (default ``readahead``) with ``block_size`` bytes per request. With
    ``raw_errors`` the backend's I/O errors propagate unchanged (for a caller
    that retries transient ones); a missing file is always a :class:`StorageError`.
    ``size``: the file's size when known (the manifest's): fsspec then skips its size probe.
    """
    try:
        if is_local(url):
            return open(local_path(url), "rb", buffering=1 << 20)
        fs, path = get_fs(url, **storage_options)
        extra = {"size": size} if size is not None else {}
        return fs.open(path, "rb", block_size=block_size, cache_type=cache_type, **extra)
    except FileNotFoundError as exc:
        cause = exc.__cause__
        if raw_errors and cause is not None and getattr(cause, "status", None) != 404:
            # fsspec's HTTP backend reports *any* failed size probe (a 503, a reset) as
            # FileNotFoundError: hand the real, transient cause to the caller's retry loop
            raise ConnectionError(f"{url}: cannot open ({type(cause).__name__}: {cause})") from None
        raise StorageError(f"{url}: not found") from None
    except StorageError:
        raise
    except OSError as exc:
        if raw_errors:
            raise
        raise StorageError(f"{url}: cannot open ({exc})") from None


def makedirs(url: str, **storage_options: Any) -> None:
    """Create a directory (no-op on object stores, where prefixes need no creation)."""
    try:
        if is_local(url):
            os.makedirs(local_path(url), exist_ok=True)
        else:
            fs, path = get_fs(url, **storage_options)
            fs.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{url}: cannot create directory ({exc}); check the path and permissions") from None


def write_atomic(url: str, data: bytes | None = None, *, src_file: str | None = None, **storage_options: Any) -> None:
    """Make ``url`` hold ``data`` (or the content of local file ``src_file``) all at once.

    Locally: write a temporary file in the same directory, fsync, rename. On
    object storage: one complete upload, so no reader sees a partial object.
    """
    if (data is None) == (src_file is None):
        raise ValueError("pass exactly one of data or src_file")
    try:
        if is_local(url):
            path = local_path(url)
            d = os.path.dirname(path) or "."
            os.makedirs(d, exist_ok=True)
            if src_file is not None and os.path.dirname(os.path.abspath(src_file)) == os.path.abspath(d):
                os.replace(src_file, path)
                return
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=d)
            try:
                with os.fdopen(fd, "wb") as f:
                    if data is not None:
                        f.write(data)
                    else:
                        with open(src_file, "rb") as src:  # type: ignore[arg-type]
                            while chunk := src.read(8 << 20):
                                f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        else:
            fs, path = get_fs(url, **storage_options)
            if data is not None:
                fs.pipe_file(path, data)
            else:
                fs.put_file(src_file, path)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{url}: cannot write ({exc}); check free space and permissions, then rerun") from None


def list_dir(url: str, **storage_options: Any) -> tuple[list[str], list[str]]:
    """``(sub-folder names, file names)`` directly under ``url``, sorted; empty if it does not exist."""
    try:
        if is_local(url):
            path = local_path(url)
            if not os.path.isdir(path):
                return [], []
            with os.scandir(path) as it:
                entries = [(e.name, e.is_dir()) for e in it]
        else:
            fs, path = get_fs(url, **storage_options)
            if not fs.exists(path):
                return [], []
            entries = [
                (e["name"].rstrip("/").rsplit("/", 1)[-1], e["type"] == "directory") for e in fs.ls(path, detail=True)
            ]
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{url}: cannot list ({exc})") from None
    return sorted(n for n, d in entries if d), sorted(n for n, d in entries if not d)


def remove(url: str, *, recursive: bool = False, **storage_options: Any) -> None:
    """Delete a file (or a folder with ``recursive``); missing is fine."""
    try:
        if is_local(url):
            path = local_path(url)
            if recursive and os.path.isdir(path):
                import shutil

                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
        else:
            fs, path = get_fs(url, **storage_options)
            if fs.exists(path):
                fs.rm(path, recursive=recursive)
    except OSError as exc:
        raise StorageError(f"{url}: cannot delete ({exc})") from None


def size_of(url: str, **storage_options: Any) -> int | None:
    """Size in bytes of the file at ``url``, or ``None`` if there is none."""
    try:
        if is_local(url):
            return os.stat(local_path(url)).st_size
        fs, path = get_fs(url, **storage_options)
        return int(fs.size(path)) if fs.exists(path) else None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"{url}: cannot stat ({exc})") from None


#: shardkit's work folder inside a split folder (the converter's journal, temporary files of :func:`publish`)
WORK_DIR = "_shardkit"


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
    if is_local(url):
        path = local_path(url)
        d, name = os.path.split(path)
        tmp_dir = d if os.path.basename(d) == WORK_DIR else os.path.join(d, WORK_DIR)
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
        write_atomic(url, src_file=tmp, **storage_options)
        return out
    except OSError as exc:
        raise StorageError(f"{url}: cannot write ({exc.strerror or exc}); rerun the same command to resume") from None
    finally:
        os.unlink(tmp)


def put_bytes(url: str, data: bytes, *, tag: str = "", **storage_options: Any) -> None:
    """:func:`publish` for bytes in memory."""
    publish(url, lambda f: f.write(data), tag=tag, **storage_options)


def sha256_file(f: IO[bytes], chunk: int = 8 << 20) -> tuple[int, str]:
    """``(size, sha256)`` of an open binary file, read to the end."""
    sha = hashlib.sha256()
    n = 0
    while b := f.read(chunk):
        sha.update(b)
        n += len(b)
    return n, sha.hexdigest()


def sha256_of(url: str, **storage_options: Any) -> tuple[int, str]:
    """``(size, sha256)`` of the file at ``url`` (read sequentially)."""
    with open_read(url, **storage_options) as f:
        return sha256_file(f)
