"""Remote shard reads that survive dropped connections: back off, reopen at the byte offset, continue.

Object storage drops connections, answers 500/503 and goes away for a minute;
a training job must not die for it, nor re-read a shard from its start.
:class:`RetryingFile` wraps a remote file: when a read (or the open) fails
with a transient error, it closes the broken file, waits (exponential backoff
with a deterministic jitter), opens the URL again and seeks to the offset of
the failed read, so the next request is a range request from that offset.
A failure is given up when the same read has failed ``max_retries`` times or
has kept failing for ``retry_budget_s`` seconds; the :class:`StorageError`
then names the URL, the offset, the attempts and the last error.

Layering with the backend's own retries (so attempts do not multiply):
s3fs retries a request a few times within about a second (connection and
payload errors, ``SlowDown``); botocore would retry every 5xx again up to 5
times with growing sleeps, so :func:`backend_options` turns botocore's retries
off for shard reads (unless the caller set them), and this layer owns
everything longer than s3fs's quick retries. fsspec's HTTP backend has no
retries of its own. Not retried: missing objects, denied access, and any
error that is not an I/O or network error (a bug must not look like a flaky
network).

Backpressure: a :class:`RetryingFile` given a
:class:`~shardkit.storage.budget.RequestLimiter` waits for it before every request it sends (the
open's size probe, each read), and a failure that says "slow down" (:func:`is_slowdown`: S3's
``SlowDown``, any ``503`` or ``429``) calls :meth:`~shardkit.storage.budget.RequestLimiter.slow_down`
before the usual retry, so the limiter lowers the process's rate and the retry waits for it:
retries do not multiply the request rate. Where the signal is visible: s3fs retries a request
that gets ``SlowDown`` itself (5 attempts, sleeping 0.1 s to 0.8 s between them, about 1.9 s in
all; s3fs has no option for it) and raises ``OSError(EBUSY)`` with botocore's ``ClientError``
as its cause when they are spent; a ``503`` to a HEAD (no body) is not retried by s3fs and
arrives the same way. So a short burst that s3fs rides out is not seen here (its own sleeps
already slowed that request); a sustained one is, and lowers the rate of every later request.
fsspec's HTTP backend raises ``aiohttp.ClientResponseError`` (``status``); gcsfs an ``HttpError``
(``code``): both are recognised.

Logging tells one story per outage (:class:`RetryLog`): the first failed read of a
URL is logged once, a long outage gets a reminder at most every ``repeat_s``
seconds, and one line says when the URL recovered ("recovered after 7 retries
over 4.1 s"); giving up is the :class:`StorageError` itself. The counts stay in
``loader.stats.retries``.
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections.abc import Callable
from typing import IO, Any, Optional

from shardkit.errors import ShardkitError, StorageError
from shardkit.storage.budget import RequestLimiter, is_slowdown
from shardkit.storage.rawfile import PositionedReader
from shardkit.storage.timeouts import Timeouts, is_timeout
from shardkit.storage.trust import changed_while_reading, check_size, identity, is_changed_object, is_no_range, no_range

_FATAL = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_NETWORK_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "requests", "http.client", "ssl", "asyncio")
#: backoff before the first retry; doubles per attempt up to ``_BACKOFF_MAX_S``
_BACKOFF_S = 0.05
_BACKOFF_MAX_S = 5.0


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: I/O and network errors, not missing objects, denied access or bugs."""
    if isinstance(exc, (ShardkitError, *_FATAL)) or not isinstance(exc, Exception) or is_changed_object(exc):
        return False  # an object that changed is not a network that failed
    if isinstance(exc, (OSError, EOFError, TimeoutError)):
        return True
    return any(
        c.__module__.split(".")[0] in _NETWORK_MODULES or c.__module__ == "http.client" for c in type(exc).__mro__
    )


_BACKEND_DIRS = ("/fsspec/", "/s3fs/", "/gcsfs/", "/adlfs/")


def _raised_by_backend(exc: BaseException) -> bool:
    """True when the innermost frame of ``exc`` is in a storage backend (not a bug of ours)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and any(d in tb.tb_frame.f_code.co_filename for d in _BACKEND_DIRS)


def backend_options(url: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """``storage_options`` for reading shards, with the backend's slow retry loops off where we own retries.

    For ``s3://`` the botocore retries (up to 5 attempts per request with sleeps
    that grow to seconds) are disabled unless the caller configured ``retries``
    in ``config_kwargs``; s3fs's own quick retries stay.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("s3", "s3a"):
        return storage_options
    ck = dict(storage_options.get("config_kwargs") or {})
    if "retries" in ck:
        return storage_options
    ck["retries"] = {"total_max_attempts": 1}
    return {**storage_options, "config_kwargs": ck}


