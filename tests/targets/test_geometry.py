"""The one geometry rule of every target (``shardkit.targets.geometry``) against deliberately simple references.

Generated affine maps (rotation, scale, shear, mirror, translation) and padded batches of boxes and keypoints;
the reference (``tests/support/target_geometry.py``) inverts each map with ``np.linalg.inv`` in float64, moves the four
corners of each box in a Python loop, clips, drops below ``min_visible``, keeps survivors in order, swaps flip
pairs exactly when the map mirrors and hides keypoints outside; masks are resampled pixel by pixel (nearest,
ties up, 255 outside). The convention check ties the rule to the pixels: a crop + resize + flip map of
``shardkit.augment.affine`` moves a scene's boxes onto what ``warp`` draws.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from shardkit.augment.affine import compose, flip_matrix, resized_crop_matrix, warp
from shardkit.targets.geometry import MIN_VISIBLE, Targets, move, outside, warp_masks
from tests.support.target_geometry import check_scene, ref_move_sample, ref_warp_mask, scene_batch

SETTINGS = settings(
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,
    deadline=None,
    max_examples=40,
    suppress_health_check=list(HealthCheck),
)


def inverse_map(angle: float, sx: float, sy: float, shear: float, mirror: bool, tx: float, ty: float) -> np.ndarray:
    """A 3x3 inverse map (output -> input), float64, built from a forward map's parts."""
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    fw = np.array([[c, -s, 0.0], [s, c, 0.0], [0, 0, 1]]) @ np.array([[sx, shear * sx, 0], [0, sy, 0], [0, 0, 1]])
    if mirror:
        fw = fw @ np.diag([-1.0, 1.0, 1.0])
    fw[:2, 2] = [tx, ty]
    return np.linalg.inv(fw)


maps = st.builds(
    inverse_map,
    st.floats(-180, 180),
    st.floats(0.4, 2.5),
    st.floats(0.4, 2.5),
    st.floats(-0.5, 0.5),
    st.booleans(),
    st.floats(-20, 40),
    st.floats(-20, 40),
)


@st.composite
def batches(draw):
    """(boxes [N, M, 4], labels, count, keypoints [N, M, 2, 3], in_size, out_size, maps [N, 3, 3])."""
    n, m = draw(st.integers(1, 3)), draw(st.integers(0, 5))
    ih, iw = draw(st.integers(6, 40)), draw(st.integers(6, 40))
    oh, ow = draw(st.integers(6, 40)), draw(st.integers(6, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    count = rng.integers(0, m + 1, n)
    x = np.sort(rng.uniform(-5, iw + 5, (n, m, 2)), -1)
    y = np.sort(rng.uniform(-5, ih + 5, (n, m, 2)), -1)
    boxes = np.stack([x[..., 0], y[..., 0], x[..., 1] + 0.5, y[..., 1] + 0.5], -1).astype(np.float32)
    labels = rng.integers(1, 7, (n, m))
    kp = np.concatenate([rng.uniform(-3, 43, (n, m, 2, 2)), rng.integers(0, 3, (n, m, 2, 1))], -1).astype(np.float32)
    live = np.arange(m)[None] < count[:, None]
    boxes, labels, kp = boxes * live[..., None], np.where(live, labels, -1), kp * live[..., None, None]
    inv = np.stack([draw(maps) for _ in range(n)])
    return boxes, labels, count, kp, (ih, iw), (oh, ow), inv


def as_targets(boxes, labels, count, kp, mask=None) -> Targets:
    t = torch.from_numpy
    return Targets(t(boxes), t(labels), t(count), torch.zeros(labels.shape, dtype=torch.bool), t(kp), mask)


@SETTINGS
@given(batches(), st.sampled_from([0.0, 0.25, 0.6]), st.booleans())
def test_move_matches_the_per_box_reference(batch, min_visible, pairs):
    boxes, labels, count, kp, _, out_size, inv = batch
    flip_pairs = [(0, 1)] if pairs else []
    got, dropped = move(
        as_targets(boxes, labels, count, kp),
        torch.from_numpy(inv).float(),
        out_size,
        min_visible=min_visible,
        flip_pairs=flip_pairs,
    )
    m = boxes.shape[1]
    for i in range(len(count)):
        rb, rl, rk, margin = ref_move_sample(
            boxes[i], labels[i], count[i], kp[i], inv[i].astype(np.float32), out_size, min_visible, flip_pairs
        )
        assume(margin > 1e-3)  # float32 may decide a box exactly at its threshold either way
        c = len(rb)
        assert int(got.count[i]) == c and int(dropped[i]) == int(count[i]) - c
        np.testing.assert_allclose(got.boxes[i, :c].numpy(), rb, atol=2e-3, rtol=1e-4)
        assert got.labels[i, :c].tolist() == rl.tolist()  # survivors first, in their order
        np.testing.assert_allclose(got.keypoints[i, :c].numpy(), rk, atol=2e-3, rtol=1e-4)
        # padding stays padding: boxes 0, labels -1, keypoints 0, not crowd
        assert (got.labels[i, c:] == -1).all() and not got.boxes[i, c:].any() and not got.keypoints[i, c:].any()
        assert not got.crowd[i, c:].any() and got.boxes.shape[1] == m


@SETTINGS
@given(batches(), st.integers(0, 2**31))
def test_warp_masks_matches_the_per_pixel_reference(batch, seed):
    _, _, count, _, in_size, out_size, inv = batch
    rng = np.random.default_rng(seed)
    masks = rng.integers(0, 7, (len(count), *in_size)).astype(np.uint8)
    got = warp_masks(torch.from_numpy(masks), torch.from_numpy(inv).float(), out_size).numpy()
    off = outside(torch.from_numpy(inv).float(), in_size, out_size).numpy()
    for i in range(len(count)):
        ref, tie = ref_warp_mask(masks[i], inv[i].astype(np.float32), out_size)
        assert (got[i] == ref)[~tie].all()
        assert (off[i] == (ref == 255))[~tie].all()


@example(shape=(3, 5, 7))
@SETTINGS
@given(st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9)))
def test_mask_ties_round_up_and_a_shared_map_broadcasts(shape):
    """A 2x reduction samples exactly between two pixels: the tie goes to the lower-right one (round half up,
    not half to even); one ``[1, 3, 3]`` map serves the whole batch; an empty batch gives an empty one."""
    n, oh, ow = shape
    masks = torch.arange(n * 2 * oh * 2 * ow).reshape(n, 2 * oh, 2 * ow).remainder(251).to(torch.uint8)
    inv = torch.tensor([[[2.0, 0.0, 0.5], [0.0, 2.0, 0.5], [0.0, 0.0, 1.0]]])
    got = warp_masks(masks, inv, (oh, ow))
    assert torch.equal(got, masks[:, 1::2, 1::2])
    assert warp_masks(masks[:0], inv, (oh, ow)).shape == (0, oh, ow)


