"""GpuAugment's geometric ops move boxes, masks and keypoints with the pixels: the scenes oracle.

Demo scenes are solid rectangles, one colour per class, so the augmented image itself says where every object
is. Over generated seeds, sizes and op lists (every geometric op the pipeline has, fused runs, runs split by a
pixel op, rotations after crops, clip_intermediate on and off), on CPU tensors: every box of class c holds
colour-c pixels (for rotations and shears only the unclipped ones: their enclosing box is looser), no colour-c
region lies outside all class-c boxes, the mask agrees with the colours, keypoints sit on their rectangle's
edge in the right slot (``tests/support/target_geometry.py::check_scene``).
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardkit.augment import (
    CenterCrop,
    GpuAugment,
    HorizontalFlip,
    Normalize,
    RandomAffine,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    VerticalFlip,
)
from shardkit.demo.scenes import FLIP_PAIRS
from tests.support.target_geometry import FILL, check_scene, scene_batch

SETTINGS = settings(
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,
    deadline=None,
    max_examples=25,
    suppress_health_check=list(HealthCheck),
)
NOOP = Normalize((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # a pixel op that changes nothing: splits a geometric run


def op_lists(out: int):
    """Strategies of op lists; each element: (op, loose) where loose = the op rotates or shears."""
    geometric = st.sampled_from(
        [
            (HorizontalFlip(), False),
            (VerticalFlip(), False),
            (HorizontalFlip(p=1.0), False),
            (RandomRotation(30, fill=FILL), True),
            (RandomAffine(0, (0.2, 0.2), (0.7, 1.3), fill=FILL), False),
            (RandomAffine(15, (0.1, 0.1), (0.8, 1.2), (-10, 10, -5, 5), fill=FILL), True),
            (RandomResizedCrop(out, scale=(0.25, 1.0)), False),
            (CenterCrop(out), False),
            (Resize(out), False),
            (Resize((out, out + 8)), False),
            (NOOP, False),
        ]
    )
    return st.lists(geometric, min_size=1, max_size=4)


@SETTINGS
@given(
    st.data(),
    st.integers(0, 10**6),
    st.integers(48, 96),
    st.integers(48, 96),
    st.booleans(),
)
def test_every_geometric_op_moves_boxes_masks_and_keypoints_with_the_pixels(data, seed, w, h, clip):
    out = data.draw(st.integers(max(24, min(w, h) // 2), min(w, h)))
    chosen = data.draw(op_lists(out))
    ops = [op for op, _ in chosen]
    loose = any(lz for _, lz in chosen)
    images, targets = scene_batch(seed, 4, (w, h))
    aug = GpuAugment(ops, seed=seed, clip_intermediate=clip, flip_pairs=FLIP_PAIRS, min_visible=0.0)
    params = aug.sample_params(4, (h, w), "cpu")
    x, moved, dropped = aug.apply_targets(images, params, targets)
    v = [False] * 4
    flips = [p["flip"] for op, p in zip(ops, params) if isinstance(op, VerticalFlip)]
    for f in flips:
        v = [a ^ bool(b) for a, b in zip(v, f)]
    assert moved.mask is not None and moved.keypoints is not None
    assert moved.mask.shape == (4, *x.shape[-2:])
    for i in range(4):
        fails = check_scene(
            x[i],
            moved.boxes[i],
            moved.labels[i],
            moved.count[i],
            moved.mask[i],
            moved.keypoints[i],
            loose=loose,
            vflip=v[i],
        )
        assert fails == [], (i, [type(o).__name__ for o in ops], fails)
    assert torch.equal(dropped, targets.count - moved.count)


@SETTINGS
@given(st.integers(0, 10**6), st.sampled_from([0.3, 0.7]))
def test_min_visible_drops_and_counts_partly_cropped_boxes(seed, min_visible):
    """A box is kept iff at least ``min_visible`` of its moved area shows; the drops are counted."""
    images, targets = scene_batch(seed, 6, (80, 64))
    aug = GpuAugment([RandomResizedCrop(32, scale=(0.1, 0.4))], seed=seed, min_visible=min_visible)
    params = aug.sample_params(6, (64, 80), "cpu")
    _, moved, dropped = aug.apply_targets(images, params, targets)
    p = params[0]
    for i in range(6):
        top, left, hh, ww = (float(p[k][i]) for k in ("top", "left", "height", "width"))
        kept = []
        for (x0, y0, x1, y1), c in zip(targets.boxes[i].tolist(), targets.labels[i].tolist()):
            if c < 0:
                continue
            vis = max(0.0, min(x1, left + ww) - max(x0, left)) * max(0.0, min(y1, top + hh) - max(y0, top))
            if vis > 0 and vis >= min_visible * (x1 - x0) * (y1 - y0) - 1e-3:
                kept.append(c)
        assert moved.labels[i, : len(kept)].tolist() == kept and int(moved.count[i]) == len(kept)
        assert int(dropped[i]) == int(targets.count[i]) - len(kept)
