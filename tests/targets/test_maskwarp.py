"""shardkit.targets.maskwarp: the axis-aligned fast path gives exactly warp_masks's pixels (Hypothesis over crops,
resizes, flips, padding windows and mask sizes), and refuses maps that rotate. Mutants:
``tools/mutant_catalogue/targets_torchvision.py`` (``maskwarp-*``)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.augment.geometry import compose, flip_matrix, resized_crop_matrix, rotation_matrix
from shardkit.targets.geometry import warp_masks
from shardkit.targets.maskwarp import axis_aligned, warp_mask_axis_aligned


@st.composite
def crops(draw):
    h, w = draw(st.integers(1, 50)), draw(st.integers(1, 50))
    oh, ow = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    # a crop box that may reach past the image (the detect preset's padding window), at fractional positions
    top = draw(st.floats(-0.5 * h, h, allow_nan=False, width=32))
    left = draw(st.floats(-0.5 * w, w, allow_nan=False, width=32))
    ch = draw(st.floats(0.25, 2.0 * h, allow_nan=False, width=32))
    cw = draw(st.floats(0.25, 2.0 * w, allow_nan=False, width=32))
    flip = draw(st.sampled_from([None, "h", "v"]))
    seed = draw(st.integers(0, 2**31 - 1))
    return (h, w), (oh, ow), (top, left, ch, cw), flip, seed


@settings(derandomize=True, deadline=None, max_examples=200)
@given(crops())
def test_the_fast_path_is_warp_masks_exactly(case):
    (h, w), out, (top, left, ch, cw), flip, seed = case
    mask = torch.randint(0, 256, (h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))

    def t(v):
        return torch.tensor([v], dtype=torch.float32)

    inv = resized_crop_matrix(t(top), t(left), t(ch), t(cw), out)
    if flip:
        inv = compose(inv, flip_matrix(torch.tensor([True]), out, horizontal=flip == "h"))
    assert axis_aligned(inv)
    assert torch.equal(warp_mask_axis_aligned(mask, inv[0], out), warp_masks(mask[None], inv, out)[0])


def test_a_rotating_map_is_refused():
    inv = rotation_matrix(torch.tensor([30.0]), (8, 8))[0]
    assert not axis_aligned(inv)
    with pytest.raises(ValueError, match="warp_masks"):
        warp_mask_axis_aligned(torch.zeros(8, 8, dtype=torch.uint8), inv, (8, 8))
