"""examples/train_clip.py: shardkit makes captioned sample data, loads (image, text) batches, a toy CLIP trains."""

from __future__ import annotations

import math
import os
import re
import subprocess

import pytest

from tests.support.data import write_dataset
from tests.support.examples import run_script
from tests.support.repo import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "train_clip.py")
TIMEOUT = 120


def _run(tmp_path, *args: str) -> "subprocess.CompletedProcess[str]":
    return run_script(EXAMPLE, args, cwd=str(tmp_path), timeout=TIMEOUT, check=False)


@pytest.mark.timeout(TIMEOUT)
def test_clip_example_trains_on_its_own_captioned_data(tmp_path):
    args = ("--steps", "12", "--per-class", "4", "--batch-size", "8", "--image-size", "32", "--workers", "1")
    proc = _run(tmp_path, *args, "--log-every", "4")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"^step \d+: loss (\S+)$", proc.stdout, re.M)]
    m = re.search(r"^done: (\d+) steps, loss (\S+), [\d.]+ img/s$", proc.stdout, re.M)
    assert m, proc.stdout
    # 32 samples, 4 batches an epoch: 12 steps run over 3 epochs (set_epoch, a fresh iterator each time)
    assert int(m.group(1)) == 12 and len(losses) == 4  # steps 1, 4, 8, 12
    assert all(math.isfinite(x) and x > 0 for x in [*losses, float(m.group(2))])
    # the data it made: a CSV with a caption per image, converted without labels, one text per sample
    import shardkit

    url = os.path.join(tmp_path, "clip-sample", "shards", "train")
    assert "text" in shardkit.load_manifest(url).fields and "label" not in shardkit.load_manifest(url).fields
    texts = [t for b in shardkit.load(url, fields=("text",), batch_size=8, num_workers=0) for t in b["text"]]
    assert len(texts) == 32 and all(
        re.fullmatch(r"a .*(circle|square|stripes|ring|cross|diamond|triangle|checker).*", t) for t in texts
    )


@pytest.mark.timeout(TIMEOUT)
def test_clip_example_bad_arguments_are_one_line(tmp_path):
    proc = _run(tmp_path, "--batch-size", "1")
    assert proc.returncode == 2 and "--batch-size must be at least 2" in proc.stderr.strip().splitlines()[-1]
    labelled = write_dataset(str(tmp_path / "labelled"), num_samples=8, shard_size=4)  # classes, no captions
    proc = _run(tmp_path, "--data", labelled.url, "--workers", "0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "text" in proc.stderr, proc.stderr
