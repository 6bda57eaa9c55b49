"""Remote shards read by ranged GETs with the manifest's size: no size probe (``HEAD``) at open.

The manifest records every shard's size, so an open needs no request: :class:`RangeFile` sends one
``GET`` with a ``Range`` header per read, clamped to the size it was given. Every answer is checked
against what the manifest promises:

* the total in ``Content-Range`` (``bytes lo-hi/TOTAL``) is the object's real size: another total
  is a changed shard (:func:`~shardkit.storage.trust.size_mismatch`, naming the URL, the expected
  and the received size), before a byte of it is handed out;
* a range the object does not have (``416``, or fewer bytes than asked for) is a changed shard too
  (its real size is asked for then, on that error path only, to name it); an answer without a total
  (HTTP requires one in every ``206``) cannot show a longer object: its first bytes are read, and the
  sample checksums (or the cache's sha256) judge them;
* the first answer's ``ETag`` is pinned (:class:`ObjectPin`, shared by every reopen of one read):
  later requests send ``If-Match`` and compare the answer's, so an object replaced mid-read is
  :func:`~shardkit.storage.trust.changed_while_reading`, never spliced.

S3 (s3fs) and HTTP(S) (fsspec's HTTP backend) are read this way (:func:`ranged_backend`); other
fsspec backends open the file as before (their open may probe the size). Errors reach the caller
as the backend raises them (s3fs's translated ``OSError``\\ s, ``aiohttp`` errors), so
:class:`~shardkit.storage.retry.RetryingFile` classifies and retries them as it does every read.
"""

from __future__ import annotations

import errno
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from shardkit.storage import fs as storage
from shardkit.storage.rawfile import PositionedReader
from shardkit.storage.trust import RangeUnsupported, changed_while_reading, no_range, size_mismatch

#: schemes read by :class:`RangeFile` (the others open through fsspec)
RANGED_SCHEMES = ("s3", "s3a", "http", "https")
_CONTENT_RANGE = re.compile(r"bytes\s+(?:\d+-\d+|\*)/(\d+|\*)")


@dataclass
class ObjectPin:
    """The object one read of a URL found first (its ``ETag``); every later request must find it again."""

    etag: Optional[str] = None


@dataclass(frozen=True)
class Answer:
    """One ranged GET's answer: its bytes, the object's total size (None: not said), its ETag, and whether
    the server honoured the range (False: a ``200`` with the whole object)."""

    data: bytes
    total: Optional[int]
    etag: Optional[str]
    ranged: bool = True


#: ``get(lo, hi, if_match) -> Answer`` for ``[lo, hi)`` (``hi`` None: to the end); raises the backend's errors
Getter = Callable[[int, Optional[int], Optional[str]], Answer]


def total_of(content_range: Optional[str]) -> Optional[int]:
    """The object's size from a ``Content-Range`` header (``bytes 0-99/1234`` -> 1234), None if unsaid."""
    m = _CONTENT_RANGE.match(content_range or "")
    return int(m.group(1)) if m and m.group(1) != "*" else None


def ranged_backend(url: str) -> bool:
    """True when ``url`` is read by :class:`RangeFile` (no size probe at open)."""
    return storage.scheme(url) in RANGED_SCHEMES


def _s3_error(exc: BaseException) -> tuple[str, dict[str, Any]]:
    """``(S3 error code, error dict)`` of s3fs's translated error (its botocore cause), or ``("", {})``."""
    resp = getattr(exc.__cause__, "response", None)
    err = resp.get("Error", {}) if isinstance(resp, dict) else {}
    return str(err.get("Code", "")), err


