"""Shared test helpers: tiny datasets written with shardkit's own writer, local servers.

Tests import from here; test files never import each other.
"""

from __future__ import annotations

import io
import os
import socket
from dataclasses import dataclass

from PIL import Image

from shardkit.demo.sampledata import make_image
from shardkit.format import EncodedSample, write_shard
from shardkit.format.manifest import Manifest, ShardInfo, save_manifest


def jpeg_bytes(label: int, seed: int = 0, size: tuple[int, int] = (64, 48), quality: int = 90, **save_kw) -> bytes:
    """A small photo-like JPEG of class ``label``."""
    buf = io.BytesIO()
    Image.fromarray(make_image(label, seed, size)).save(buf, format="JPEG", quality=quality, **save_kw)
    return buf.getvalue()


@dataclass
class TinyDataset:
    """A dataset written by :func:`write_dataset`."""

    url: str  # split directory holding manifest.json
    keys: list[str]  # every key, in write order
    labels: dict[str, int]  # key -> label
    manifest: Manifest


def write_dataset(
    root: str,
    *,
    num_samples: int = 60,
    shard_size: int = 7,
    num_classes: int = 3,
    size: tuple[int, int] = (64, 48),
    split: str = "train",
    distinct_images: int = 8,
) -> TinyDataset:
    """Write ``num_samples`` samples into shards of ``shard_size`` plus a manifest under ``root``.

    Key ``k{i:06d}`` has label ``i % num_classes``. Only ``distinct_images``
    different JPEGs are encoded (per class) and reused, to keep fixtures fast.
    """
    os.makedirs(root, exist_ok=True)
    cache = {(c, j): jpeg_bytes(c, j, size) for c in range(num_classes) for j in range(distinct_images)}
    keys, labels, shards = [], {}, []
    class_counts = [0] * num_classes
    for start in range(0, num_samples, shard_size):
        samples = []
        for i in range(start, min(num_samples, start + shard_size)):
            key, label = f"k{i:06d}", i % num_classes
            meta = {"path": f"c{label}/img{i}.jpg", "class": f"c{label}", "width": size[0], "height": size[1]}
            samples.append(EncodedSample(key, cache[(label, i % distinct_images)], label, meta))
            keys.append(key)
            labels[key] = label
            class_counts[label] += 1
        name = f"{split}-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        shards.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
    m = Manifest(
        split=split,
        classes=[f"c{i}" for i in range(num_classes)],
        shards=shards,
        options={"source": "tests.helpers.write_dataset"},
        class_counts=class_counts,
        shardkit_version="test",
    )
    save_manifest(m, root)
    m.url = os.path.join(root, "manifest.json")
    return TinyDataset(url=root, keys=keys, labels=labels, manifest=m)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Fault injection: an HTTP proxy on 127.0.0.1 in front of moto (or any HTTP server)
# ---------------------------------------------------------------------------------------------

import hashlib
import http.client
import http.server
import struct
import threading
import time


