"""``shardkit.integrations.lightning.ShardDataModule`` inside a real Lightning ``Trainer`` on CPU (no mocks).

In process: two epochs with validation twice per epoch, checked batch for batch against the plain
loader (every sample once per epoch, validation whole and in order every time). As
subprocesses, running examples/train_lightning.py: ``strategy="ddp"`` with 2 gloo processes
(equal batches, exactly once over ranks, no sampler injected), and a run killed mid-epoch
(``os._exit`` after a step checkpoint) then resumed with ``ckpt_path``: both runs together are
the uninterrupted run, in order, nothing repeated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

import shardkit  # noqa: E402
from shardkit.augment import GpuAugment, Normalize  # noqa: E402
from shardkit.integrations.lightning import ShardDataModule  # noqa: E402
from tests.support.data import write_dataset  # noqa: E402
from tests.support.lightning import cpu_trainer  # noqa: E402
from tests.support.probes import dataloader_workers, wait_for  # noqa: E402
from tests.support.repo import ROOT  # noqa: E402
from tests.support.torchrun import rank_logs  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "train_lightning.py")
TIMEOUT = 120
OPTS = dict(batch_size=4, size=16, seed=3, with_keys=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``train/`` (30 samples: 7 full batches and one of 2) and ``val/`` (10 samples) under one root."""
    root = tmp_path_factory.mktemp("lightning-ds")
    train = write_dataset(str(root / "train"), num_samples=30, shard_size=4, split="train")
    val = write_dataset(str(root / "val"), num_samples=10, shard_size=4, split="val")
    return str(root), train, val


def loader_epochs(url: str, epochs: int, **options) -> list[list[str]]:
    """The keys of every batch of ``epochs`` epochs of the plain loader (what the Trainer must see)."""
    loader = shardkit.load(url, **options)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out += [list(keys) for _, _, keys in loader]
    loader.close()
    return out


