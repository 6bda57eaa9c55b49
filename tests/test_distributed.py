"""Real multi-process data parallelism: torchrun + gloo on CPU, running examples/train_ddp.py.

Each rank logs the sample ids of every step; the tests check equal batch counts
on every rank, exactly-once coverage (plus reported padding), that a DDP
collective per step finishes the epoch (no hang, bounded by a timeout),
mid-epoch resume batch for batch, and elastic resume on another world size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from helpers import free_port, write_dataset

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")
TIMEOUT = 180


def torchrun(nproc: int, args: list[str], *, nnodes: int = 1, node_rank: int = 0, port: int | None = None, wait: bool = True):
    port = port or free_port()
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=shardkit-test",
        f"--node-rank={node_rank}", "--monitor-interval=0.5",
        EXAMPLE, *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    if not wait:
        return proc
    return finish(proc)


def finish(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"torchrun did not finish in {TIMEOUT}s (hang?):\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def read_logs(log_dir: str) -> dict[int, list[dict]]:
    """rank -> steps; each step's "keys" turned into the sample numbers of tests.helpers (k000012 -> 12)."""
    out = {}
    for name in sorted(os.listdir(log_dir)):
        rank = int(name[len("rank"):-len(".jsonl")])
        with open(os.path.join(log_dir, name)) as f:
            out[rank] = [dict(s, keys=[int(k[1:]) for k in s["keys"]]) for s in map(json.loads, f)]
    return out


def data_args(ds_url: str, log_dir: str, *extra: str) -> list[str]:
    return ["--data", ds_url, "--epochs", "1", "--batch-size", "4", "--image-size", "32", "--workers", "2", "--no-train", "--log-ids", log_dir, *extra]


@pytest.mark.parametrize("nproc,num_samples,shard_size", [(2, 48, 6), (3, 50, 7), (3, 5, 5)])
def test_equal_batches_exactly_once(tmp_path, nproc, num_samples, shard_size):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=num_samples, shard_size=shard_size)
    logs = tmp_path / "logs"
    logs.mkdir()
    torchrun(nproc, data_args(ds.url, str(logs)))
    per_rank = read_logs(str(logs))
    assert sorted(per_rank) == list(range(nproc))
    assert len({len(steps) for steps in per_rank.values()}) == 1, {r: len(s) for r, s in per_rank.items()}
    ids = Counter(i for steps in per_rank.values() for s in steps for i in s["keys"])
    per_rank_samples = -(-num_samples // nproc)
    padded = per_rank_samples * nproc - num_samples
    assert set(ids) == set(range(num_samples))
    assert sum(ids.values()) == num_samples + padded


def test_two_nodes_c10d_rendezvous(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=30, shard_size=4)
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    nodes = [torchrun(1, data_args(ds.url, str(logs)), nnodes=2, node_rank=i, port=port, wait=False) for i in range(2)]
    for p in nodes:
        finish(p)
    per_rank = read_logs(str(logs))
    assert sorted(per_rank) == [0, 1]
    assert len(per_rank[0]) == len(per_rank[1])
    ids = Counter(i for steps in per_rank.values() for s in steps for i in s["keys"])
    assert set(ids) == set(range(30)) and sum(ids.values()) == 30


def _batches_by_step(per_rank: dict[int, list[dict]]) -> dict[tuple[int, int], list[int]]:
    return {(r, s["step"]): s["keys"] for r, steps in per_rank.items() for s in steps}


def test_mid_epoch_resume_equals_uninterrupted(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=44, shard_size=5)
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    full.mkdir()
    resumed.mkdir()
    torchrun(2, data_args(ds.url, str(full)))
    ckpt = str(tmp_path / "ckpt.pt")
    torchrun(2, data_args(ds.url, str(resumed), "--checkpoint", ckpt, "--stop-after", "2"))
    torchrun(2, data_args(ds.url, str(resumed), "--checkpoint", ckpt))
    assert _batches_by_step(read_logs(str(resumed))) == _batches_by_step(read_logs(str(full)))


@pytest.mark.parametrize("before,after", [(3, 2), (2, 3)])
def test_elastic_resume_exactly_once(tmp_path, before, after):
    n = 52
    ds = write_dataset(str(tmp_path / "ds"), num_samples=n, shard_size=6)
    logs = tmp_path / "logs"
    logs.mkdir()
    ckpt = str(tmp_path / "ckpt.pt")
    (logs / "a").mkdir()
    (logs / "b").mkdir()
    torchrun(before, data_args(ds.url, str(logs / "a"), "--checkpoint", ckpt, "--stop-after", "2"))
    torchrun(after, data_args(ds.url, str(logs / "b"), "--checkpoint", ckpt))
    first, second = read_logs(str(logs / "a")), read_logs(str(logs / "b"))
    assert len({len(s) for s in second.values()}) == 1  # equal batch counts after the resize too
    ids = Counter(i for part in (first, second) for steps in part.values() for s in steps for i in s["keys"])
    assert set(ids) == set(range(n))
    repeats = sum(c - 1 for c in ids.values())
    assert repeats < before + after  # only padding (reported by the loader) may repeat
