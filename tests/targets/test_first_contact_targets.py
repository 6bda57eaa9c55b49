"""Targets as a new user meets them: the tv_tensors round trip of whole batches (keys, captions, instance maps of
samples without boxes), ``targets_of``'s counts without ``box_count``, the ``detect`` preset's independent offsets,
and one ``min_visible`` default that the guides quote."""

from __future__ import annotations

import inspect
import re

import numpy as np
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.augment import GpuAugment
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.cropgeometry import sample_uniforms
from shardkit.loader.decode.worker import CropDecoder
from shardkit.targets import as_tv_tensors, from_tv_tensors, targets_of
from shardkit.targets.geometry import MIN_VISIBLE
from tests.support.repo import ROOT

FAST = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=30)


def _batch(seed: int, b: int, h: int, w: int, m: int, *, boxes: bool, instances: bool, extras: bool, zero: bool):
    """A padded dict batch like the loader's; ``zero``: sample 0 has no boxes (its instance map all -1)."""
    g = torch.Generator().manual_seed(seed)
    out: dict = {"image": torch.randint(0, 256, (b, 3, h, w), dtype=torch.uint8, generator=g)}
    if boxes:
        counts = torch.randint(0, m + 1, (b,), generator=g)
        if zero:
            counts[0] = 0
        live = torch.arange(m)[None] < counts[:, None]
        xy = torch.rand((b, m, 2), generator=g) * torch.tensor([w, h])
        wh = torch.rand((b, m, 2), generator=g) * torch.tensor([w, h]) + 1
        out["boxes"] = torch.cat([xy, xy + wh], -1) * live[..., None]
        out["box_labels"] = torch.where(live, torch.randint(0, 7, (b, m), generator=g), torch.full((b, m), -1))
        out["box_count"] = counts
        if instances:  # each pixel one of its sample's rows or -1 (no overlaps, as the loader's)
            ids = torch.randint(-1, max(1, m), (b, h, w), generator=g)
            out["instances"] = torch.where(ids < counts[:, None, None], ids, -1).to(torch.int16)
    if extras:
        out["key"] = [f"{seed % 3}/{i:08d}" for i in range(b)]
        out["text"] = [f"a caption {i}" for i in range(b)]
        out["meta"] = [{"i": i} for i in range(b)]
        out["label"] = torch.randint(0, 5, (b,), generator=g)
        out["labels"] = torch.randint(0, 2, (b, 4), generator=g).to(torch.uint8)
        out["target"] = torch.rand((b, 2), generator=g)
        out["source"] = torch.randint(0, 3, (b,), generator=g)
    return out


@FAST
@given(
    seed=st.integers(0, 2**31 - 1),
    b=st.integers(1, 4),
    h=st.integers(2, 12),
    w=st.integers(2, 12),
    m=st.integers(0, 4),
    boxes=st.booleans(),
    instances=st.booleans(),
    extras=st.booleans(),
    zero=st.booleans(),
)
@example(seed=1, b=2, h=4, w=5, m=2, boxes=True, instances=False, extras=True, zero=False)
@example(seed=2, b=3, h=5, w=4, m=3, boxes=True, instances=True, extras=False, zero=True)
def test_tv_tensors_round_trip_is_the_whole_batch(seed, b, h, w, m, boxes, instances, extras, zero):
    """``from_tv_tensors(as_tv_tensors(batch))`` equals ``batch``, field by field: keys, captions, meta, class rows,
    and an instance map of -1 for a sample without boxes."""
    batch = _batch(seed, b, h, w, m, boxes=boxes, instances=instances, extras=extras, zero=zero)
    if not boxes:
        batch["mask"] = torch.randint(0, 4, (b, h, w), dtype=torch.uint8)  # a target, so the batch converts
    back = from_tv_tensors(as_tv_tensors(batch), width=m if boxes else None)
    assert sorted(back) == sorted(batch)
    for key, value in batch.items():
        if isinstance(value, list):
            assert back[key] == value, key
        else:
            assert back[key].dtype == value.dtype and torch.equal(back[key], value), key
    if boxes and instances and zero:
        assert bool((back["instances"][0] == -1).all()), "a sample without boxes has no object pixels"


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), m=st.integers(0, 5))
@example(seed=3, b=2, m=3)
def test_targets_of_counts_every_labelled_row_when_box_count_is_not_asked(seed, b, m):
    """Without ``box_count`` the count is the rows whose label is not -1: class 0 is an object too."""
    batch = _batch(seed, b, 4, 4, m, boxes=True, instances=False, extras=False, zero=False)
    batch["box_labels"][:, :1] = torch.where(batch["box_labels"][:, :1] >= 0, 0, -1)  # class 0 in every first row
    want = [sum(1 for v in row if v != -1) for row in batch["box_labels"].tolist()]  # the padding rows say -1
    del batch["box_count"]
    assert targets_of(batch).count.tolist() == want


