"""End to end: demo scenes (boxes, keypoints, masks) through two ranks x two workers over two epochs with the
``detect`` preset, and through a Lightning ``Trainer``.

Each rank's every batch passes the pixel oracle of :mod:`tests.support.scene_crops` (boxes on their colour, no
colour outside its class's boxes, masks on their colour and on the reference, padding black and 255, keypoints
on their edges), the ranks together see every sample exactly once per epoch, and each rank's ``boxes_dropped`` is
the boxes its samples had minus the boxes it returned.
"""

from __future__ import annotations

import pytest
import torch

import shardkit
from shardkit.demo.scenes import write_scenes
from tests.support.lightning import cpu_trainer
from tests.support.scene_crops import SCENE, TARGETS, check_batch

N = 24


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> str:
    return write_scenes(str(tmp_path_factory.mktemp("e2e_scenes") / "train"), N, size=SCENE, shard_size=5)


@pytest.mark.timeout(240)
def test_two_ranks_two_workers_two_epochs_detect(scenes):
    size, seed, min_visible = 48, 11, 0.25
    loaders = [
        shardkit.load(
            scenes,
            preset="detect",
            size=size,
            seed=seed,
            batch_size=4,
            num_workers=2,
            rank=r,
            world_size=2,
            fields=TARGETS,
            min_visible=min_visible,
        )
        for r in range(2)
    ]
    for epoch in range(2):
        keys: list[str] = []
        for loader in loaders:
            loader.set_epoch(epoch)
            given_n = returned = 0
            for b in loader:
                g, r = check_batch(b, size, "detect", seed, min_visible, epoch=epoch)
                given_n, returned = given_n + g, returned + r
                keys += b["key"]
            assert loader.stats.boxes_dropped == given_n - returned
        assert sorted(keys) == [f"k{i:06d}" for i in range(N)], f"epoch {epoch}: every sample once over the ranks"


@pytest.mark.timeout(240)
def test_a_trainer_gets_the_targets_of_every_sample_once_per_epoch(scenes):
    pl = pytest.importorskip("lightning.pytorch")
    from shardkit.integrations.lightning import ShardDataModule

    class TargetLog(pl.LightningModule):
        """Checks every dict batch with the oracle and records the keys per epoch."""

        def __init__(self, size: int, seed: int):
            super().__init__()
            self.lin = torch.nn.Linear(3, 4)
            self.size, self.seed = size, seed
            self.keys: dict[int, list[str]] = {}

        def training_step(self, batch, batch_idx):
            assert tuple(batch) == TARGETS
            check_batch(batch, self.size, "letterbox", self.seed, 0.1, epoch=self.current_epoch)
            self.keys.setdefault(self.current_epoch, []).extend(batch["key"])
            boxes = batch["boxes"].sum((1,)) / self.size  # [B, 4]: something that depends on the targets
            return torch.nn.functional.mse_loss(self.lin(batch["image"].float().mean((2, 3))), boxes)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    dm = ShardDataModule(scenes, fields=TARGETS, preset="letterbox", batch_size=6, size=32, num_workers=2, seed=3)
    model = TargetLog(32, 3)
    trainer = cpu_trainer(max_epochs=2)
    trainer.fit(model, datamodule=dm)
    assert sorted(model.keys) == [0, 1]
    assert all(sorted(keys) == [f"k{i:06d}" for i in range(N)] for keys in model.keys.values())
