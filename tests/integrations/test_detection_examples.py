"""examples/train_detection.py and examples/train_segmentation.py train on shardkit's target batches (short runs on
demo scenes), the batches they train on put every box and mask pixel on its class's colour, and
tools/bench_detection.py runs (``--quick``).

The mutant gate (``tests/mutants/targets_torchvision.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import json
import math
import os
import re

import pytest
import torch

from shardkit.demo.scenes import COLOURS, write_scenes
from shardkit.targets import to_torchvision
from tests.support.examples import load_script, run_script
from tests.support.repo import ROOT

DETECTION = os.path.join(ROOT, "examples", "train_detection.py")
SEGMENTATION = os.path.join(ROOT, "examples", "train_segmentation.py")
BENCH = os.path.join(ROOT, "tools", "bench_detection.py")
TIMEOUT = 240


# ----------------------------------------------------------------------------- the examples run and train


@pytest.mark.timeout(TIMEOUT)
def test_detection_example_trains_on_demo_scenes(tmp_path):
    args = ["--workdir", str(tmp_path / "demo"), "--demo-images", "16", "--steps", "3", "--batch-size", "2"]
    args += ["--workers", "1", "--size", "96", "--log-every", "1", "--preset", "detect"]
    proc = run_script(DETECTION, args, cwd=str(tmp_path), timeout=TIMEOUT)
    logged = [(int(s), float(x)) for s, x in re.findall(r"step (\d+)/3 \(epoch \d+\): loss (\S+) \(", proc.stdout)]
    assert [s for s, _ in logged] == [1, 2, 3], proc.stdout
    for name in ("loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"):
        assert name in proc.stdout
    m = re.search(r"done: (\d+) steps, (\d+) images, (\d+) boxes, loss (\S+) -> (\S+)", proc.stdout)
    assert m, proc.stdout
    assert (int(m.group(1)), int(m.group(2))) == (3, 6) and int(m.group(3)) > 0
    assert all(math.isfinite(x) for _, x in logged) and float(m.group(5)) == logged[-1][1]


@pytest.mark.timeout(TIMEOUT)
def test_segmentation_example_trains_on_demo_scenes(tmp_path):
    args = ["--workdir", str(tmp_path / "demo"), "--demo-images", "16", "--steps", "4", "--batch-size", "2"]
    args += ["--workers", "1", "--size", "64", "--log-every", "2", "--lr", "0.01"]
    proc = run_script(SEGMENTATION, args, cwd=str(tmp_path), timeout=TIMEOUT)
    logged = [(int(s), float(x)) for s, x in re.findall(r"step (\d+)/4 \(epoch \d+\): loss (\S+),", proc.stdout)]
    assert [s for s, _ in logged] == [2, 4], proc.stdout
    m = re.search(r"done: (\d+) steps, (\d+) images, loss (\S+) -> (\S+), pixel accuracy (\S+)", proc.stdout)
    assert m, proc.stdout
    assert (int(m.group(1)), int(m.group(2))) == (4, 8)
    assert all(math.isfinite(float(m.group(k))) for k in (3, 4, 5))


def test_the_examples_say_a_bad_url_in_one_line(tmp_path):
    for path, name in ((DETECTION, "train_detection"), (SEGMENTATION, "train_segmentation")):
        ex = load_script(path, name + "_example")
        with pytest.raises(SystemExit) as e:
            ex.main(["--data", str(tmp_path / "nothing-here"), "--steps", "1"])
        msg = str(e.value.code)
        assert msg.startswith(name + ".py: ") and "nothing-here" in msg and "\n" not in msg, msg


# ----------------------------------------------------------------------------- what they train on: boxes on colours


def _near(image: torch.Tensor, c: int, tol: int = 40) -> torch.Tensor:
    """``[H, W]`` bool: pixels within ``tol`` of class ``c``'s colour (JPEG and resampling tolerance)."""
    colour = torch.tensor(COLOURS[c], dtype=torch.int16).view(3, 1, 1)
    return (image.to(torch.int16) - colour).abs().amax(0) <= tol


