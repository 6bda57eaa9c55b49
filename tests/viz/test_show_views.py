"""``shardkit show`` of a multi-crop batch: one row per sample, every view of it in order, each cell the view's own
pixels; and ``show`` of a selection draws only samples the selection holds."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit.cli import main
from shardkit.viz.grid import CAPTION, PAD_VALUE


def _cells(grid: np.ndarray, h: int, w: int, pad: int, rows: int, cols: int) -> list[np.ndarray]:
    return [
        grid[pad + r * (h + pad) : pad + r * (h + pad) + h, pad + c * (w + pad) : pad + c * (w + pad) + w]
        for r in range(rows)
        for c in range(cols)
    ]


@settings(phases=[Phase.explicit, Phase.generate], max_examples=25, deadline=None)
@given(
    b=st.integers(1, 3),
    sizes=st.lists(st.integers(4, 20), min_size=1, max_size=5),
    as_tuple=st.booleans(),
    pad=st.integers(0, 2),
)
@example(b=2, sizes=[12, 12, 6, 6, 6], as_tuple=False, pad=0)
@example(b=3, sizes=[8, 5], as_tuple=True, pad=2)
def test_every_view_of_every_sample_is_a_cell_of_its_row(b, sizes, as_tuple, pad):
    g = torch.Generator().manual_seed(len(sizes) * 10 + b)
    views = [torch.randint(0, 256, (b, 3, s, s), dtype=torch.uint8, generator=g) for s in sizes]
    labels = torch.arange(b)
    data = (views, labels, [f"k{i}" for i in range(b)]) if as_tuple else {"image": views, "label": labels}
    grid = np.asarray(shardkit.show(data, padding=pad))
    h, w = max(sizes) + CAPTION, max(sizes)
    v = len(sizes)
    assert grid.shape == (b * (h + pad) + pad, v * (w + pad) + pad, 3)
    cells = _cells(grid, h, w, pad, b, v)
    assert len(cells) == b * v
    for i in range(b):
        for j, s in enumerate(sizes):
            cell = cells[i * v + j]
            assert np.array_equal(cell[:s, :s], views[j][i].permute(1, 2, 0).numpy()), (i, j)
            if s < w:
                assert (cell[:s, s:] == PAD_VALUE).all()


def test_show_draws_views_from_the_loader_and_the_command_line(tmp_path, capsys):
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "train"), num_samples=10, shard_size=4)
    views = [shardkit.View(24, count=2), shardkit.View(12, count=3)]
    batch = next(
        iter(shardkit.load(ds.url, batch_size=3, views=views, num_workers=0, seed=0, fields=["image", "label", "key"]))
    )
    grid = np.asarray(shardkit.show(batch, padding=0))
    assert grid.shape == (3 * (24 + CAPTION), 5 * 24, 3)
    for i in range(3):
        for j, v in enumerate(batch["image"]):
            s = v.shape[-1]
            cell = grid[i * (24 + CAPTION) : i * (24 + CAPTION) + s, j * 24 : j * 24 + s]
            assert np.array_equal(cell, v[i].permute(1, 2, 0).numpy())
    out = tmp_path / "v.png"
    assert main(["show", ds.url, "--n", "2", "--views", "24x2", "12x3", "--out", str(out)]) == 0
    assert "2 samples, 5 views each" in capsys.readouterr().out
    pad = 2
    assert Image.open(out).size == (5 * (24 + pad) + pad, 2 * (24 + CAPTION + pad) + pad)
    for bad in (["--views", "24x"], ["--views", "0x2"], ["--views", "24", "--preset", "eval"]):
        with pytest.raises(SystemExit) as e:
            main(["show", ds.url, *bad, "--out", str(out)])
        assert e.value.code != 0, bad


def test_show_of_a_selection_draws_only_its_samples(tmp_path, capsys):
    from tests.support.living import write_living

    split = write_living(str(tmp_path / "train"), 12, shard_size=5, index=True)
    sel = str(tmp_path / "sel")
    shardkit.select(split.url, out=sel, classes=["dog"])
    opened = shardkit.open(sel)
    assert len(opened) == 4
    assert {opened[i]["key"] for i in range(len(opened))} == {r["key"] for r in split.rows if r["class"] == "dog"}
    out = tmp_path / "s.png"
    assert main(["show", sel, "--n", "16", "--out", str(out)]) == 0
    assert "(4 samples)" in capsys.readouterr().out
    assert main(["show", sel, "--n", "4", "--views", "16x2", "--out", str(out)]) == 0
    assert "4 samples, 2 views each" in capsys.readouterr().out
    assert os.path.getsize(out) > 0
