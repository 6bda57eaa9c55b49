"""``shardkit.targets.crops``: the loader's crop maps are the GPU path's matrices, and the fast mask warp of one
axis-aligned map is :func:`shardkit.targets.geometry.warp_masks` bit for bit (the one rule, the oracle here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.augment.affine import flip_matrix, resized_crop_matrix
from shardkit.targets.crops import crop_maps, warp_crop_mask
from shardkit.targets.geometry import warp_masks

coord = st.floats(-300, 300, allow_nan=False, width=32)


@st.composite
def boxes(draw):
    x0, y0 = draw(coord), draw(coord)
    return (x0, y0, x0 + draw(st.floats(0.5, 400, width=32)), y0 + draw(st.floats(0.5, 400, width=32)))


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=100)
@given(box=boxes(), flip=st.booleans(), oh=st.integers(1, 64), ow=st.integers(1, 64))
def test_crop_maps_are_the_augment_matrices(box, flip, oh, ow):
    m = crop_maps(np.array([box]), np.array([flip]), (oh, ow))
    t = torch.tensor
    want = resized_crop_matrix(
        t([box[1]], dtype=torch.float64),
        t([box[0]], dtype=torch.float64),
        t([box[3] - box[1]], dtype=torch.float64),
        t([box[2] - box[0]], dtype=torch.float64),
        (oh, ow),
    ) @ flip_matrix(t([flip]), (oh, ow), horizontal=True).to(torch.float64)
    assert torch.allclose(m, want, rtol=1e-9, atol=1e-9)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=150)
@example(box=(0.0, 0.0, 64.0, 32.0), flip=False, hw=(20, 30), out=(16, 32), seed=1)  # every sample a tie
@example(box=(3.0, -5.0, 67.0, 27.0), flip=True, hw=(40, 40), out=(16, 32), seed=2)
@example(  # a column one float32 rounding from the next: the constant must be added as sampling_grid adds it
    box=(429.09617344821083, 144.1941794188025, 491.3339097985328, 185.11185849945625),
    flip=True,
    hw=(419, 496),
    out=(69, 69),
    seed=0,
)
@given(
    box=boxes(),
    flip=st.booleans(),
    hw=st.tuples(st.integers(1, 600), st.integers(1, 600)),
    out=st.tuples(st.integers(1, 48), st.integers(1, 48)),
    seed=st.integers(0, 99),
)
def test_the_fast_mask_warp_is_warp_masks(box, flip, hw, out, seed):
    mask = torch.from_numpy(np.random.default_rng(seed).integers(0, 256, hw, dtype=np.uint8))
    inv = crop_maps(np.array([box]), np.array([flip]), out)
    assert torch.equal(warp_crop_mask(mask, inv[0], out), warp_masks(mask[None], inv, out)[0])


def test_the_fast_mask_warp_refuses_a_rotation():
    inv = torch.eye(3, dtype=torch.float64)
    inv[0, 1] = 0.1
    with pytest.raises(ValueError, match="warp_masks"):
        warp_crop_mask(torch.zeros((4, 4), dtype=torch.uint8), inv, (4, 4))
