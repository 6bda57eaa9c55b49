"""A local cache of remote shards, safe to share between workers and processes.

Layout: one file per shard, named from a hash of its URL plus its base name,
in ``cache_dir``. Every change to the directory (reserving space, evicting,
publishing a download) happens under an exclusive ``fcntl`` lock on
``cache_dir/.lock``; downloads themselves run outside the lock into a
temporary file that is first extended to the shard's full size (so its space
counts against the limit while it downloads) and then renamed into place.
Least recently used shards (by modification time, refreshed on every hit) are
evicted to stay under ``cache_size``. Readers that still have an evicted
shard open keep reading it (POSIX unlink semantics).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Optional

from shardkit.errors import StorageError

_LOCK = ".lock"
_TMP = ".tmp-"


class ShardCache:
    """LRU cache of shard files under ``cache_dir`` with at most ``cache_size`` bytes.

    Args:
        cache_dir: directory (created).
        cache_size: byte limit, or ``None`` for no limit.
    """

    def __init__(self, cache_dir: str, cache_size: Optional[int] = None):
        self.dir = cache_dir
        self.limit = cache_size
        os.makedirs(cache_dir, exist_ok=True)

    def path_for(self, url: str) -> str:
        """Where ``url`` is cached."""
        h = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
        base = url.rstrip("/").rsplit("/", 1)[-1][-80:]
        return os.path.join(self.dir, f"{h}-{base}")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(os.path.join(self.dir, _LOCK), "a+b") as lf:
            fcntl.flock(lf.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lf.fileno(), fcntl.LOCK_UN)

    def _entries(self) -> list[tuple[float, int, str]]:
        out = []
        with os.scandir(self.dir) as it:
            for e in it:
                if e.name == _LOCK or not e.is_file(follow_symlinks=False):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if e.name.startswith(_TMP) and not _owner_alive(e.name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)  # left behind by a killed process
                    continue
                out.append((st.st_mtime, st.st_size, e.path))
        return out

    def usage(self) -> int:
        """Bytes currently used (finished shards plus reserved downloads)."""
        return sum(size for _, size, _ in self._entries())

    def _reserve(self, nbytes: int) -> bool:
        """Under the lock: evict LRU shards until ``nbytes`` more fit; False if they never can."""
        if self.limit is None:
            return True
        if nbytes > self.limit:
            return False
        entries = self._entries()
        used = sum(size for _, size, _ in entries)
        for _, size, path in sorted(e for e in entries if not os.path.basename(e[2]).startswith(_TMP)):
            if used + nbytes <= self.limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            used -= size
        return used + nbytes <= self.limit

    def fetch(self, url: str, nbytes: int, download: Callable[[IO[bytes]], None]) -> Optional[str]:
        """Local path of ``url``, downloading it with ``download(file)`` on a miss.

        Returns ``None`` when the shard cannot fit in the cache (the caller streams it).
        """
        path = self.path_for(url)
        with self._locked():
            if os.path.exists(path):
                os.utime(path)  # LRU stamp
                return path
            if not self._reserve(nbytes):
                return None
            tmp = os.path.join(self.dir, f"{_TMP}{os.getpid()}-{uuid.uuid4().hex[:8]}")
            with open(tmp, "wb") as f:
                f.truncate(nbytes)  # reserve the space so concurrent fetches see it
        try:
            with open(tmp, "r+b") as f:
                download(f)
                written = f.tell()
                f.truncate(written)
            if written != nbytes:
                raise StorageError(
                    f"{url}: downloaded {written} bytes, manifest says {nbytes}; the shard changed since conversion"
                )
            with self._locked():
                os.replace(tmp, path)
                os.utime(path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return path


def _owner_alive(tmp_name: str) -> bool:
    try:
        pid = int(tmp_name[len(_TMP) :].split("-", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def copy_stream(src: IO[bytes], dst: IO[bytes], chunk: int = 8 << 20) -> None:
    """Copy ``src`` to ``dst`` in chunks."""
    shutil.copyfileobj(src, dst, chunk)
