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

from tests.support.data import write_dataset
from tests.support.faults import free_port
from tests.support.repo import ROOT

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")
TIMEOUT = 180


def torchrun(
    nproc: int, args: list[str], *, nnodes: int = 1, node_rank: int = 0, port: int | None = None, wait: bool = True
):
    port = port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=shardkit-test",
        f"--node-rank={node_rank}",
        "--monitor-interval=0.5",
        EXAMPLE,
        *args,
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
    """rank -> steps; each step's "keys" turned into the sample numbers of tests.support.data (k000012 -> 12)."""
    out = {}
    for name in sorted(os.listdir(log_dir)):
        rank = int(name[len("rank") : -len(".jsonl")])
        with open(os.path.join(log_dir, name)) as f:
            out[rank] = [dict(s, keys=[int(k[1:]) for k in s["keys"]]) for s in map(json.loads, f)]
    return out


def data_args(ds_url: str, log_dir: str, *extra: str) -> list[str]:
    return [
        "--data",
        ds_url,
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--workers",
        "2",
        "--no-train",
        "--log-ids",
        log_dir,
        *extra,
    ]


# two ranks run under torchrun in the resume tests below; three ranks here, with a dataset smaller than the world batch
@pytest.mark.parametrize("nproc,num_samples,shard_size", [(3, 50, 7), (3, 5, 5)])
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


def _ordered(per_rank: dict[int, list[dict]]) -> dict[int, list[tuple[int, list[int]]]]:
    """rank -> [(step, sample numbers)] in the order the rank logged them."""
    return {r: [(s["step"], s["keys"]) for s in steps] for r, steps in per_rank.items()}


def test_mid_epoch_resume_equals_uninterrupted(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=44, shard_size=5)
    full, before, after = tmp_path / "full", tmp_path / "before", tmp_path / "after"
    for d in (full, before, after):
        d.mkdir()
    torchrun(2, data_args(ds.url, str(full)))
    ckpt = str(tmp_path / "ckpt.pt")
    torchrun(2, data_args(ds.url, str(before), "--checkpoint", ckpt, "--stop-after", "2"))
    torchrun(2, data_args(ds.url, str(after), "--checkpoint", ckpt))
    full_log, first, second = (_ordered(read_logs(str(d))) for d in (full, before, after))
    assert sorted(first) == sorted(second) == sorted(full_log) == [0, 1]
    for r in full_log:
        assert [step for step, _ in first[r]] == [0, 1]
        assert second[r][0][0] == 2, f"rank {r} resumed at step {second[r][0][0]}, not at step 2"
        # batch for batch, in order: the two runs together are the uninterrupted run
        assert first[r] + second[r] == full_log[r]


# one direction under torchrun (growing: the padding rule of the larger world); shrinking 3 -> 2 runs in process
# (tests/loader/test_loader.py) and every (old, new) pair in the plan oracle (tests/plan/test_epoch.py)
@pytest.mark.parametrize("before,after", [(2, 3)])
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
    assert sorted(first) == list(range(before)) and sorted(second) == list(range(after))
    assert len({len(s) for s in second.values()}) == 1  # equal batch counts after the resize too
    seen = Counter(i for steps in first.values() for s in steps for i in s["keys"])
    rest = Counter(i for steps in second.values() for s in steps for i in s["keys"])
    (pad_before,) = {s["padded"] for steps in first.values() for s in steps}  # what each loader reports
    (pad_after,) = {s["padded"] for steps in second.values() for s in steps}
    assert not set(seen) & set(rest), "samples seen before the checkpoint were delivered again"
    assert set(seen) | set(rest) == set(range(n))
    # after the resize the only repeats are exactly the padding the resumed loader reports
    assert sum(rest.values()) - len(rest) == pad_after, (sum(rest.values()), len(rest), pad_after)
    assert sum(seen.values()) - len(seen) <= pad_before  # the first run stopped early: at most its padding