def test_a_mirroring_map_swaps_pairs_exactly_when_it_mirrors():
    kp = torch.tensor([[[[2.0, 3.0, 2.0], [8.0, 3.0, 1.0], [5.0, 9.0, 2.0]]]]).repeat(2, 1, 1, 1)
    t = Targets(
        torch.tensor([[[1.0, 1.0, 9.0, 10.0]]]).repeat(2, 1, 1),
        torch.ones(2, 1, dtype=torch.long),
        torch.ones(2, dtype=torch.long),
        torch.zeros(2, 1, dtype=torch.bool),
        kp,
    )
    flip = torch.tensor([[[-1.0, 0, 9], [0, 1, 0], [0, 0, 1]]])  # mirrors a 10-wide image
    inv = torch.cat([torch.eye(3)[None], flip])
    got, _ = move(t, inv, (12, 10), flip_pairs=[(0, 1)])
    assert got.keypoints[0].tolist() == kp[0].tolist()  # not mirrored: untouched
    assert got.keypoints[1, 0].tolist() == [[2.0, 3.0, 1.0], [8.0, 3.0, 2.0], [5.0, 9.0, 2.0]]
    assert MIN_VISIBLE == 0.1  # the loader's and GpuAugment's default (move itself keeps any visible box)


@SETTINGS
@given(
    st.integers(0, 10**6),
    st.integers(40, 90),
    st.integers(40, 90),
    st.integers(24, 60),
    st.floats(0.3, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.booleans(),
)
def test_augment_maps_move_scene_boxes_onto_the_warped_pixels(seed, w, h, out, frac, fx, fy, flip):
    """The convention check: ``augment.affine``'s crop + resize + flip map, the one ``warp`` samples the image
    through, moves the scene's boxes, keypoints and mask onto the pixels ``warp`` draws, and tightly so."""
    images, targets = scene_batch(seed, 1, (w, h))
    ch, cw = max(8, round(h * frac)), max(8, round(w * frac))
    top, left = torch.tensor([fy * (h - ch)]).floor(), torch.tensor([fx * (w - cw)]).floor()
    crop = resized_crop_matrix(top, left, torch.tensor([float(ch)]), torch.tensor([float(cw)]), (out, out))
    flp = flip_matrix(torch.tensor([flip]), (out, out), horizontal=True)
    x = warp(images, [crop, flp], [(h, w), (out, out), (out, out)], [], scale=1 / 255)
    moved, _ = move(targets, compose(crop, flp), (out, out), flip_pairs=[(0, 1)])
    fails = check_scene(
        x[0], moved.boxes[0], moved.labels[0], moved.count[0], moved.mask[0], moved.keypoints[0], vflip=False
    )
    assert fails == [], fails
    # tight: each box's edges sit within one source pixel (in output pixels) of its colour's extent
    s = max(out / ch, out / cw)
    img = (x[0].numpy().transpose(1, 2, 0) * 255).astype(np.float64)
    from tests.support.target_geometry import classify

    _, near = classify(img)
    ys, xs = np.mgrid[0:out, 0:out] + 0.5
    for (x0, y0, x1, y1), c in zip(moved.boxes[0, : int(moved.count[0])].tolist(), moved.labels[0].tolist()):
        sel = (near == c) & (xs > x0 - 1) & (xs < x1 + 1) & (ys > y0 - 1) & (ys < y1 + 1)
        if x1 - x0 < 2 * s + 2 or y1 - y0 < 2 * s + 2:
            continue
        ex = (xs[sel].min() - 0.5, ys[sel].min() - 0.5, xs[sel].max() + 0.5, ys[sel].max() + 0.5)
        assert np.allclose(ex, (x0, y0, x1, y1), atol=s + 1), (ex, (x0, y0, x1, y1))