def backoff_s(url: str, attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): exponential, capped, jittered by URL (no clock, no pid)."""
    base = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))
    h = hashlib.blake2b(f"{url}|{attempt}".encode(), digest_size=2).digest()
    return base * (0.5 + int.from_bytes(h, "big") / 65535 / 2)  # in [0.5, 1] x base


class RetryLog:
    """Log one story per outage of a URL: its first failure, rare reminders, then its recovery.

    Args:
        logger: where the lines go (all warnings: a user who saw the failure sees its end).
        repeat_s: while a URL keeps failing, at most one reminder line per ``repeat_s`` seconds.
        clock: seconds, monotonic (tests pass a fake clock).
    """

    def __init__(self, logger: logging.Logger, *, repeat_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self._log, self.repeat_s, self._clock = logger, repeat_s, clock
        self._last: dict[str, float] = {}  # url -> when its last line was logged (only URLs in an outage)

    def failed(self, url: str, offset: int, attempt: int, exc: BaseException) -> None:
        """Retry number ``attempt`` (1-based) of a read of ``url`` at ``offset`` is about to be made."""
        now = self._clock()
        last = self._last.get(url)
        if last is None:
            self._log.warning(
                "shardkit: %s: read at byte %d failed (%s: %s); retrying quietly until it recovers",
                url,
                offset,
                type(exc).__name__,
                exc,
            )
        elif now - last >= self.repeat_s:
            self._log.warning(
                "shardkit: %s: still failing after %d retries (%s: %s); retrying",
                url,
                attempt - 1,
                type(exc).__name__,
                exc,
            )
        else:
            return
        self._last[url] = now

    def recovered(self, url: str, retries: int, seconds: float) -> None:
        """A read of ``url`` succeeded after ``retries`` retries over ``seconds``."""
        if self._last.pop(url, None) is not None:
            self._log.warning(
                "shardkit: %s: recovered after %d %s over %.1f s",
                url,
                retries,
                "retry" if retries == 1 else "retries",
                seconds,
            )

    def gave_up(self, url: str) -> None:
        """The read of ``url`` was given up (the caller raises the error): the story ends there."""
        self._last.pop(url, None)


class RetryingFile(PositionedReader):
    """A read-only, seekable view of ``url`` that reopens at the current offset after transient errors.

    Args:
        url: the URL (for messages).
        open_fn: opens ``url`` from its start (an fsspec file, seekable; seeking before reading is free).
        max_retries: retries of one failing read before giving up.
        retry_budget_s: seconds one read may keep failing before giving up.
        on_retry: called as ``on_retry(url, offset, exc)`` before each retry (counting).
        log: tells the story of an outage (first failure, recovery); None: silent.
        sleep: the wait function (tests pass a fake clock).
        limiter: waited for before every request (the open's probe when ``open_sends`` and each read
            that is not at the end of the file); told to slow down by a failure that
            :func:`is_slowdown`. None: no limit.
        open_sends: ``open_fn`` sends a request (fsspec's size probe); False for a file that sends
            its requests only when read.
        expected_size: the size the first open must find (the manifest's): another is a
            :class:`StorageError` ("the shard changed since conversion"); None: any. Every reopen
            must find the object of the first open (its size, and its ETag where the backend gives
            one): a changed object is a :class:`StorageError` ("changed while reading"), never read
            at the old offsets; so is s3fs's ``FileExpired``.
        timeouts: the backend's per-request timeout (already in ``open_fn``'s options) and the longest
            one attempt can take: after an attempt that timed out, the read is given up when the next
            could not finish inside ``retry_budget_s`` (counted from the read's start), with an error
            that says the server did not answer. None: no such rule.
    """

    def __init__(
        self,
        url: str,
        open_fn: Callable[[], IO[bytes]],
        *,
        max_retries: int,
        retry_budget_s: float,
        on_retry: Optional[Callable[[str, int, BaseException], None]] = None,
        log: Optional[RetryLog] = None,
        sleep: Callable[[float], None] = time.sleep,
        limiter: Optional[RequestLimiter] = None,
        open_sends: bool = True,
        expected_size: Optional[int] = None,
        timeouts: Optional[Timeouts] = None,
    ):
        super().__init__()
        self._timeouts = timeouts
        self._expected_size = expected_size
        self._identity: Optional[tuple[Optional[int], Optional[str]]] = None
        self.url, self._open_fn = url, open_fn
        self._limiter, self._open_sends = limiter, open_sends
        self.max_retries, self.retry_budget_s = max_retries, retry_budget_s
        self._on_retry, self._log, self._sleep = on_retry, log, sleep
        self._f: Optional[IO[bytes]] = None
        self._pos = 0
        self.retries = 0  #: retries made so far (all reads together)
        self._call(lambda f: None)  # open now: a missing shard fails here, with its name

    # -- the file protocol
    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        else:
            pos = self._call(lambda f: f.seek(offset, io.SEEK_END))
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def read(self, size: Optional[int] = -1) -> bytes:
        n = -1 if size is None else size
        data: bytes = self._call(lambda f: f.read(n), sends=n != 0)
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._drop()
        super().close()

    # -- machinery
    def _drop(self) -> None:
        f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
                pass

    def _at_end(self, f: IO[bytes]) -> bool:
        """A read at the current offset sends no request: fsspec knows the size and answers ``b""``."""
        size = getattr(f, "size", None)
        return isinstance(size, int) and self._pos >= size

    def _check_identity(self, f: IO[bytes]) -> None:
        """The first open finds the manifest's size; every reopen finds the object of the first open."""
        ident = identity(f)
        if self._identity is None:
            check_size(self.url, ident[0], self._expected_size)
            self._identity = ident
        elif any(a is not None and b is not None and a != b for a, b in zip(ident, self._identity)):
            raise changed_while_reading(self.url)

    def _silent_past_budget(self, exc: BaseException, elapsed: float, failures: int) -> bool:
        """After a timed-out attempt: True when the next attempt could not finish inside the budget."""
        t = self._timeouts
        if t is None or not is_timeout(exc):
            return False
        return elapsed + backoff_s(self.url, failures) + t.attempt_s > self.retry_budget_s

    def _no_answer(self, failures: int, elapsed: float) -> StorageError:
        assert self._timeouts is not None
        return StorageError(
            f"{self.url}: the server did not answer within {self._timeouts.request_s:g} s (read at byte {self._pos}, "
            f"{failures} {'attempt' if failures == 1 else 'attempts'} over {elapsed:.1f} s); check the endpoint and "
            f"network (a larger retry_budget_s does not help a server that does not answer)"
        )

    def _call(self, op: Callable[[IO[bytes]], Any], sends: bool = False) -> Any:
        """Run ``op`` on the file positioned at ``self._pos``, reopening after transient errors
        (``sends``: ``op`` sends a request, so it waits for the limiter)."""
        if self.closed:
            raise ValueError("I/O operation on closed file")
        failures, first, start = 0, 0.0, time.monotonic()
        while True:
            try:
                if self._f is None:
                    if self._limiter is not None and self._open_sends:
                        self._limiter.acquire()  # fsspec's size probe
                    self._f = self._open_fn()
                    self._check_identity(self._f)
                if self._f.tell() != self._pos:
                    self._f.seek(self._pos)
                if sends and self._limiter is not None and not self._at_end(self._f):
                    self._limiter.acquire()
                result = op(self._f)
                if failures and self._log is not None:
                    self._log.recovered(self.url, failures, time.monotonic() - first)
                return result
            except Exception as exc:  # noqa: BLE001 - classified just below
                if is_changed_object(exc):
                    self._drop()
                    raise changed_while_reading(self.url) from None
                if isinstance(exc, ShardkitError):
                    self._drop()
                    raise
                if isinstance(exc, FileNotFoundError):
                    raise StorageError(f"{self.url}: not found") from None
                if isinstance(exc, _FATAL):
                    raise StorageError(f"{self.url}: cannot read ({type(exc).__name__}: {exc})") from None
                if is_no_range(exc):
                    self._drop()
                    raise no_range(self.url) from None
                if not is_transient(exc):
                    if _raised_by_backend(exc):  # e.g. fsspec's HTTP file on a 404 page: "no range requests"
                        raise StorageError(
                            f"{self.url}: cannot read ({type(exc).__name__}: {exc}); is the shard there?"
                        ) from None
                    raise
                self._drop()
                if self._limiter is not None and is_slowdown(exc):
                    self._limiter.slow_down()  # lower the rate first: the retry below waits for it
                now = time.monotonic()
                first = first or now
                failures += 1
                spent = now - first
                if self._silent_past_budget(exc, now - start, failures):
                    if self._log is not None:
                        self._log.gave_up(self.url)
                    raise self._no_answer(failures, now - start) from None
                if failures > self.max_retries or spent >= self.retry_budget_s:
                    if self._log is not None:
                        self._log.gave_up(self.url)
                    raise StorageError(
                        f"{self.url}: read at byte {self._pos} still failing after {failures - 1} retries "
                        f"over {spent:.1f} s ({type(exc).__name__}: {exc}); check the endpoint and network, "
                        f"or raise max_retries / retry_budget_s"
                    ) from None
                self.retries += 1
                if self._on_retry is not None:
                    self._on_retry(self.url, self._pos, exc)
                if self._log is not None:
                    self._log.failed(self.url, self._pos, failures, exc)
                self._sleep(min(backoff_s(self.url, failures), max(0.0, self.retry_budget_s - spent)))
