"""Real multi-process data parallelism: torchrun + gloo on CPU, running examples/train_ddp.py.

Each rank logs the sample ids of every step; the tests check equal batch counts
on every rank, exactly-once coverage (plus reported padding), that a DDP
collective per step finishes the epoch (no hang, bounded by a timeout),
mid-epoch resume batch for batch, and elastic resume on another world size.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pytest

from tests.support.data import write_dataset
from tests.support.faults import free_port
from tests.support.repo import ROOT
from tests.support.torchrun import finish, launch, rank_logs

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(ROOT, "examples", "train_ddp.py")


def torchrun(nproc: int, args: list[str], **kw):
    """``examples/train_ddp.py`` under torchrun (:func:`tests.support.torchrun.launch`)."""
    return launch(EXAMPLE, nproc, args, **kw)


def read_logs(log_dir: str) -> dict[int, list[dict]]:
    """rank -> steps; each step's "keys" turned into the sample numbers of tests.support.data (k000012 -> 12)."""
    return {
        r: [dict(s, keys=[int(k[1:]) for k in s["keys"]]) for s in steps] for r, steps in rank_logs(log_dir).items()
    }


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


# three ranks here; the two-node test below reads a dataset smaller than the world batch
def test_equal_batches_exactly_once(tmp_path):
    nproc, num_samples = 3, 50
    ds = write_dataset(str(tmp_path / "ds"), num_samples=num_samples, shard_size=7)
    logs = tmp_path / "logs"
    logs.mkdir()
    torchrun(nproc, data_args(ds.url, str(logs)))
    _assert_exactly_once_padded(read_logs(str(logs)), nproc, num_samples)


def _assert_exactly_once_padded(per_rank: dict[int, list[dict]], nproc: int, num_samples: int) -> None:
    """Every rank ran the same number of steps; every sample came once, plus the padding that evens out the ranks."""
    assert sorted(per_rank) == list(range(nproc))
    assert len({len(steps) for steps in per_rank.values()}) == 1, {r: len(s) for r, s in per_rank.items()}
    ids = Counter(i for steps in per_rank.values() for s in steps for i in s["keys"])
    padded = -(-num_samples // nproc) * nproc - num_samples
    assert set(ids) == set(range(num_samples))
    assert sum(ids.values()) == num_samples + padded


def test_two_nodes_c10d_rendezvous_on_a_dataset_smaller_than_the_world_batch(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=7, shard_size=3)  # 3 shards, 7 samples: world batch 8
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    nodes = [torchrun(1, data_args(ds.url, str(logs)), nnodes=2, node_rank=i, port=port, wait=False) for i in range(2)]
    for p in nodes:
        finish(p)
    _assert_exactly_once_padded(read_logs(str(logs)), 2, 7)


def _ordered(per_rank: dict[int, list[dict]]) -> dict[int, list[tuple[int, list[int]]]]:
    """rank -> [(step, sample numbers)] in the order the rank logged them."""
    return {r: [(s["step"], s["keys"]) for s in steps] for r, steps in per_rank.items()}


def test_mid_epoch_resume_on_the_same_and_on_a_larger_world(tmp_path):
    """Two ranks stop after 2 steps. Resumed on two ranks, the two runs are the uninterrupted run batch for batch;
    resumed from the same checkpoint on three ranks (the padding rule of the larger world), every sample not seen
    comes once and the only repeats are the padding the resumed loader reports. Shrinking runs in process
    (tests/loader/test_loader.py) and every (old, new) pair in the plan oracle (tests/plan/test_epoch.py)."""
    n = 52
    ds = write_dataset(str(tmp_path / "ds"), num_samples=n, shard_size=6)
    full, before, after, larger = (tmp_path / d for d in ("full", "before", "after", "larger"))
    for d in (full, before, after, larger):
        d.mkdir()
    ckpt, ckpt3 = str(tmp_path / "ckpt.pt"), str(tmp_path / "ckpt3.pt")
    torchrun(2, data_args(ds.url, str(full)))
    torchrun(2, data_args(ds.url, str(before), "--checkpoint", ckpt, "--stop-after", "2"))
    shutil.copyfile(ckpt, ckpt3)  # a resumed run checkpoints again at its end
    torchrun(2, data_args(ds.url, str(after), "--checkpoint", ckpt))
    torchrun(3, data_args(ds.url, str(larger), "--checkpoint", ckpt3))

    full_log, first, second = (_ordered(read_logs(str(d))) for d in (full, before, after))
    assert sorted(first) == sorted(second) == sorted(full_log) == [0, 1]
    for r in full_log:
        assert [step for step, _ in first[r]] == [0, 1]
        assert second[r][0][0] == 2, f"rank {r} resumed at step {second[r][0][0]}, not at step 2"
        # batch for batch, in order: the two runs together are the uninterrupted run
        assert first[r] + second[r] == full_log[r]

    stopped, grown = read_logs(str(before)), read_logs(str(larger))
    assert sorted(grown) == [0, 1, 2]
    assert len({len(s) for s in grown.values()}) == 1  # equal batch counts after the resize too
    seen = Counter(i for steps in stopped.values() for s in steps for i in s["keys"])
    rest = Counter(i for steps in grown.values() for s in steps for i in s["keys"])
    (pad_before,) = {s["padded"] for steps in stopped.values() for s in steps}  # what each loader reports
    (pad_after,) = {s["padded"] for steps in grown.values() for s in steps}
    assert not set(seen) & set(rest), "samples seen before the checkpoint were delivered again"
    assert set(seen) | set(rest) == set(range(n))
    # after the resize the only repeats are exactly the padding the resumed loader reports
    assert sum(rest.values()) - len(rest) == pad_after, (sum(rest.values()), len(rest), pad_after)
    assert sum(seen.values()) - len(seen) <= pad_before  # the first run stopped early: at most its padding