@dataclass
class ProxyRequest:
    """One request the proxy saw: method, path, ``Range`` header and what the proxy did."""

    method: str
    path: str
    range: str
    outcome: str  # "ok", "403", "500", "503", "reset", "cut", "down"


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
    contains ``path_part`` get ``outcome``. Every response says ``Connection: close``.
    """

    def __init__(self, upstream: str, *, seed: int = 0, error_rate: float = 0.0, reset_rate: float = 0.0, cut_rate: float = 0.0):
        self.upstream = upstream.split("://", 1)[1].rstrip("/")
        self.seed, self.error_rate, self.reset_rate, self.cut_rate = seed, error_rate, reset_rate, cut_rate
        self.log: list[ProxyRequest] = []
        self._seen: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._down = threading.Event()
        self._rules: list[list] = []  # [path_part, outcome, remaining or None, method or ""]
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # noqa: D401 - quiet
                pass

            def _any(self):
                proxy._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # -- control
    def down(self) -> None:
        """Fail every request (connection reset) until :meth:`up`."""
        self._down.set()

    def up(self) -> None:
        self._down.clear()

    def fail(self, path_part: str, outcome: str, times: "int | None" = None, method: str = "") -> None:
        """Answer the next ``times`` requests (every one with ``None``) whose path contains ``path_part``
        (and whose method is ``method``, if given) with ``outcome``."""
        if outcome not in ("403", "500", "503", "reset", "cut"):
            raise ValueError(f"outcome {outcome!r}: use one of 403, 500, 503, reset, cut")
        with self._lock:
            self._rules.append([path_part, outcome, times, method])

    def _scripted(self, method: str, path: str) -> "str | None":
        with self._lock:
            for rule in self._rules:
                if rule[0] in path and rule[3] in ("", method) and (rule[2] is None or rule[2] > 0):
                    if rule[2] is not None:
                        rule[2] -= 1
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
        method, path, rng = h.command, h.path, h.headers.get("Range", "")
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        if self._down.is_set():
            self.log.append(ProxyRequest(method, path, rng, "down"))
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
        self.log.append(ProxyRequest(method, path, rng, outcome))
        if outcome == "reset":
            return self._reset(h)
        if outcome in ("403", "500", "503"):
            code = {"403": b"AccessDenied", "500": b"InternalError", "503": b"SlowDown"}[outcome]
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
            headers = {k: v for k, v in h.headers.items() if k.lower() not in ("connection", "keep-alive", "proxy-connection")}
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


def wait_for(pred, timeout: float, interval: float = 0.01) -> bool:
    """Poll ``pred()`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


# ---------------------------------------------------------------------------------------------
# Process resources via /proc (Linux)
# ---------------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid``."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def pss_bytes(pid: int) -> int:
    """Proportional set size (shared pages divided among their users), 0 if unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return 0


def num_threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return 0


#: for scripts run by :func:`run_fresh`: this process's RSS high-water mark in KiB. ``VmHWM`` starts
#: afresh at exec; ``ru_maxrss`` does not (Linux carries the parent's peak across fork and exec).
PEAK_KIB = """
def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
"""


def run_fresh(code: str, *args: str, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh Python process (this checkout's shardkit, ``PEAK_KIB`` defined); return
    the JSON object it prints on its last stdout line."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    res = subprocess.run([sys.executable, "-c", PEAK_KIB + code, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


@dataclass(frozen=True)
class Resources:
    """A snapshot of one process's resources."""

    rss: int
    fds: int
    threads: int
    children: int

    @classmethod
    def of(cls, pid: int | None = None) -> "Resources":
        pid = os.getpid() if pid is None else pid
        return cls(rss_bytes(pid), open_fds(pid), num_threads(pid), len(children(pid)))


# ---------------------------------------------------------------------------------------------
# Hand-built (foreign, hostile) shards
# ---------------------------------------------------------------------------------------------

import tarfile


def tar_bytes(members: list, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of ``members``: ``(name, data)`` pairs for regular files, or ``(TarInfo, data_or_None)``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            if isinstance(name, tarfile.TarInfo):
                ti = name
                if data is not None:
                    ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data) if data is not None else None)
            else:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class RecordingFile(io.BytesIO):
    """An in-memory file that records the byte range ``[start, stop)`` of every read."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, n=-1):
        start = self.tell()
        b = super().read(n)
        if b:
            self.reads.append((start, start + len(b)))
        return b

    def touched(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The recorded reads that overlap ``[start, stop)``."""
        return [(a, b) for a, b in self.reads if a < stop and start < b]


def member_ranges(data: bytes) -> dict[str, tuple[int, int]]:
    """member name -> byte range ``[start, stop)`` of its data in the tar ``data``."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: (m.offset_data, m.offset_data + m.size) for m in tf.getmembers() if m.isfile()}


def write_raw_dataset(root: str, shards: list[tuple[bytes, int]], classes: list[str], split: str = "train") -> str:
    """Write already built shard bytes (with their sample counts) and a valid manifest under ``root``."""
    os.makedirs(root, exist_ok=True)
    infos = []
    for i, (data, samples) in enumerate(shards):
        name = f"{split}-{i:06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        infos.append(ShardInfo(name, samples, len(data), hashlib.sha256(data).hexdigest()))
    save_manifest(Manifest(split, classes, infos), root)
    return root


def tree_digests(root: str) -> dict[str, str]:
    """relative path -> sha256 of every file below ``root`` (byte-identical output checks)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def tree_snapshot(root: str) -> dict[str, int]:
    """relative path -> size of everything below ``root`` (links not followed)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, root)] = os.lstat(p).st_size if name in files else -1
    return out


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def dataloader_workers(pid: int | None = None) -> list[int]:
    """Children of ``pid`` that are DataLoader workers (torch names them ``pt_data_worker``)."""
    return [c for c in children(os.getpid() if pid is None else pid) if process_name(c).startswith("pt_data_worker")]


def kill_when(proc: "subprocess.Popen", pred, timeout: float) -> bool:
    """SIGKILL ``proc`` as soon as ``pred()`` holds (or after ``timeout`` s); returns whether ``pred()`` held. Always reaps it."""
    import signal

    try:
        held = wait_for(pred, timeout, interval=0.005)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return held
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def split_samples(split_dir: str) -> dict[str, dict]:
    """``{key: {"cls": int, "json": dict, "jpg": bytes}}`` of every sample of the converted split at ``split_dir``."""
    import json

    from shardkit.format.manifest import load_manifest

    m = load_manifest(split_dir)
    out: dict[str, dict] = {}
    for i in range(len(m.shards)):
        with tarfile.open(m.shard_url(i)) as tf:
            for mem in tf.getmembers():
                key, ext = mem.name.split(".", 1)
                assert ext not in out.setdefault(key, {}), f"{key}.{ext} twice"
                out[key][ext] = tf.extractfile(mem).read()
    for g in out.values():
        g["json"] = json.loads(g["json"])
        g["cls"] = int(g["cls"])
    return out


def keyed_batches(url: str, **kw) -> tuple:
    """``(loader, [(images, keys), ...])``: one epoch of ``shardkit.load(url, with_keys=True, **kw)``."""
    import shardkit

    loader = shardkit.load(url, **{"with_keys": True, **kw})
    return loader, [(im, k) for im, _, k in loader]


def assert_same_batches(a: list, b: list) -> None:
    """The same keys in the same batches, with equal pixels (lists from :func:`keyed_batches`)."""
    import torch

    assert [k for _, k in a] == [k for _, k in b]
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b))


def add_index(root: str, damage=None, shard: int = 1) -> None:
    """Sidecar indexes for every shard (as ``shardkit convert`` writes them); ``damage`` rewrites ``shard``'s
    index so that it still passes every load-time check (layout, unique keys, CRC recomputed, the shard's size
    and sha256) but is wrong for the tar headers."""
    from dataclasses import replace

    from shardkit.format.index import INDEX_FORMAT, index_from_walk, index_url, load_index
    from shardkit.format.manifest import load_manifest

    m = load_manifest(root)
    for s, info in enumerate(m.shards):
        url = m.shard_url(s)
        with open(url, "rb") as f:
            idx = index_from_walk(f, url, info.bytes, info.sha256)
        assert idx is not None
        if damage is not None and s == shard:
            idx = damage(idx)
        with open(index_url(url), "wb") as f:
            f.write(idx.to_bytes())
        load_index(url, shard_bytes=info.bytes, shard_sha256=info.sha256)  # passes its load-time checks
    save_manifest(replace(m, sample_index=INDEX_FORMAT), root)


def write_tar_file(path: str, members: list) -> str:
    """Write :func:`tar_bytes` of ``members`` to ``path``; returns ``path``."""
    with open(path, "wb") as f:
        f.write(tar_bytes(members))
    return path
