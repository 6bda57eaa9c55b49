"""Fault injection: an HTTP proxy on 127.0.0.1 in front of moto (or any HTTP server), and a free port."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ProxyRequest:
    """One request the proxy saw: method, path, ``Range`` header, what the proxy did and when it arrived."""

    method: str
    path: str
    range: str
    outcome: str  # "ok", "403", "429", "500", "503", "reset", "cut", "down"
    t: float = field(default_factory=time.monotonic)  #: ``time.monotonic()`` when the request arrived


def per_window(times: "list[float]", window_s: float = 1.0) -> list[int]:
    """For each time in ``times``, how many of ``times`` lie in ``[t, t + window_s)``: the counts of every
    sliding window that starts at a request (the busiest window of any alignment is one of them)."""
    ts = sorted(times)
    out, j = [], 0
    for i, t in enumerate(ts):
        j = max(j, i)
        while j < len(ts) and ts[j] < t + window_s:
            j += 1
        out.append(j - i)
    return out


class _ProxyServer(http.server.ThreadingHTTPServer):
    """The proxy's server: a client that hangs up before its answer is written (its timeout, a reader closed
    mid-stream) is a normal event behind a fault proxy, not an error to print."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 that injects faults, deterministically from a seed.

    Every request is forwarded to ``upstream`` (``http://127.0.0.1:PORT``) unless a fault hits it:
    ``error_rate`` of the requests answer 500 or 503, ``reset_rate`` reset the connection before
    answering, ``cut_rate`` of the GET responses send their headers and half of the body, then
    reset (the client sees a connection broken mid-stream). Whether the n-th occurrence of a
    given ``(method, path, Range)`` is hit depends only on ``(seed, method, path, Range, n)``,
    so the faults do not depend on how concurrent workers interleave. ``down()`` makes every
    connection fail (reset on accept) until ``up()``. ``fail(path_part, outcome, times)`` scripts
    a fault instead of drawing one: the next ``times`` requests (all, with ``None``) whose path
    contains ``path_part`` get ``outcome`` (``"slow"``: forwarded late). A ``503`` answers S3's ``<Code>SlowDown</Code>`` (its body, as S3
    sends it), a ``429`` ``TooManyRequests``. Every :class:`ProxyRequest` carries its arrival time, so a
    test can count requests per second at the proxy (:func:`per_window`). Every response says
    ``Connection: close``.
    """

    def __init__(
        self, upstream: str, *, seed: int = 0, error_rate: float = 0.0, reset_rate: float = 0.0, cut_rate: float = 0.0
    ):
        self.upstream = upstream.split("://", 1)[1].rstrip("/")
        self.seed, self.error_rate, self.reset_rate, self.cut_rate = seed, error_rate, reset_rate, cut_rate
        self.log: list[ProxyRequest] = []
        self._seen: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._down = threading.Event()
        self._rules: list[list] = []  # [path_part, outcome, remaining or None, method or "", delay_s]
        self._delay = 0.0  # of the last "slow" rule that hit
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # noqa: D401 - quiet
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.server = _ProxyServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # -- control
    def storage_options(self, opts: dict) -> dict:
        """The s3fs options ``opts`` with the endpoint replaced by this proxy's: the same store, reached through it."""
        return {**opts, "client_kwargs": {"endpoint_url": self.url}}

    def down(self) -> None:
        """Fail every request (connection reset) until :meth:`up`."""
        self._down.set()

    def up(self) -> None:
        self._down.clear()

    def fail(
        self, path_part: str, outcome: str, times: "int | None" = None, method: str = "", delay_s: float = 0.0
    ) -> None:
        """Answer the next ``times`` requests (every one with ``None``) whose path contains ``path_part``
        (and whose method is ``method``, if given) with ``outcome``; ``"slow"`` forwards them after
        ``delay_s`` seconds (a download that takes a while)."""
        if outcome not in ("403", "429", "500", "503", "reset", "cut", "slow"):
            raise ValueError(f"outcome {outcome!r}: use one of 403, 429, 500, 503, reset, cut, slow")
        with self._lock:
            self._rules.append([path_part, outcome, times, method, delay_s])

    def _scripted(self, method: str, path: str) -> "str | None":
        with self._lock:
            for rule in self._rules:
                if rule[0] in path and rule[3] in ("", method) and (rule[2] is None or rule[2] > 0):
                    if rule[2] is not None:
                        rule[2] -= 1
                    if rule[1] == "slow":
                        self._delay = rule[4]
                    return rule[1]
        return None

    def set_rates(self, *, error_rate: float = 0.0, reset_rate: float = 0.0, cut_rate: float = 0.0) -> None:
        self.error_rate, self.reset_rate, self.cut_rate = error_rate, reset_rate, cut_rate

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def outcomes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in list(self.log):
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    # -- machinery
    def _draw(self, method: str, path: str, rng: str) -> float:
        with self._lock:
            n = self._seen.get((method, path, rng), 0)
            self._seen[(method, path, rng)] = n + 1
        h = hashlib.sha256(f"{self.seed}|{method}|{path}|{rng}|{n}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64

    @staticmethod
    def _reset(handler) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0) instead of a clean close."""
        try:
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        handler.close_connection = True
        try:
            handler.connection.close()
        except OSError:
            pass

    def _handle(self, h) -> None:
        t = time.monotonic()
        method, path, rng = h.command, h.path, h.headers.get("Range", "")
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        if self._down.is_set():
            self.log.append(ProxyRequest(method, path, rng, "down", t))
            return self._reset(h)
        x = self._draw(method, path, rng)
        outcome = "ok"
        scripted = self._scripted(method, path)
        if scripted is not None:
            outcome = scripted
        elif x < self.error_rate:
            outcome = "503" if x < self.error_rate / 2 else "500"
        elif x < self.error_rate + self.reset_rate:
            outcome = "reset"
        elif method == "GET" and x < self.error_rate + self.reset_rate + self.cut_rate:
            outcome = "cut"
        self.log.append(ProxyRequest(method, path, rng, outcome, t))
        if outcome == "slow":
            time.sleep(self._delay)
        if outcome == "reset":
            return self._reset(h)
        if outcome in ("403", "429", "500", "503"):
            code = {"403": b"AccessDenied", "429": b"TooManyRequests", "500": b"InternalError", "503": b"SlowDown"}[
                outcome
            ]
            msg = b"<Error><Code>" + code + b"</Code><Message>injected</Message></Error>"
            h.send_response(int(outcome))
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(msg)))
            h.send_header("Connection", "close")
            h.end_headers()
            if method != "HEAD":  # a HEAD response has no body
                h.wfile.write(msg)
            h.close_connection = True
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            headers = {
                k: v for k, v in h.headers.items() if k.lower() not in ("connection", "keep-alive", "proxy-connection")
            }
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"):
                h.send_header(k, v)
        h.send_header("Content-Length", resp.getheader("Content-Length", "0") if method == "HEAD" else str(len(data)))
        h.send_header("Connection", "close")
        h.end_headers()
        if outcome == "cut" and len(data) > 1:
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            return self._reset(h)
        if method != "HEAD":
            h.wfile.write(data)
        h.close_connection = True
