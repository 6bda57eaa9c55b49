"""Open shard URLs: local files directly, everything else through fsspec with read-ahead.

Shard URLs come only from :meth:`shardkit.Manifest.shard_url`, whose names the
manifest validated (no ``..``, absolute paths or other hosts unless
``allow_unsafe_names``). ``pipe:`` URLs run a shell command and are refused
unless ``allow_pipe=True``.
"""

from __future__ import annotations

import io
import logging
import numbers
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import IO, Any, Literal, Optional, TypeVar, Union

from shardkit.choices import check_types
from shardkit.errors import StorageError
from shardkit.storage import fs as storage
from shardkit.storage.budget import (
    AUTO,
    EXPECTED_IMG_PER_S,
    LEGACY_BLOCK,
    REQUEST_BUDGET,
    ReadBudget,
    RequestLimiter,
    is_slowdown,
    read_budget,
)
from shardkit.storage.cache import HashingSink, ShardCache, copy_stream
from shardkit.storage.ranged import ObjectPin, RangeFile, getter_for, ranged_backend
from shardkit.storage.retry import RetryingFile, RetryLog, backend_options, backoff_s, is_transient
from shardkit.storage.timeouts import Timeouts, is_timeout, timeouts_for, with_timeouts
from shardkit.storage.trust import RangeUnsupported, size_mismatch

log = logging.getLogger("shardkit.loader")
T = TypeVar("T")

#: bytes per request of a cache download (a whole shard, read front to back)
DOWNLOAD_BLOCK = 8 << 20


@dataclass(frozen=True)
class StorageConfig:
    """Where shard bytes come from.

    Attributes:
        storage_options: fsspec options for remote URLs (credentials, ``client_kwargs``...).
        block_size: read-ahead bytes per remote request (the tar header walk's reads; reads through a
            sample index are planned per block). ``"auto"`` (the default): chosen per reading process
            from the request budget, the world and ``expected_img_per_s``
            (:func:`shardkit.storage.budget.read_budget`); an int is used as given. Local files are
            not affected.
        cache_dir: optional local directory caching remote shards (shared safely by workers and processes).
        cache_size: cache limit in bytes (least recently used shards are evicted); ``None``: unlimited.
        allow_pipe: accept ``pipe:`` URLs (they run shell commands; off by default).
        allow_unsafe_names: accept manifest shard names that are paths or URLs (trusted manifests only).
        check_sizes: when the loader is built, check that every local shard exists and has the size
            the manifest records (one ``stat`` per shard) and refuse otherwise, naming the shard
            (``shardkit verify`` checks content). ``False``: serve what is readable of a truncated
            shard (samples after the damage are skipped and counted).
        max_retries: retries of one failing remote read (reopened with a range request at the
            byte offset where it failed, after an exponential backoff) before giving up.
        retry_budget_s: seconds one remote read may keep failing before the loader gives up with
            a :class:`shardkit.StorageError` naming the URL. A server that does not answer is given
            up when the next attempt could not finish inside the budget (at most one attempt when
            a single one is longer than the budget).
        request_timeout_s: seconds a remote request waits to connect, or for the next bytes of an
            answer, before it counts as failed (lowered so that one attempt fits ``retry_budget_s``,
            not below 5 s unless set lower here; see :mod:`shardkit.storage.timeouts`). Timeouts the
            user sets in ``storage_options`` (s3fs ``config_kwargs`` ``connect_timeout`` /
            ``read_timeout``, HTTP ``client_kwargs`` ``timeout``) win.
        request_budget: remote GET/s per key prefix for the whole world (every rank and worker
            together); each reading process gets an even share over the dataset's prefixes and
            waits for it before every request; a ``503 SlowDown`` or ``429`` lowers its rate, which
            then recovers. ``None``: no limit (``block_size="auto"`` then reads 8 MiB).
        expected_img_per_s: images per second one rank is expected to consume; ``block_size="auto"``
            sizes reads so that this rate fits the budget (a rank that consumes less sends fewer
            requests, never more than its share).
    """

    storage_options: dict[str, Any] = field(default_factory=dict)
    block_size: Union[int, Literal["auto"]] = AUTO
    cache_dir: Optional[str] = None
    cache_size: Optional[int] = None
    allow_pipe: bool = False
    allow_unsafe_names: bool = False
    check_sizes: bool = True
    max_retries: int = 30
    retry_budget_s: float = 120.0
    request_timeout_s: float = 20.0
    request_budget: Optional[float] = REQUEST_BUDGET
    expected_img_per_s: float = EXPECTED_IMG_PER_S

    def __post_init__(self) -> None:
        check_types(self)
        if not self.request_timeout_s > 0:
            raise ValueError(f"loader option 'request_timeout_s' must be > 0 seconds, got {self.request_timeout_s}")
        if self.max_retries < 0 or self.retry_budget_s < 0:
            raise ValueError(
                f"max_retries and retry_budget_s must be >= 0, got {self.max_retries}, {self.retry_budget_s}"
            )
        b = self.block_size
        if b != AUTO:
            if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
                raise ValueError(f"loader option 'block_size' must be a positive number of bytes or 'auto', got {b!r}")
            object.__setattr__(self, "block_size", int(b))
        if self.request_budget is not None and not self.request_budget > 0:
            raise ValueError(
                f"loader option 'request_budget' must be > 0 GET/s per prefix, or None for no limit, "
                f"got {self.request_budget}"
            )
        if not self.expected_img_per_s > 0:
            raise ValueError(f"loader option 'expected_img_per_s' must be > 0, got {self.expected_img_per_s}")

    def read_budget(
        self,
        *,
        bytes_per_sample: float,
        prefixes: int,
        world_size: int,
        num_workers: int,
        rank: int = 0,
        worker: int = 0,
        batches_per_rank: Optional[int] = None,
    ) -> ReadBudget:
        """The :class:`~shardkit.storage.budget.ReadBudget` of reading process ``(rank, worker)`` of a
        world reading a dataset of ``bytes_per_sample`` over ``prefixes`` prefixes with these options."""
        return read_budget(
            block_size=self.block_size,
            request_budget=self.request_budget,
            expected_img_per_s=self.expected_img_per_s,
            bytes_per_sample=bytes_per_sample,
            prefixes=prefixes,
            world_size=world_size,
            num_workers=num_workers,
            rank=rank,
            worker=worker,
            batches_per_rank=batches_per_rank,
        )

    def __hash__(self) -> int:
        # storage_options (a dict) is left out: equal configs still hash equal, as eq/hash requires
        return hash(tuple(getattr(self, f.name) for f in fields(self) if f.name != "storage_options"))