# --- the detect preset: scale, left and top each from their own uniform ------------------------------------------


def _reference_box(w: int, h: int, u: np.ndarray, size: int, scale: tuple[float, float]) -> list[float]:
    """One sample's window, plain Python: longer side ``s * size``; left from ``u[1]``, top from ``u[2]``."""
    s = scale[0] + (scale[1] - scale[0]) * float(u[0])
    f = s * size / max(w, h)
    sw, sh = max(1.0, float(np.round(w * f))), max(1.0, float(np.round(h * f)))

    def offset(scaled: float, v: float) -> float:
        return float(np.floor(v * (scaled - size + 1))) if scaled >= size else -float(np.floor(v * (size - scaled + 1)))

    left, top = offset(sw, float(u[1])), offset(sh, float(u[2]))
    fx, fy = sw / w, sh / h
    return [left / fx, top / fy, (left + size) / fx, (top + size) / fy]


@FAST
@given(
    wh=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 900)), min_size=1, max_size=6),
    size=st.integers(4, 256),
    seed=st.integers(0, 999),
    epoch=st.integers(0, 3),
)
@example(wh=[(640, 480), (500, 500), (300, 700)], size=128, seed=0, epoch=0)
def test_detect_offsets_are_drawn_per_sample_and_per_axis(wh, size, seed, epoch):
    """Each sample's window against a reference that draws its own uniforms: left and top are independent (a top
    that reused the left's number would put every crop on a diagonal, and the targets would follow it unseen)."""
    dec = CropDecoder(ImageConfig(preset="detect", size=size), seed)
    gids = np.arange(len(wh)) * 5 + 1
    crops = dec.geometry(np.array(wh), epoch, gids)
    for k, (w, h) in enumerate(wh):
        u = sample_uniforms(seed, epoch, gids[k : k + 1], 4)[0]
        assert np.allclose(crops.boxes[k], _reference_box(w, h, u, size, dec.cfg.scale), rtol=1e-12, atol=1e-9)


def test_detect_offsets_fill_the_square_not_a_diagonal():
    """Over many samples of one large image the (left, top) of the crops are uncorrelated."""
    dec = CropDecoder(ImageConfig(preset="detect", size=64, scale=(2.0, 2.0)), 7)
    crops = dec.geometry(np.tile([[400, 400]], (2000, 1)), 0, np.arange(2000))
    corr = np.corrcoef(crops.boxes[:, 0], crops.boxes[:, 1])[0, 1]
    assert abs(corr) < 0.1, corr


# --- one min_visible default, quoted by the guides ----------------------------------------------------------------


def test_min_visible_default_is_one_value_that_the_guides_quote():
    default = inspect.signature(GpuAugment).parameters["min_visible"].default
    assert default == MIN_VISIBLE
    for guide in ("docs/guides/gpu.md", "docs/guides/load.md"):
        text = open(f"{ROOT}/{guide}").read()
        quoted = re.findall(r"min_visible[^\n]*?\n?[^\n]*?\(default `?([0-9.]+)`?", text)
        assert quoted and all(float(q) == default for q in quoted), (guide, quoted)