def _interior(region: torch.Tensor, margin: int) -> torch.Tensor:
    """The pixels of ``region`` at least ``margin`` pixels from its edge (erosion by a square)."""
    r = region[None, None].float()
    k = 2 * margin + 1
    return (-torch.nn.functional.max_pool2d(-r, k, stride=1, padding=margin))[0, 0] > 0.5


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("seed", [0, 1])
def test_detection_batches_put_every_box_on_its_colour(tmp_path, seed):
    ex = load_script(DETECTION, "train_detection_example")
    url = write_scenes(str(tmp_path / "scenes"), 24, size=(120, 90), shard_size=8, seed=seed)
    # min_visible=0: every box with a visible pixel stays (the default drops slivers the crop leaves, pixels and all)
    loader = ex.build_loader(url, size=96, batch_size=4, workers=1, seed=seed, preset="detect", min_visible=0.0)
    checked = 0
    for batch in loader:
        images, targets = to_torchvision(batch)
        for img_f, t, img in zip(images, targets, batch["image"]):
            assert img_f.dtype == torch.float32 and float(img_f.max()) <= 1.0
            covered = {c: torch.zeros(img.shape[-2:], dtype=torch.bool) for c in range(1, len(COLOURS))}
            for box, c in zip(t["boxes"].tolist(), t["labels"].tolist()):
                x0, y0, x1, y1 = box
                assert 0 <= x0 < x1 <= 96 and 0 <= y0 < y1 <= 96, box
                inside = _near(img, c)[math.floor(y0) : math.ceil(y1), math.floor(x0) : math.ceil(x1)]
                if x1 - x0 >= 1 and y1 - y0 >= 1:  # (a sub-pixel sliver the crop left holds no whole pixel)
                    assert bool(inside.any()), (box, c)  # the box holds pixels of its class
                covered[c][
                    max(0, math.floor(y0) - 2) : math.ceil(y1) + 2, max(0, math.floor(x0) - 2) : math.ceil(x1) + 2
                ] = True
                checked += 1
            for c, cover in covered.items():
                solid = _interior(_near(img, c, tol=25), 2)  # colour c well inside a rectangle
                assert not bool((solid & ~cover).any()), f"colour {c} outside all its boxes"
    assert checked > 0


@pytest.mark.timeout(TIMEOUT)
def test_segmentation_batches_put_every_mask_pixel_on_its_colour(tmp_path):
    ex = load_script(SEGMENTATION, "train_segmentation_example")
    url = write_scenes(str(tmp_path / "scenes"), 24, size=(120, 90), shard_size=8, keypoints=False)
    loader = ex.build_loader(url, size=64, batch_size=4, workers=1)
    checked = 0
    for batch in loader:
        for img, mask in zip(batch["image"], batch["mask"]):
            for c in range(len(COLOURS)):
                region = _interior(mask == c, 2)  # away from the rectangles' edges (resampling)
                checked += int(region.sum())
                assert bool(_near(img, c)[region].all()), f"mask class {c} off its colour"
    assert checked > 0


# ----------------------------------------------------------------------------- the benchmark runs


@pytest.mark.timeout(TIMEOUT)
def test_bench_detection_quick(tmp_path):
    out = tmp_path / "res.json"
    bench = load_script(BENCH, "bench_detection_tool")
    assert bench.main(["--quick", "--out", str(tmp_path / "data"), "--json", str(out)]) == 0
    res = json.loads(out.read_text())["summary"]
    for kind in ("det torchvision-pil", "det torchvision", "seg torchvision-pil", "seg torchvision"):
        assert res[kind]["img_s"] and res[kind]["img_s"] > 0, res
    for task in ("det", "seg"):
        assert res[f"{task} shardkit"]["img_s"] and res[f"{task} shardkit"]["img_s"] > 0, res
        assert res[f"{task} ratio torchvision"] > 0 and res[f"{task} ratio torchvision-pil"] > 0, res
