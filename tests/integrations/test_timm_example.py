"""examples/train_timm.py runs one short epoch: a timm model, timm's optimizer and scheduler, shardkit batches."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.data import write_dataset
from tests.support.repo import ROOT

pytest.importorskip("timm")

EXAMPLE = os.path.join(ROOT, "examples", "train_timm.py")
TIMEOUT = 120


@pytest.mark.timeout(TIMEOUT)
def test_timm_example_one_epoch(tmp_path):
    train = write_dataset(str(tmp_path / "train"), num_samples=16, shard_size=4, split="train")
    val = write_dataset(str(tmp_path / "val"), num_samples=6, shard_size=4, split="val")
    cmd = [
        sys.executable,
        EXAMPLE,
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
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    m = re.search(r"epoch 0: (\d+) samples, loss ([\d.]+), .* val top-1 [\d.]+ % \((\d+) images\)", proc.stdout)
    assert m, proc.stdout
    assert int(m.group(1)) == 16 and int(m.group(3)) == 6  # every sample trained on, every one evaluated
