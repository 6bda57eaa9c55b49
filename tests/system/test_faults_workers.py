"""A DataLoader worker killed mid-epoch (SIGKILL, as the OOM killer does it).

Guarantees: the training loop gets a clear error within seconds, never a hang; the loader can be
iterated again afterwards (fresh workers) and continues the epoch where the training loop was,
so the epoch still delivers every sample exactly once; ``close()`` releases every worker.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

import shardkit
from tests.support.data import write_dataset
from tests.support.probes import dataloader_workers, wait_for

#: how long torch's DataLoader waits for a batch before checking that its workers are alive
#: (``MP_STATUS_CHECK_INTERVAL``): a fixed interval, not a measure of speed
_STATUS_CHECK_S = 5.0

KW = dict(batch_size=4, size=16, pin_memory=False, with_keys=True, shuffle_buffer=8, shuffle_initial=8)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write_dataset(
        str(tmp_path_factory.mktemp("w") / "ds"), num_samples=96, shard_size=12, size=(32, 24), distinct_images=2
    )


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_killed_worker_is_a_clear_error_within_seconds_then_resume(ds, context):
    before = set(dataloader_workers())
    loader = shardkit.load(ds.url, num_workers=2, multiprocessing_context=context, persistent_workers=True, **KW)
    t = time.monotonic()
    it = iter(loader)
    keys = []
    for _ in range(3):
        keys += next(it)[2]
    start_s = time.monotonic() - t  # starting the workers and their first batches: this machine's unit of time
    workers = sorted(set(dataloader_workers()) - before)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(
        RuntimeError, match=rf"DataLoader worker \(pid {workers[0]} \(killed by SIGKILL\)\) died mid-epoch"
    ):
        for _, _, ks in it:
            keys += ks
    # within seconds, never a hang: at worst torch's liveness check, which runs when no batch has come for
    # _STATUS_CHECK_S, plus a few times what starting the loader took on this machine
    detect_s = time.monotonic() - t
    assert detect_s < _STATUS_CHECK_S + 5 * start_s, (detect_s, start_s)
    # the training loop may go on (or restore a checkpoint): a new pass gets fresh workers and the rest of the epoch
    keys += [k for _, _, ks in loader for k in ks]
    assert sorted(keys) == sorted(ds.keys)
    assert workers[0] not in dataloader_workers()
    loader.close()
    assert wait_for(lambda: not (set(dataloader_workers()) - before), 10)


@pytest.mark.timeout(60)
def test_close_releases_persistent_workers_and_loader_is_reusable(ds):
    before = set(dataloader_workers())
    with shardkit.load(ds.url, num_workers=2, multiprocessing_context="fork", persistent_workers=True, **KW) as loader:
        first = sorted(k for _, _, ks in loader for k in ks)
        assert len(set(dataloader_workers()) - before) == 2  # persistent: still there between epochs
    assert wait_for(lambda: not (set(dataloader_workers()) - before), 10)
    assert first == sorted(ds.keys)
    second = sorted(k for _, _, ks in loader for k in ks)  # usable again after close (new workers)
    assert second == first
    loader.close()
    loader.close()  # idempotent
    assert wait_for(lambda: not (set(dataloader_workers()) - before), 10)


@pytest.mark.timeout(60)
def test_error_in_a_worker_does_not_leave_a_broken_loader(ds, tmp_path):
    """A StorageError (shard deleted mid-epoch) surfaces; after the fix the same loader iterates again."""
    import shutil

    root = str(tmp_path / "copy")
    shutil.copytree(ds.url, root)
    loader = shardkit.load(
        root, num_workers=2, multiprocessing_context="fork", persistent_workers=True, shuffle=False, **KW
    )
    victim = os.path.join(root, "train-000007.tar")
    saved = open(victim, "rb").read()
    os.unlink(victim)
    keys = []
    with pytest.raises(shardkit.StorageError, match="train-000007.tar") as err:
        for _, _, ks in loader:
            keys += ks
    assert "\n" not in str(err.value) and "Caught" not in str(err.value)  # one line, not DataLoader's traceback dump
    with open(victim, "wb") as f:
        f.write(saved)
    keys += [k for _, _, ks in loader for k in ks]
    assert sorted(keys) == sorted(ds.keys)
    loader.close()


def _failing_hook(image, sample):
    if sample.index == 3:
        raise ValueError(f"cannot handle {sample.key} of {os.path.basename(sample.shard)}")
    return image


@pytest.mark.timeout(60)
def test_a_worker_error_reaches_the_user_as_one_line(ds):
    loader = shardkit.load(ds.url, num_workers=2, multiprocessing_context="fork", hook=_failing_hook, **KW)
    with pytest.raises(ValueError) as err:
        list(loader)
    msg = str(err.value)
    assert "\n" not in msg and "Caught" not in msg and "Traceback" not in msg, msg
    assert "cannot handle k0000" in msg and ".tar" in msg and "DataLoader worker" in msg
