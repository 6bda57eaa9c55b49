"""examples/train_timm.py runs one short epoch: a timm model, timm's optimizer and scheduler, shardkit batches."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.data import write_dataset
from tests.support.examples import run_script
from tests.support.repo import ROOT

pytest.importorskip("timm")

EXAMPLE = os.path.join(ROOT, "examples", "train_timm.py")
TIMEOUT = 120


@pytest.mark.timeout(TIMEOUT)
def test_timm_example_one_epoch(tmp_path):
    train = write_dataset(str(tmp_path / "train"), num_samples=16, shard_size=4, split="train")
    val = write_dataset(str(tmp_path / "val"), num_samples=6, shard_size=4, split="val")
    args = [
        "--data",
        train.url,
        "--val",
        val.url,
        "--model",
        "test_resnet",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--image-size",
        "32",
        "--workers",
        "1",
        "--mixup",
        "0.2",
    ]
    proc = run_script(EXAMPLE, args, cwd=str(tmp_path), timeout=TIMEOUT)
    m = re.search(r"epoch 0: (\d+) samples, loss ([\d.]+), .* val top-1 [\d.]+ % \((\d+) images\)", proc.stdout)
    assert m, proc.stdout
    assert int(m.group(1)) == 16 and int(m.group(3)) == 6  # every sample trained on, every one evaluated