class KeyLog(pl.LightningModule):
    """A linear model on the mean colour that records the keys of every batch it is given."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.train_keys: list[list[str]] = []
        self.val_passes: list[tuple[bool, list[str]]] = []  # (sanity check?, keys of the pass)

    def training_step(self, batch, batch_idx):
        images, labels, keys = batch
        assert images.dtype == torch.float32  # normalised on the device by gpu_augment
        self.train_keys.append(list(keys))
        return torch.nn.functional.cross_entropy(self.lin(images.mean((2, 3))), labels)

    def on_validation_epoch_start(self):
        self.val_passes.append((self.trainer.sanity_checking, []))

    def validation_step(self, batch, batch_idx):
        assert batch[0].dtype == torch.float32
        self.val_passes[-1][1].extend(batch[2])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.timeout(TIMEOUT)
def test_fit_epochs_exactly_once_and_val_does_not_move_train(data):
    root, train, val = data
    norm = GpuAugment([Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    dm = ShardDataModule(
        os.path.join(root, "train"),
        os.path.join(root, "val"),
        gpu_augment=norm,
        val_gpu_augment=norm,
        num_workers=0,
        **OPTS,
    )
    model = KeyLog()
    cpu_trainer(max_epochs=2, num_sanity_val_steps=2, val_check_interval=0.5).fit(
        model, datamodule=dm
    )  # val mid-epoch too

    expected = loader_epochs(train.url, 2, num_workers=0, **OPTS)
    assert model.train_keys == expected  # batch for batch, as the loader alone gives them
    per_epoch = len(expected) // 2
    for epoch in range(2):
        keys = [k for b in model.train_keys[epoch * per_epoch : (epoch + 1) * per_epoch] for k in b]
        assert sorted(keys) == sorted(train.keys)  # every sample exactly once per epoch
    assert model.train_keys[:per_epoch] != model.train_keys[per_epoch:]  # the Trainer's epoch reached the loader
    # sanity check (2 batches), then a whole validation pass, in manifest order, twice per epoch
    assert model.val_passes == [(True, val.keys[:8])] + [(False, val.keys)] * 4


class Fails(pl.LightningModule):
    """Plain ``(images, labels)`` uint8 batches; raises at the third step."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.steps = 0

    def training_step(self, batch, batch_idx):
        images, labels = batch
        assert images.dtype == torch.uint8  # no gpu_augment: the loader's batches as they are
        self.steps += 1
        if self.steps == 3:
            raise RuntimeError("boom")
        return torch.nn.functional.cross_entropy(self.lin(images.float().mean((2, 3))), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.timeout(TIMEOUT)
def test_failed_run_stops_the_workers(data):
    dm = ShardDataModule(
        os.path.join(data[0], "train"), batch_size=4, size=16, num_workers=2
    )  # persistent workers, no val
    with pytest.raises(RuntimeError, match="boom"):
        cpu_trainer(max_epochs=1).fit(Fails(), datamodule=dm)
    assert wait_for(lambda: not dataloader_workers(), timeout=30), dataloader_workers()  # on_exception closed them


def test_rank_comes_from_the_trainer(data):
    with pytest.raises(TypeError, match="from the Trainer"):
        ShardDataModule(data[0], world_size=2)


def test_missing_lightning_names_the_extra(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # import of these raises ImportError
    monkeypatch.delitem(sys.modules, "shardkit.integrations.lightning")
    with pytest.raises(ImportError, match=r"shardkit\[lightning\]"):
        import shardkit.integrations.lightning  # noqa: F401


# --------------------------------------------------------------------------- examples/train_lightning.py


def run_example(tmp_path, root: str, *args: str, expect_rc: int = 0) -> None:
    """Run the example; output goes to a file (an abrupt exit leaves workers that hold a pipe open)."""
    cmd = [
        sys.executable,
        EXAMPLE,
        "--shards",
        root,
        "--arch",
        "small",
        "--batch-size",
        "4",
        "--image-size",
        "16",
        "--seed",
        "3",
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        rc = subprocess.run(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path), timeout=TIMEOUT
        ).returncode
    assert rc == expect_rc, out.read_text()[-3000:]


def read_keys(log_dir, stage: str) -> dict[int, list[dict]]:
    """rank -> logged steps of ``stage`` ("train", "val", "sanity")."""
    return {r: [s for s in steps if s["stage"] == stage] for r, steps in rank_logs(log_dir).items()}


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT)
def test_ddp_two_processes_equal_batches_exactly_once(tmp_path, data):
    root, train, val = data
    logs = tmp_path / "logs"
    logs.mkdir()
    # default use_distributed_sampler=True: Lightning leaves shardkit loaders alone (they are not DataLoaders)
    run_example(
        tmp_path,
        root,
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--log-keys",
        str(logs),
    )
    steps = read_keys(logs, "train")
    assert sorted(steps) == [0, 1] and len(steps[0]) == len(steps[1]) == 4  # 15 samples per rank: 3 x 4 + 3
    assert Counter(k for r in steps.values() for s in r for k in s["keys"]) == Counter(train.keys)
    assert {r: {s["aug_seed"] for s in steps[r]} for r in steps} == {0: {3}, 1: {4}}  # GpuAugment seed + rank
    vals = read_keys(logs, "val")
    assert len(vals[0]) == len(vals[1])
    assert Counter(k for r in vals.values() for s in r for k in s["keys"]) == Counter(val.keys)


@pytest.mark.slow
@pytest.mark.timeout(3 * TIMEOUT)
def test_killed_mid_epoch_resumes_from_lightning_checkpoint(tmp_path, data):
    root, train, val = data
    logs, ckpt = tmp_path / "logs", tmp_path / "ckpt"
    logs.mkdir()
    args = ["--epochs", "2", "--workers", "2", "--log-keys", str(logs), "--ckpt-dir", str(ckpt), "--ckpt-every", "5"]
    # 8 batches per epoch; step 10 is the 2nd batch of epoch 1. The process dies at the start of step 11:
    # batch 11 has been handed to Lightning and the workers have read further ahead
    run_example(tmp_path, root, *args, "--exit-after-step", "10", expect_rc=3)
    state = torch.load(ckpt / "last.ckpt", map_location="cpu", weights_only=True)
    assert state["global_step"] == 10
    assert state["ShardDataModule"]["train"]["epoch"] == 1 and state["ShardDataModule"]["train"]["batches_done"] == 2
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [state["ShardDataModule"]["train"]]

    run_example(tmp_path, root, *args, "--resume", str(ckpt / "last.ckpt"))
    steps = read_keys(logs, "train")[0]
    assert [s["step"] for s in steps] == list(range(16))  # steps 0-9, then 10-15: nothing repeated or lost
    assert [s["keys"] for s in steps] == loader_epochs(train.url, 2, num_workers=2, **OPTS)
    # a whole validation pass after each epoch (one per run), the same every time
    val_pass = loader_epochs(val.url, 1, preset="eval", shuffle=False, num_workers=2, **OPTS)
    assert [s["keys"] for s in read_keys(logs, "val")[0]] == val_pass * 2


# --------------------------------------------------------------------------- epochs of varying length


def _varying(root: str, train) -> list:
    """A mixture whose epochs hold 32, 33, 32, 33 samples: 8, 9, 8, 9 batches of 4."""
    small = write_dataset(os.path.join(root, "small"), num_samples=5, shard_size=2, split="train")
    return [shardkit.Source(train.url, repeat=1), shardkit.Source(small.url, repeat=0.5)]


def _mixture_epochs(sources, epochs: int) -> list[list[list[str]]]:
    loader = shardkit.load(sources, num_workers=0, **OPTS)
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out.append([list(keys) for _, _, keys in loader])
    loader.close()
    return out


@pytest.mark.timeout(TIMEOUT)
def test_fit_over_epochs_of_varying_length_sees_every_sample(tmp_path, data):
    """Lightning takes ``len()`` once per dataloader load: an epoch longer than the first was cut short
    (36 of 37 samples); the DataModule makes it re-read ``len()`` every epoch."""
    root, train, _ = data
    sources = _varying(str(tmp_path), train)
    expected = _mixture_epochs(sources, 4)
    assert [len(e) for e in expected] == [8, 9, 8, 9]
    norm = GpuAugment([Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    dm = ShardDataModule(sources, gpu_augment=norm, num_workers=0, **OPTS)
    model = KeyLog()
    cpu_trainer(max_epochs=4).fit(model, datamodule=dm)
    assert model.train_keys == [b for e in expected for b in e]  # every batch of every epoch, in order


class StopAt(pl.Callback):
    """Raise after ``step`` training steps (a run that dies mid-epoch)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= self.step:
            raise RuntimeError("stop here")


@pytest.mark.timeout(TIMEOUT)
def test_resumed_fit_over_epochs_of_varying_length_equals_uninterrupted(tmp_path, data):
    from lightning.pytorch.callbacks import ModelCheckpoint

    root, train, _ = data
    sources = _varying(str(tmp_path), train)
    expected = [b for e in _mixture_epochs(sources, 3) for b in e]  # 8 + 9 + 8 batches
    norm = GpuAugment([Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
    first = KeyLog()
    ckpt = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=5, save_top_k=-1)
    t = cpu_trainer(max_epochs=3, enable_checkpointing=True, callbacks=[ckpt, StopAt(6)])
    with pytest.raises(RuntimeError, match="stop here"):
        t.fit(first, datamodule=ShardDataModule(sources, gpu_augment=norm, num_workers=0, **OPTS))
    assert len(first.train_keys) == 6
    path = [os.path.join(ckpt.dirpath, f) for f in os.listdir(ckpt.dirpath) if "step=5" in f]
    second = KeyLog()
    cpu_trainer(max_epochs=3).fit(
        second, datamodule=ShardDataModule(sources, gpu_augment=norm, num_workers=0, **OPTS), ckpt_path=path[0]
    )
    # resumed in epoch 0 (8 batches), then epoch 1 (9 batches) whole: as the uninterrupted run
    assert first.train_keys[:5] + second.train_keys == expected