def s3_getter(fs: Any, path: str) -> Getter:
    """Ranged GETs of ``path`` through s3fs's client (its retries, timeouts and error translation)."""
    from fsspec.asyn import sync

    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}

    async def _get(lo: int, hi: Optional[int], if_match: Optional[str]) -> Answer:
        kw = dict(extra)
        if if_match is not None:
            kw["IfMatch"] = if_match
        rng = f"bytes={lo}-" if hi is None else f"bytes={lo}-{hi - 1}"
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=rng, **kw)
        body = resp["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        return Answer(bytes(data), total_of(resp.get("ContentRange")), resp.get("ETag"))

    def get(lo: int, hi: Optional[int], if_match: Optional[str]) -> Answer:
        try:
            return sync(fs.loop, _get, lo, hi, if_match)
        except OSError as exc:
            code, err = _s3_error(exc)
            if code in ("PreconditionFailed", "412"):
                raise _Changed() from None
            if code in ("InvalidRange", "416"):
                actual = err.get("ActualObjectSize")
                raise _PastEnd(int(actual) if actual is not None and str(actual).isdigit() else None) from None
            raise

    return get


def http_getter(fs: Any, url: str) -> Getter:
    """Ranged GETs of ``url`` through fsspec's HTTP session (its client options and timeouts)."""
    from fsspec.asyn import sync

    async def _get(lo: int, hi: Optional[int], if_match: Optional[str]) -> Answer:
        session = await fs.set_session()
        kwargs = dict(fs.kwargs)
        headers = dict(kwargs.pop("headers", {}) or {})
        headers["Range"] = f"bytes={lo}-" if hi is None else f"bytes={lo}-{hi - 1}"
        if if_match is not None:
            headers["If-Match"] = if_match
        async with session.get(fs.encode_url(url), headers=headers, **kwargs) as r:
            if r.status == 412:
                raise _Changed()
            if r.status == 416:
                raise _PastEnd(total_of(r.headers.get("Content-Range")))
            if r.status == 404:
                raise FileNotFoundError(url)
            r.raise_for_status()
            etag = r.headers.get("ETag")
            if r.status == 206:
                return Answer(await r.read(), total_of(r.headers.get("Content-Range")), etag)
            # a 200: the server ignored the range and sends the whole object
            length = r.headers.get("Content-Length")
            total = int(length) if length is not None and length.isdigit() else None
            if lo > 0:
                return Answer(b"", total, etag, ranged=False)
            want = None if hi is None else hi - lo
            parts, n = [], 0
            while want is None or n < want:
                chunk = await r.content.read(1 << 20)
                if not chunk:
                    break
                parts.append(chunk)
                n += len(chunk)
            data = b"".join(parts)
            return Answer(data if want is None else data[:want], total, etag, ranged=False)

    def get(lo: int, hi: Optional[int], if_match: Optional[str]) -> Answer:
        return sync(fs.loop, _get, lo, hi, if_match)

    return get


def getter_for(url: str, storage_options: dict[str, Any]) -> Getter:
    """The ranged GET of ``url``'s backend (``url`` must be :func:`ranged_backend`)."""
    fs, path = storage.get_fs(url, **storage_options)
    return s3_getter(fs, path) if storage.scheme(url) in ("s3", "s3a") else http_getter(fs, url)


class _Changed(Exception):
    """The store answered ``412``: the pinned object is gone."""


class _PastEnd(Exception):
    """The store answered ``416``: the range starts past the object's end (``total``: its size, if said)."""

    def __init__(self, total: Optional[int]):
        super().__init__(total)
        self.total = total


class RangeFile(PositionedReader):
    """A read-only, seekable remote file of ``size`` bytes read by ranged GETs (see the module docstring).

    Args:
        url: the URL (for messages).
        get: sends one ranged GET (:func:`getter_for`).
        size: the size the manifest promises; None: learned from the first answer.
        expected: the size every answer must confirm (the manifest's, or None: any; a short object
            then reads short, as ``check_sizes=False`` asks).
        pin: the object this read found first, shared by its reopens (None: a fresh one).
        real_size: asks the object's size (a ``HEAD``), only to name it in an error.
    """

    def __init__(
        self,
        url: str,
        get: Getter,
        *,
        size: Optional[int],
        expected: Optional[int],
        pin: Optional[ObjectPin] = None,
        real_size: Optional[Callable[[], Optional[int]]] = None,
    ):
        super().__init__()
        self.url, self._get, self.size, self._expected = url, get, size, expected
        self.pin = pin if pin is not None else ObjectPin()
        self._real_size = real_size
        self._pos = 0
        self.requests = 0  #: GETs sent

    @property
    def details(self) -> dict[str, Any]:
        """What the read found: the pinned ETag (as fsspec files say it)."""
        return {"ETag": self.pin.etag} if self.pin.etag is not None else {}

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            if self.size is None:
                self.size = self._real_size() if self._real_size is not None else None
            if self.size is None:
                raise OSError(errno.ESPIPE, f"{self.url}: size unknown")
            offset += self.size
        elif whence == io.SEEK_CUR:
            offset += self._pos
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        self._pos = offset
        return offset

    def read(self, size: Optional[int] = -1) -> bytes:
        n = -1 if size is None else size
        lo = self._pos
        if n == 0 or (self.size is not None and lo >= self.size):
            return b""
        hi = None if n < 0 else lo + n
        if self.size is not None:
            hi = self.size if hi is None else min(hi, self.size)
        self.requests += 1
        try:
            ans = self._get(lo, hi, self.pin.etag)
        except _Changed:
            raise changed_while_reading(self.url) from None
        except _PastEnd as past:
            if self._expected is None:
                self.size = lo if past.total is None else past.total
                return b""
            raise self._short(past.total, lo) from None
        self._check(ans, lo, hi)
        self._pos += len(ans.data)
        return ans.data

    def _check(self, ans: Answer, lo: int, hi: Optional[int]) -> None:
        """The answer is the pinned object of the promised size, and as long as asked for."""
        if ans.etag is not None:
            if self.pin.etag is None:
                self.pin.etag = ans.etag
            elif ans.etag != self.pin.etag:
                raise changed_while_reading(self.url)
        if ans.total is not None:
            if self._expected is not None and ans.total != self._expected:
                raise size_mismatch(self.url, ans.total, self._expected)
            if self.size is None:
                self.size = ans.total
        if not ans.ranged and lo > 0:
            raise no_range(self.url)
        if hi is not None and len(ans.data) < hi - lo:
            if self._expected is not None:
                raise self._short(ans.total, lo + len(ans.data))
            self.size = lo + len(ans.data)

    def _short(self, total: Optional[int], at_least: int) -> Exception:
        """The object is shorter than the manifest's size: one line naming both sizes."""
        assert self._expected is not None
        if total is None and self._real_size is not None:
            try:
                total = self._real_size()
            except Exception:  # noqa: BLE001 - only to name the size; the mismatch is the error either way
                total = None
        if total is None:
            return size_mismatch(self.url, at_least, self._expected)  # at most that many, for sure not more
        return size_mismatch(self.url, total, self._expected)


__all__ = ["Answer", "ObjectPin", "RangeFile", "RangeUnsupported", "getter_for", "ranged_backend", "total_of"]
