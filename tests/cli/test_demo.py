"""The README's main command and the examples run end to end (small sizes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardkit.cli import main
from shardkit.demo.run import DemoConfig, run_demo
from tests.support.repo import ROOT


@pytest.mark.slow
def test_demo_runs_and_learns(tmp_path):
    opts = DemoConfig(
        workdir=str(tmp_path / "demo"),
        num_classes=2,
        train_per_class=48,
        val_per_class=16,
        epochs=3,
        image_size=32,
        batch_size=16,
        num_workers=1,
    )
    lines = []
    result = run_demo(opts, log=lines.append)
    assert len(result.epochs) == 3 and [e.epoch for e in result.epochs] == [0, 1, 2]
    assert result.epochs[-1].loss < result.epochs[0].loss  # it learns
    assert all(0 <= e.train_acc <= 1 and 0 <= e.val_acc <= 1 for e in result.epochs)
    for e in result.epochs:  # the log says what the result holds
        assert (
            f"epoch {e.epoch}: loss {e.loss:.3f}  train acc {e.train_acc:.3f}  val acc {e.val_acc:.3f}  {e.images_per_s:.0f} img/s (training)"
            in lines
        )
    sk, imf = result.shardkit_images_per_s, result.imagefolder_images_per_s
    assert sk > 0 and imf > 0
    assert (
        lines[-1]
        == f"input pipeline alone: shardkit {sk:.0f} img/s vs ImageFolder+DataLoader {imf:.0f} img/s ({sk / imf:.1f}x)"
    ), lines[-1]


def test_demo_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0 and "--workdir" in capsys.readouterr().out


@pytest.mark.slow
def test_catdog_example(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "examples", "train_catdog.py"),
            "--demo-data",
            "--no-pretrained",
            "--arch",
            "small",  # densenet121 on a CPU took 30 s here; its head is checked in process below
            "--epochs",
            "1",
            "--image-size",
            "32",
            "--batch-size",
            "16",
            "--workers",
            "1",
            "--shards",
            str(tmp_path / "shards"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 0: loss" in out.stdout and "val acc" in out.stdout


def test_catdog_example_fine_tune_head():
    """The example's densenet121 (the default --arch) gets a classifier of num_classes outputs."""
    import runpy

    import torch

    ns = runpy.run_path(os.path.join(ROOT, "examples", "train_catdog.py"), run_name="catdog")
    model = ns["build_model"](3, False).eval()
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
