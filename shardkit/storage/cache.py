"""A content-addressed local cache of remote shards, safe to share between workers and processes.

Layout: one file per shard content in ``cache_dir``, named from the manifest's
sha256 and size of the shard (``<sha256>-<bytes>.tar``), never from its URL: a
dataset converted again at the same URL gets new entries, and one URL on two
endpoints shares none. Every change to the directory (reserving space,
evicting, publishing a download, dropping an entry) and every open of an entry
happens under an exclusive ``fcntl`` lock on ``cache_dir/.lock``, so a shard
evicted by another process is either opened before it goes or fetched again.
Readers that still have an evicted shard open keep reading it (POSIX unlink
semantics).

A download runs outside the lock into a temporary file that is first extended
to the shard's full size (so its space counts against the limit while it
downloads), hashed as it streams, fsynced, and renamed into place only when its
size and sha256 are the manifest's. Its downloader holds an ``fcntl.flock`` on
it; the OS releases that claim when the downloader dies, so a sweeper that can
take it removes the file (with or without a size limit). A hit is checked
against the size (an entry cut short by a crash is dropped with a warning and
fetched again). A full disk while downloading leaves nothing behind: the caller
streams the shard without the cache. Least recently used shards (by
modification time, refreshed on every hit) are evicted to stay under
``cache_size``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from typing import IO, Any, Optional, TypeVar

from shardkit.errors import StorageError
from shardkit.storage.trust import digest_mismatch, size_mismatch

log = logging.getLogger("shardkit.loader")

_LOCK = ".lock"
_TMP = ".tmp-"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FULL = (errno.ENOSPC, errno.EDQUOT)
#: claims one fetch waits for before it gives up (each is a whole download by another process)
_MAX_WAITS = 1000
T = TypeVar("T")


class HashingSink:
    """The file a download writes into: counts and hashes every byte, and notes a full disk.

    ``restart()`` empties it (a download that must begin again from byte 0).
    """

    def __init__(self, f: IO[bytes]):
        self._f = f
        self.sha = hashlib.sha256()
        self.written = 0  #: bytes written so far
        self.full = False  #: a write failed for lack of space

    def write(self, data: Any) -> int:
        """Write ``data`` at the end of what was written so far."""
        try:
            n = self._f.write(data)
        except OSError as exc:
            self.full = self.full or exc.errno in _FULL
            raise
        self.sha.update(data)
        self.written += len(data)
        return n if n is not None else len(data)

    def restart(self) -> None:
        """Forget everything written: the next write lands at byte 0."""
        self._f.seek(0)
        self.sha = hashlib.sha256()
        self.written = 0


class ShardCache:
    """Content-addressed LRU cache of shard files under ``cache_dir`` with at most ``cache_size`` bytes.

    Args:
        cache_dir: directory (created).
        cache_size: byte limit, or ``None`` for no limit.
    """

    def __init__(self, cache_dir: str, cache_size: Optional[int] = None):
        self.dir = cache_dir
        self.limit = cache_size
        self.waits = 0  #: misses that waited for another process's download of the same entry
        os.makedirs(cache_dir, exist_ok=True)

    def path_for(self, sha256: str, nbytes: int) -> str:
        """Where the shard of this sha256 and size is cached."""
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256.lower()):
            raise StorageError(f"{sha256!r} is not a sha256 hex digest; the manifest is damaged")
        return os.path.join(self.dir, f"{sha256.lower()}-{int(nbytes)}.tar")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(os.path.join(self.dir, _LOCK), "a+b") as lf:
            fcntl.flock(lf.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lf.fileno(), fcntl.LOCK_UN)

    def _entries(self) -> list[tuple[float, int, str]]:
        """Under the lock: ``(mtime, size, path)`` of every entry; temporary files of dead downloaders removed."""
        out = []
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name == _LOCK or not e.is_file(follow_symlinks=False):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if e.name.startswith(_TMP) and not _claimed(e.path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)  # its downloader died
                    continue
                out.append((st.st_mtime, st.st_size, e.path))
        return out

    def usage(self) -> int:
        """Bytes currently used (finished shards plus reserved downloads)."""
        with self._locked():
            return sum(size for _, size, _ in self._entries())

    def _reserve(self, nbytes: int) -> bool:
        """Under the lock: evict LRU shards until ``nbytes`` more fit; False if they never can."""
        entries = self._entries()  # also sweeps dead downloads when there is no limit
        if self.limit is None:
            return True
        if nbytes > self.limit:
            return False
        used = sum(size for _, size, _ in entries)
        for _, size, path in sorted(e for e in entries if not os.path.basename(e[2]).startswith(_TMP)):
            if used + nbytes <= self.limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            used -= size
        return used + nbytes <= self.limit

    def _open_hit(self, path: str, nbytes: int) -> Optional[IO[bytes]]:
        """Under the lock: the entry at ``path`` opened, or None (absent, or of the wrong size: dropped)."""
        try:
            f = open(path, "rb", buffering=1 << 20)
        except FileNotFoundError:
            return None
        size = os.fstat(f.fileno()).st_size
        if size != nbytes:
            f.close()
            os.unlink(path)
            log.warning(
                "shardkit: cache file %s has %d bytes, the manifest says %d (cut short by a crash?); "
                "dropped, fetching the shard again",
                path,
                size,
                nbytes,
            )
            return None
        os.utime(path)  # LRU stamp
        return f

    def _claim(self, path: str, nbytes: int, open_hit: Callable[[str], Optional[IO[bytes]]]) -> tuple[Any, Any]:
        """``(hit, None)``, ``(None, claimed temporary file)`` or ``(None, None)`` (no room) for entry ``path``.

        The temporary file of an entry has one name (``.tmp-`` and the entry's), so a process that misses
        an entry another one is downloading finds its claim: it waits for that claim's ``flock`` (held
        until the downloader publishes the entry or dies; counted in :attr:`waits`), then looks again: a
        hit, or the claim of a dead downloader, which it takes over (its file is replaced).
        """
        tmp = os.path.join(self.dir, _TMP + os.path.basename(path))
        waited = False
        for _ in range(_MAX_WAITS):
            with self._locked():
                hit = open_hit(path)
                if hit is not None:
                    return hit, None
                claim = _open_claim(tmp)
                if claim is None:  # nobody downloads it: this process does
                    _remove(tmp)  # a dead downloader's (if any): taken over
                    if not self._reserve(nbytes):
                        return None, None
                    tf = open(tmp, "w+b")
                    fcntl.flock(tf.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # the claim, until it closes
                    tf.truncate(nbytes)  # reserve the space so concurrent fetches see it
                    return None, tf
            if not waited:
                self.waits += 1
                waited = True
            try:
                fcntl.flock(claim, fcntl.LOCK_SH)  # returns when the downloader publishes, fails or dies
            finally:
                os.close(claim)
        raise StorageError(f"{path}: still claimed after {_MAX_WAITS} downloads by other processes; clear {self.dir}")

    def fetch(self, url: str, nbytes: int, sha256: str, download: Callable[[HashingSink], None]) -> Optional[IO[bytes]]:
        """The cached shard ``url`` of ``nbytes`` bytes and digest ``sha256``, open for reading.

        On a miss ``download(sink)`` writes the shard into ``sink`` (it may call ``sink.restart()``);
        the result is kept only when its size and sha256 are the manifest's (a :class:`StorageError`
        otherwise). Processes sharing ``cache_dir`` that miss the same shard at once download it once:
        the others wait for the downloader's claim (:meth:`_claim`). Returns ``None`` when the shard
        cannot fit in the cache or the disk is full (the caller streams it).
        """
        path = self.path_for(sha256, nbytes)
        hit, tf = self._claim(path, nbytes, lambda p: self._open_hit(p, nbytes))
        if hit is not None or tf is None:
            return hit
        tmp = tf.name
        sink = HashingSink(tf)
        try:
            try:
                download(sink)
                tf.truncate(sink.written)
                if sink.written != nbytes:
                    raise size_mismatch(url, sink.written, nbytes)
                digest = sink.sha.hexdigest()
                if digest != sha256.lower():
                    raise digest_mismatch(url, digest, sha256.lower())
                tf.flush()
                os.fsync(tf.fileno())
            except OSError as exc:
                if not (sink.full or exc.errno in _FULL):
                    raise
                log.warning(
                    "shardkit: cache folder %s is full (%s) while caching %s; streaming it without the cache "
                    "(free space there or lower cache_size)",
                    self.dir,
                    os.strerror(exc.errno or errno.ENOSPC),
                    url,
                )
                _remove(tmp)
                return None
            with self._locked():
                os.replace(tmp, path)
                out = open(path, "rb", buffering=1 << 20)
                os.utime(path)
            return out
        except BaseException:
            _remove(tmp)
            raise
        finally:
            tf.close()  # releases the claim: the waiters look again

    def fetch_sidecar(self, sha256: str, tag: str, load: Callable[[], bytes], check: Callable[[bytes], T]) -> T:
        """``check(bytes)`` of the small file ``tag`` of the shard with content ``sha256`` (its sample index).

        The entry is ``<sha256>.<tag>`` (the manifest has no digest of a sidecar: ``check`` verifies it, e.g.
        its own CRC-32 and the shard digest it names). A hit that fails ``check`` is dropped (a warning) and
        loaded again; a miss runs ``load()`` once per node (others wait, as :meth:`fetch`) and keeps the bytes
        only when ``check`` accepts them (its error propagates otherwise).
        """
        path = self.path_for(sha256, 0)[: -len("-0.tar")] + f".{tag}"
        checked: list[T] = []

        def open_hit(p: str) -> Optional[IO[bytes]]:
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                return None
            try:
                checked.append(check(data))
            except Exception as exc:  # noqa: BLE001 - whatever check rejects: the entry is not trusted
                _remove(p)
                log.warning("shardkit: dropped cache file %s (%s); loading it again", p, exc)
                return None
            os.utime(p)
            return io.BytesIO()

        hit, tf = self._claim(path, 0, open_hit)
        if hit is not None:
            return checked[-1]
        if tf is None:
            return check(load())
        published = False
        try:
            data = load()
            value = check(data)
            try:
                tf.write(data)
                tf.flush()
                os.fsync(tf.fileno())
                with self._locked():
                    if self._reserve(len(data)):
                        os.replace(tf.name, path)
                        published = True
            except OSError as exc:
                if exc.errno not in _FULL:
                    raise
            return value
        finally:
            if not published:
                _remove(tf.name)
            tf.close()  # releases the claim: the waiters look again

    def drop(self, sha256: str, nbytes: int, why: str) -> bool:
        """Remove the entry of this content (readers that have it open keep reading); True if there was one."""
        path = self.path_for(sha256, nbytes)
        with self._locked():
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
        log.warning("shardkit: dropped cache file %s (%s); the next open fetches the shard again", path, why)
        return True


def _open_claim(path: str) -> Optional[int]:
    """A descriptor of temporary file ``path`` while a live downloader holds its claim, else None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return fd  # claimed: the caller waits on it
    os.close(fd)  # closing also releases the lock just taken
    return None


def _claimed(path: str) -> bool:
    """True while a live downloader holds its ``flock`` on temporary file ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True  # gone already: nothing to sweep
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also releases the lock if it was taken
    return False


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def copy_stream(src: IO[bytes], dst: Any, chunk: int = 8 << 20) -> None:
    """Copy ``src`` to ``dst`` in chunks."""
    shutil.copyfileobj(src, dst, chunk)