def check_url(url: str, cfg: StorageConfig) -> None:
    """Refuse ``pipe:`` URLs unless opted in."""
    if storage.scheme(url) == "pipe" and not cfg.allow_pipe:
        raise StorageError(
            f"{url}: pipe: URLs run shell commands and are refused; pass allow_pipe=True only for URLs you trust"
        )


class ShardOpener:
    """Opens shards for one worker; owns the optional :class:`ShardCache` and the worker's request limiter.

    Every remote request it sends (each read-ahead fill or range read, the size probe of an open on a
    backend other than S3 and HTTP(S),
    an index :meth:`fetch`, the reads of a cache download) first waits for ``budget``'s
    :class:`~shardkit.storage.budget.RequestLimiter`; local files and ``pipe:`` URLs never do.

    Args:
        cfg: where bytes come from.
        budget: this reading process's read size and request rate (the loader's workers pass
            theirs); None: ``cfg`` alone, as for one process reading one prefix (a ``block_size``
            of ``"auto"`` then reads 8 MiB).
    """

    def __init__(self, cfg: StorageConfig, budget: Optional[ReadBudget] = None):
        self.cfg = cfg
        if budget is None:
            budget = cfg.read_budget(bytes_per_sample=0.0, prefixes=1, world_size=1, num_workers=1)
            if cfg.block_size == AUTO:  # no bytes per sample to size reads from
                budget = replace(budget, block_size=LEGACY_BLOCK)
        self.budget = budget  #: the read size and request rate applied
        self.block_size = budget.block_size  #: bytes per read-ahead request
        #: waited for before every remote request (None: no limit)
        self.limiter: Optional[RequestLimiter] = budget.limiter()
        self.cache = ShardCache(cfg.cache_dir, cfg.cache_size) if cfg.cache_dir else None
        self.retries = 0  #: remote reads retried so far (all shards together)
        self.retry_log = RetryLog(log)
        #: files served from the cache -> the cache file each reads
        self._cached: weakref.WeakKeyDictionary[IO[bytes], str] = weakref.WeakKeyDictionary()

    def open(self, url: str, nbytes: Optional[int] = None, sha256: Optional[str] = None) -> IO[bytes]:
        """A binary file positioned at the start of shard ``url``.

        ``nbytes`` and ``sha256``: the shard's size and digest from the manifest. The size is checked
        at every open (local: ``fstat``; remote: the size the store reports; a cache hit: its file)
        unless ``check_sizes=False``: a mismatch is a :class:`StorageError` naming the URL and both
        sizes. With a ``cache_dir``, a shard whose ``sha256`` is known is served from the
        content-addressed cache (downloaded once, kept only when its bytes hash to ``sha256``);
        ``sha256=None`` streams it.
        """
        check_url(url, self.cfg)
        want = nbytes if self.cfg.check_sizes else None
        if storage.scheme(url) == "pipe":
            from webdataset.gopen import gopen

            return gopen(url, "rb")
        if storage.is_local(url):
            f = storage.open_read(url)
            self._check_local(url, f, want)
            return f
        cached = self._open_cached(url, nbytes, sha256)
        if cached is not None:
            return cached
        return self._open_remote(url, want)

    def open_ranges(self, url: str, nbytes: Optional[int] = None, sha256: Optional[str] = None) -> IO[bytes]:
        """Like :meth:`open`, for a few large reads at known offsets (the sample index): on remote
        storage (no cache) ``seek(lo); read(n)`` is one range request for exactly ``n`` bytes (no
        read-ahead buffer in between), retried from its offset like every remote read; with a cache
        and a known ``sha256`` the reads come from the cached file."""
        check_url(url, self.cfg)
        want = nbytes if self.cfg.check_sizes else None
        if storage.scheme(url) != "pipe" and storage.is_local(url):
            try:
                f = open(storage.local_path(url), "rb", buffering=0)
            except FileNotFoundError:
                raise StorageError(f"{url}: not found") from None
            self._check_local(url, f, want)
            return f
        if storage.scheme(url) == "pipe":
            return self.open(url, nbytes, sha256)
        cached = self._open_cached(url, nbytes, sha256)
        if cached is not None:
            return cached
        return self._retrying(url, want)  # type: ignore[return-value]  # a RawIOBase: a binary file

    def cache_path_of(self, f: IO[bytes]) -> Optional[str]:
        """The cache file that ``f`` (returned by :meth:`open` or :meth:`open_ranges`) reads, or None
        when it reads the store or a local dataset."""
        return self._cached.get(f)

    def drop_cached(self, url: str, nbytes: int, sha256: str, why: str) -> bool:
        """Remove the cache entry of shard ``url`` (this size and digest), logging one warning that
        names the cache file and ``why``; the next open downloads it again. False when there was
        none (or no cache)."""
        if self.cache is None:
            return False
        return self.cache.drop(sha256, nbytes, f"{url}: {why}")

    def _check_local(self, url: str, f: IO[bytes], nbytes: Optional[int]) -> None:
        if nbytes is None:
            return
        size = os.fstat(f.fileno()).st_size
        if size != nbytes:
            f.close()
            raise size_mismatch(url, size, nbytes)

    def _open_cached(self, url: str, nbytes: Optional[int], sha256: Optional[str]) -> Optional[IO[bytes]]:
        """The shard from the cache (downloaded on a miss), or None: no cache, no content key, no room."""
        if self.cache is None or nbytes is None or sha256 is None:
            return None
        f = self.cache.fetch(url, nbytes, sha256, lambda sink: self._download(url, nbytes, sink))
        if f is not None:
            self._cached[f] = f.name
        return f

    def _download(self, url: str, nbytes: int, sink: HashingSink) -> None:
        """Write the whole shard ``url`` into ``sink`` (the cache checks size and digest)."""
        try:
            with self._retrying(url, nbytes, block_size=DOWNLOAD_BLOCK) as src:
                copy_stream(src, sink)  # type: ignore[arg-type]
        except RangeUnsupported:
            self._stream_download(url, nbytes, sink)

    def _stream_download(self, url: str, nbytes: int, sink: HashingSink) -> None:
        """One plain GET of the whole of ``url`` into ``sink`` (a server without Range requests); a
        transient failure restarts it from byte 0."""
        opts = self._options(url, self._timeouts(url))

        def attempt() -> None:
            sink.restart()
            with storage.open_read(url, block_size=0, raw_errors=True, size=nbytes, **opts) as src:
                copy_stream(src, sink)

        self._whole(url, attempt, what="whole-shard download", final=lambda: sink.full)

    @property
    def cache_waits(self) -> int:
        """Shard (and sidecar) misses that waited for another process's download of the same entry."""
        return self.cache.waits if self.cache is not None else 0

    def fetch_sidecar(self, url: str, sha256: Optional[str], check: Callable[[bytes], T], tag: str = "idx") -> T:
        """``check(bytes)`` of the small file ``url`` that belongs to the shard of content ``sha256`` (its
        sample index): through the node cache when there is one and ``sha256`` is known (entry
        ``<sha256>.<tag>``, loaded once per node, checked by ``check`` on every hit), else :meth:`fetch`.
        ``check`` raises for bytes it rejects."""
        if self.cache is None or sha256 is None or storage.is_local(url) or storage.scheme(url) == "pipe":
            return check(self.fetch(url))
        return self.cache.fetch_sidecar(sha256, tag, lambda: self.fetch(url), check)

    def fetch(self, url: str) -> bytes:
        """The whole of a small object (a sample index): one GET on remote storage, no size probe first."""
        check_url(url, self.cfg)
        if storage.is_local(url):
            with open(storage.local_path(url), "rb") as f:
                return f.read()
        fs, path = storage.get_fs(url, **self._options(url, self._timeouts(url)))
        # a range from 0: s3fs probes the size first without one. Retried, not given up: a sample index that
        # falls back to the header walk would send far more requests exactly while the store asks for fewer
        return self._whole(url, lambda: bytes(fs.cat_file(path, start=0)), what="read")

    def _whole(self, url: str, attempt: Callable[[], T], *, what: str, final: Callable[[], bool] = bool) -> T:
        """``attempt()``, a request for a whole object, sent again after a transient failure (``final()``: the
        failure came too late to retry), within ``max_retries`` and ``retry_budget_s``: each send waits for the
        limiter, a ``SlowDown`` lowers its rate, and a server that does not answer is given up when the next
        attempt could not finish inside the budget."""
        timeouts = self._timeouts(url)
        failures, t0 = 0, time.monotonic()
        while True:
            if self.limiter is not None:
                self.limiter.acquire()
            try:
                return attempt()
            except Exception as exc:
                if final() or not is_transient(exc):
                    raise
                if self.limiter is not None and is_slowdown(exc):
                    self.limiter.slow_down()  # lower the rate first: the retry below waits for it
                failures += 1
                spent = time.monotonic() - t0
                if is_timeout(exc) and spent + backoff_s(url, failures) + timeouts.attempt_s > self.cfg.retry_budget_s:
                    raise StorageError(
                        f"{url}: the server did not answer within {timeouts.request_s:g} s ({failures} attempts "
                        f"over {spent:.1f} s); check the endpoint and network (a larger retry_budget_s does not help "
                        f"a server that does not answer)"
                    ) from None
                if failures > self.cfg.max_retries or spent > self.cfg.retry_budget_s:
                    raise StorageError(
                        f"{url}: {what} still failing after {failures} attempts over {spent:.1f} s "
                        f"({type(exc).__name__}: {exc}); check the endpoint and network, or raise max_retries / "
                        "retry_budget_s"
                    ) from None
                self.retries += 1
                time.sleep(backoff_s(url, failures))

    def _open_remote(self, url: str, nbytes: Optional[int] = None) -> IO[bytes]:
        """A :class:`RetryingFile` (transient errors are retried from the failed read's byte offset)
        behind a C ``io.BufferedReader`` of ``block_size``: one range request per block, and the
        reader's many small header and member reads are served from memory without going
        through fsspec's Python read path (about 16 us each)."""
        return io.BufferedReader(self._retrying(url, nbytes), buffer_size=self.block_size)

    def _retrying(self, url: str, nbytes: Optional[int] = None, block_size: Optional[int] = None) -> RetryingFile:
        """A :class:`RetryingFile` of ``url`` (``nbytes``: the size its reads must confirm; None: any).

        S3 and HTTP(S) are read by ranged GETs of the known size (:class:`~shardkit.storage.ranged.RangeFile`:
        no size probe; every answer's ``Content-Range`` total checked against ``nbytes``); other backends
        open through fsspec, whose open reports the size."""
        timeouts = self._timeouts(url)
        opts = self._options(url, timeouts)
        block_size = block_size or self.block_size
        ranged = ranged_backend(url)
        if ranged:
            get, pin = getter_for(url, opts), ObjectPin()

            def open_fn() -> IO[bytes]:
                return RangeFile(  # type: ignore[return-value]  # a RawIOBase: a binary file
                    url, get, size=nbytes, expected=nbytes, pin=pin, real_size=lambda: storage.size_of(url, **opts)
                )
        else:

            def open_fn() -> IO[bytes]:
                return storage.open_read(url, block_size=block_size, raw_errors=True, cache_type="none", **opts)

        return RetryingFile(
            url,
            open_fn,
            max_retries=self.cfg.max_retries,
            retry_budget_s=self.cfg.retry_budget_s,
            on_retry=self._retried,
            log=self.retry_log,
            limiter=self.limiter,
            open_sends=not ranged,
            expected_size=nbytes,
            timeouts=timeouts,
        )

    def _timeouts(self, url: str) -> Timeouts:
        return timeouts_for(url, self.cfg.storage_options, self.cfg.request_timeout_s, self.cfg.retry_budget_s)

    def _options(self, url: str, timeouts: Timeouts) -> dict[str, Any]:
        """The backend's options for ``url``: its slow retries off, a timeout on every request."""
        return with_timeouts(url, backend_options(url, self.cfg.storage_options), timeouts.request_s)

    def _retried(self, url: str, offset: int, exc: BaseException) -> None:
        self.retries += 1
