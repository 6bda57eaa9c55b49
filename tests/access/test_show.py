"""``shardkit.show`` and ``shardkit show``: boxes in their class's colour where the box is, masks blended in,
captions, batches as the loader yields them."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.cli import main
from shardkit.demo.sources import write_source
from shardkit.viz.grid import CAPTION, class_colour

GREY = 100


def _item(w: int, h: int, box: tuple[int, int, int, int], c: int) -> dict:
    return {
        "image": torch.full((3, h, w), GREY, dtype=torch.uint8),
        "boxes": torch.tensor([box], dtype=torch.float32),
        "box_labels": torch.tensor([c]),
        "label": c,
    }


@settings(phases=[Phase.explicit, Phase.generate], max_examples=25, deadline=None)
@given(
    w=st.integers(30, 80), h=st.integers(30, 80), c=st.integers(0, 30), data=st.data(),
)  # fmt: skip
@example(w=40, h=30, c=3, data=None)
def test_a_box_is_drawn_in_its_class_colour_on_its_border(w, h, c, data):
    if data is None:
        x0, y0, x1, y1 = 5, 6, 30, 25  # fits 40 x 30
    else:
        x0 = data.draw(st.integers(0, w - 12))
        y0 = data.draw(st.integers(0, h - 20))
        x1 = data.draw(st.integers(x0 + 8, w - 1))
        y1 = data.draw(st.integers(y0 + 18, h - 1))  # the class name is written inside the box's top
    pad = 2
    img = np.asarray(shardkit.show([_item(w, h, (x0, y0, x1, y1), c)], classes=None, padding=pad))
    assert img.shape == (h + CAPTION + 2 * pad, w + 2 * pad, 3)
    cell = img[pad : pad + h, pad : pad + w]
    mid = (y0 + y1) // 2
    assert tuple(cell[mid, x0]) == class_colour(c)  # the left edge
    assert tuple(cell[mid, x1 - 1]) == class_colour(c)  # the right edge (inside the box)
    assert tuple(cell[y1 - 3, (x0 + x1) // 2]) == (GREY,) * 3  # the inside is untouched (below the name)
    if x0 > 2:
        assert tuple(cell[mid, x0 - 2]) == (GREY,) * 3  # nothing left of the box


def test_masks_are_blended_and_padding_rows_are_not_boxes():
    img = torch.full((2, 3, 20, 20), GREY, dtype=torch.uint8)
    mask = torch.zeros(2, 20, 20, dtype=torch.uint8)
    mask[0, 5:10, 5:10] = 4
    mask[1, :, :] = 255  # ignore: not drawn
    batch = {
        "image": img,
        "mask": mask,
        "boxes": torch.tensor([[[0, 0, 0, 0]], [[2, 2, 18, 18]]], dtype=torch.float32),
        "box_labels": torch.tensor([[-1], [1]]),
    }
    out = np.asarray(shardkit.show(batch, ncol=2, padding=0))
    first, second = out[:20, :20].astype(int), out[:20, 20:40].astype(int)
    want = np.round(0.55 * GREY + 0.45 * np.array(class_colour(4)))
    assert np.abs(first[7, 7] - want).max() <= 1 and tuple(first[0, 0]) == (GREY,) * 3
    assert tuple(second[10, 2]) == class_colour(1) and tuple(second[10, 10]) == (GREY,) * 3


def test_show_of_items_and_of_a_loader_batch(tmp_path):
    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.options import ScanConfig

    src, dest = str(tmp_path / "src"), str(tmp_path / "ds")
    write_source(src, "coco", images=6, size=(64, 48))
    convert(f"coco:{src}/annotations.json", dest, ConvertConfig(source=ScanConfig(masks=True)), workers=1, quiet=True)
    url = os.path.join(dest, "train")
    ds = shardkit.open(url)
    item = ds[0]
    img = np.asarray(shardkit.show(item, classes=ds.classes, padding=0))
    x0, y0, x1, y1 = (int(v) for v in item["boxes"][0].tolist())
    assert tuple(img[(y0 + y1) // 2, x0]) == class_colour(int(item["box_labels"][0]))
    batch = next(iter(shardkit.load(url, batch_size=3, size=64, preset="eval", shuffle=False, num_workers=0,
                                    fields=["image", "boxes", "box_labels", "mask"])))  # fmt: skip
    grid = np.asarray(shardkit.show(batch, classes=ds.classes, ncol=3, padding=0))
    assert grid.shape == (64 + CAPTION, 3 * 64, 3)
    b = 1
    row = batch["boxes"][b][batch["box_labels"][b] >= 0][0]
    x = int(round(float(row[0])))
    y = int((float(row[1]) + float(row[3])) / 2)
    assert tuple(grid[y, 64 * b + x]) == class_colour(int(batch["box_labels"][b][0]))
    out = tmp_path / "g.png"
    assert main(["show", url, "--n", "4", "--out", str(out)]) == 0 and out.stat().st_size > 0
    assert main(["show", url, "--n", "2", "--preset", "detect", "--size", "64", "--out", str(out)]) == 0


def test_show_refuses_what_is_not_a_sample():
    with pytest.raises(TypeError, match="show"):
        shardkit.show(42)
    with pytest.raises(ValueError, match="no sample"):
        shardkit.show([])
