"""``ShardDataModule(fields=...)``: a real Lightning ``Trainer`` over dict batches.

Two epochs on CPU (2 DataLoader workers): every sample of the keyed dataset reaches ``training_step`` exactly
once per epoch, each row's multi-hot labels and text are its key's, and the augmentation got the image.
"""

from __future__ import annotations

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from shardkit.augment import GpuAugment, Normalize  # noqa: E402
from shardkit.integrations.lightning import ShardDataModule  # noqa: E402
from tests.support.data import FIELDS_C, FIELDS_N, labels_of, text_of, write_fields_dataset  # noqa: E402
from tests.support.lightning import cpu_trainer  # noqa: E402

FIELDS = ("image", "labels", "text", "key")


class FieldLog(pl.LightningModule):
    """Checks every row of every dict batch against its key and records the keys per epoch."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, FIELDS_C)
        self.keys: dict[int, list[str]] = {}

    def training_step(self, batch, batch_idx):
        assert isinstance(batch, dict) and tuple(batch) == FIELDS
        assert batch["image"].dtype == torch.float32  # normalised by gpu_augment on the device
        for row, key in enumerate(batch["key"]):
            i = int(key[1:])
            assert batch["labels"][row].tolist() == [int(c in labels_of(i)) for c in range(FIELDS_C)], key
            assert batch["text"][row] == text_of(i), key
        self.keys.setdefault(self.current_epoch, []).extend(batch["key"])
        logits = self.lin(batch["image"].mean((2, 3)))
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["labels"].float())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.timeout(120)
def test_a_trainer_over_dict_batches_sees_every_sample_once_per_epoch(tmp_path):
    url = write_fields_dataset(str(tmp_path / "train"), ["image", "labels", "text"], n=FIELDS_N)
    dm = ShardDataModule(
        url,
        gpu_augment=GpuAugment([Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))]),
        fields=FIELDS,
        batch_size=6,
        size=16,
        num_workers=2,
        seed=1,
    )
    model = FieldLog()
    trainer = cpu_trainer(max_epochs=2)
    trainer.fit(model, datamodule=dm)
    expected = sorted(f"k{i:06d}" for i in range(FIELDS_N))
    assert sorted(model.keys) == [0, 1]
    assert all(sorted(keys) == expected for keys in model.keys.values())
    assert model.keys[0] != model.keys[1]  # the Trainer's epoch reached the loader
