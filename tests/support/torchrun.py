"""Scripts launched under ``torchrun`` on this machine (c10d rendezvous on 127.0.0.1), and the per-rank logs they
write: one ``rank<r>.jsonl`` per rank, a JSON object per line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.faults import free_port
from tests.support.repo import ROOT

#: seconds a launch may take before it counts as a hang
TIMEOUT = 180


def launch(
    script: str,
    nproc: int,
    args: list[str],
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    port: int | None = None,
    wait: bool = True,
) -> "str | subprocess.Popen":
    """Run ``script`` with ``nproc`` processes on node ``node_rank`` of ``nnodes`` (rendezvous on ``port``, default
    a free one), from the repository root with this checkout first on ``PYTHONPATH``; with ``wait``, its output
    (:func:`finish`), else the running launcher."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port or free_port()}",
        "--rdzv-id=shardkit-test",
        f"--node-rank={node_rank}",
        "--monitor-interval=0.5",
        script,
        *args,
    ]
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=path)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    return finish(proc) if wait else proc


def finish(proc: subprocess.Popen) -> str:
    """The output of the launcher ``proc`` once it exits 0; a test failure when it fails or runs past
    :data:`TIMEOUT`."""
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish in {TIMEOUT}s (hang?):\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def rank_logs(log_dir: "str | os.PathLike[str]") -> dict[int, list[dict]]:
    """rank -> the objects its ``rank<r>.jsonl`` in ``log_dir`` holds, in order."""
    out = {}
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name)) as f:
            out[int(name[len("rank") : -len(".jsonl")])] = [json.loads(line) for line in f]
    return out
