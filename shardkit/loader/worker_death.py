"""A DataLoader worker that died (OOM killer, SIGKILL): which one, how, and the one-line message.

Two places can notice: the main process's ``next()`` fails (then :func:`dead_workers` reads the
exit status of the iterator's worker processes), or torch's SIGCHLD watchdog raises its own
"... is killed by signal" at any point of the main thread (then :func:`reported_dead` reads it,
because the watchdog has already reaped the process). Both read torch's internals through
:mod:`shardkit.private_apis`. Either way :func:`death_message` is what the
user sees.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from shardkit.private_apis import watchdog_killed, worker_processes


def dead_workers(it: Any, wait_s: float = 1.0) -> list[str]:
    """``"PID (killed by SIGKILL)"`` for each worker of a DataLoader iterator that is gone (waits briefly for the exit status)."""
    workers = worker_processes(it)
    deadline = time.monotonic() + wait_s
    while True:
        dead = [w for w in workers if w.exitcode is not None]
        if dead or time.monotonic() >= deadline or not workers:
            break
        time.sleep(0.05)
    out = []
    for w in dead:
        how = f"killed by {signal.Signals(-w.exitcode).name}" if w.exitcode < 0 else f"exit status {w.exitcode}"
        out.append(f"{w.pid} ({how})")
    return out


def death_message(dead: list[str], exc: BaseException) -> str:
    """The one-line error for workers ``dead`` (from :func:`dead_workers` or :func:`reported_dead`)."""
    return (
        f"DataLoader worker (pid {', '.join(dead)}) died mid-epoch ({type(exc).__name__}: {exc}); "
        "out of memory or killed from outside? Iterating the loader again continues the epoch with new workers"
    )


def reported_dead(exc: BaseException) -> list[str]:
    """The workers torch's own watchdog reported dead ("DataLoader worker (pid(s) 12) is killed by signal: Killed."),
    when it reaped them before :func:`dead_workers` could read their exit status."""
    found = watchdog_killed(exc)
    if found is None:
        return []
    pids, described = found
    names = {signal.strsignal(s): s.name for s in signal.Signals if signal.strsignal(s)}
    how = f"killed by {names.get(described, described)}"
    return [f"{pid.strip()} ({how})" for pid in pids.split(",") if pid.strip()]
