"""Bounded silence: every remote request waits at most a timeout, and a failing read stays within its budget.

A server that accepts a connection and never answers would otherwise hold a
read for the backend's defaults (botocore: 60 s per read, times s3fs's 5
attempts; aiohttp: 300 s), far past ``retry_budget_s``. :func:`timeouts_for`
picks the per-request timeout (``request_timeout_s``, lowered so that one
attempt, with the backend's own quick retries, fits the budget, but never below
:data:`MIN_TIMEOUT_S` unless the user asks for less) and how long one attempt
can take; :func:`with_timeouts` puts it in the backend's options unless the
user set one there. :class:`~shardkit.storage.retry.RetryingFile` gives up
after a timed-out attempt when the next one could not finish inside the budget,
and says that the server did not answer (raising the budget is not the fix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: the budget-derived timeout never goes below this (a loaded store may take seconds to answer)
MIN_TIMEOUT_S = 5.0
#: s3fs's sleeps between its own quick retries of one request, together (0.1 x 1.7**i for i < 4)
_S3FS_SLEEPS_S = 2.0


@dataclass(frozen=True)
class Timeouts:
    """The per-request timeout of one URL's backend and the longest one attempt of a read can take."""

    request_s: float  #: seconds a request waits to connect, or for the next bytes of an answer
    attempt_s: float  #: worst case of one attempt (the backend's own tries of a request, its sleeps)


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _tries(url: str, storage_options: dict[str, Any]) -> int:
    """Requests one attempt may send before the error reaches shardkit (s3fs retries; HTTP: one ranged GET,
    other backends: a size probe, then a GET)."""
    scheme = _scheme(url)
    if scheme in ("s3", "s3a"):
        return max(1, int(storage_options.get("retries", 5)))
    return 1 if scheme in ("http", "https") else 2


def timeouts_for(
    url: str, storage_options: dict[str, Any], request_timeout_s: float, retry_budget_s: float
) -> Timeouts:
    """The :class:`Timeouts` of ``url`` under these options (``request_timeout_s``: the user's upper bound)."""
    tries = _tries(url, storage_options)
    t = min(request_timeout_s, max(MIN_TIMEOUT_S, retry_budget_s / (tries + 1)))
    extra = _S3FS_SLEEPS_S if _scheme(url) in ("s3", "s3a") else 0.0
    return Timeouts(request_s=t, attempt_s=tries * t + extra)


def with_timeouts(url: str, storage_options: dict[str, Any], timeout_s: Optional[float]) -> dict[str, Any]:
    """``storage_options`` with a connect and read timeout of ``timeout_s`` for ``url``'s backend,
    unless the user set one (s3fs: ``config_kwargs`` ``connect_timeout``/``read_timeout``; HTTP:
    ``client_kwargs`` ``timeout``, an ``aiohttp.ClientTimeout``). Other schemes: unchanged."""
    if timeout_s is None:
        return storage_options
    scheme = _scheme(url)
    if scheme in ("s3", "s3a"):
        ck = dict(storage_options.get("config_kwargs") or {})
        ck.setdefault("connect_timeout", timeout_s)
        ck.setdefault("read_timeout", timeout_s)
        return {**storage_options, "config_kwargs": ck}
    if scheme in ("http", "https"):
        client = dict(storage_options.get("client_kwargs") or {})
        if "timeout" in client:
            return storage_options
        import aiohttp

        client["timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        return {**storage_options, "client_kwargs": client}
    return storage_options


def is_timeout(exc: BaseException) -> bool:
    """True when ``exc`` (or an error it came from) is a timeout: the server did not answer in time."""
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, TimeoutError) or any("Timeout" in c.__name__ for c in type(e).__mro__):
            return True
        if "TimeoutError" in str(e):  # an error that names its timed-out cause (open_read's ConnectionError)
            return True
        e = e.__cause__ or e.__context__
    return False
