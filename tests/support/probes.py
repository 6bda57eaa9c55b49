"""Process probes via /proc (Linux): children, RSS/PSS, fds, threads, DataLoader workers; polling, killing,
scripts run in a fresh interpreter, and a `shardkit convert` killed mid-run."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess


def wait_for(pred, timeout: float, interval: float = 0.01) -> bool:
    """Poll ``pred()`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


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

    from .repo import ROOT as root

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    res = subprocess.run(
        [sys.executable, "-c", PEAK_KIB + code, *args], capture_output=True, text=True, timeout=timeout, env=env
    )
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


def convert_killed_mid_run(src: str, dest: str, args: "list[str]") -> "subprocess.Popen":
    """Start ``shardkit convert src dest *args`` in a new process and SIGKILL it once the train split's second shard
    is in place and before its manifest is; the killed (reaped) process."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "shardkit", "convert", src, dest, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    split = os.path.join(dest, "train")
    assert kill_when(proc, lambda: os.path.exists(os.path.join(split, "train-000001.tar")), 60), "no shard appeared"
    assert not os.path.exists(os.path.join(split, "manifest.json")), "the conversion finished before the kill"
    return proc


def convert_to_the_end(src: str, dest: str, args: "list[str]") -> "subprocess.CompletedProcess[str]":
    """``shardkit convert src dest *args`` in a new process, which must exit 0 within 120 s; its captured output."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "shardkit", "convert", src, dest, *args],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
