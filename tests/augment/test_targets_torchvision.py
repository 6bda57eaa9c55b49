"""Second reference: torchvision.transforms.v2.functional on tv_tensors, fed the parameters GpuAugment drew.

Each geometric op alone, per sample: ``BoundingBoxes`` agree within 1 px (rotations: torchvision's enclosing box
of the rotated corners, clamped, like ours), ``KeyPoints`` within 0.01 px (torchvision's keypoints are pixel
centres, ours pixel edges: +-0.5; torchvision swaps no flip pairs, so none are given here; ops that turn or
scale within 0.75 px: torchvision turns and scales keypoints about other centres than its images (it scales
pixel-centre coordinates by the size ratio, its images with half-pixel centres), ours follow the images, as
the scenes oracle checks), the mask (nearest:
torchvision's NEAREST_EXACT for resizes, which its ``Mask`` kernels do not take, so the mask goes in as a plain
tensor) on at least 99% of the pixels, 97% of the inside ones for rotations and affines (their NEAREST).
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode

from shardkit.augment import (
    CenterCrop,
    GpuAugment,
    HorizontalFlip,
    RandomAffine,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    VerticalFlip,
)
from tests.support.target_geometry import scene_batch

SETTINGS = settings(
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,
    deadline=None,
    max_examples=12,
    suppress_health_check=list(HealthCheck),
)
NEAREST = InterpolationMode.NEAREST
EXACT = InterpolationMode.NEAREST_EXACT  # half-pixel centres, as ours (torchvision's NEAREST floors)


def tv_apply(op, p: dict, i: int, boxes, kps, mask, size):
    """torchvision's functional op on sample ``i`` with the drawn parameters ``p``."""
    q = {k: v[i].item() for k, v in p.items()}
    if isinstance(op, (HorizontalFlip, VerticalFlip)):
        if not q["flip"]:
            return boxes, kps, mask
        fn = F.horizontal_flip if isinstance(op, HorizontalFlip) else F.vertical_flip
        return fn(boxes), fn(kps), fn(mask)
    if isinstance(op, RandomRotation):
        return tuple(F.rotate(t, q["angle"], interpolation=NEAREST) for t in (boxes, kps, mask))
    if isinstance(op, RandomAffine):
        kw = dict(
            angle=q["angle"],
            translate=[q["translate_x"], q["translate_y"]],
            scale=q["scale"],
            shear=[q["shear_x"], q["shear_y"]],
            interpolation=NEAREST,
        )
        return tuple(F.affine(t, **kw) for t in (boxes, kps, mask))
    if isinstance(op, RandomResizedCrop):
        args = (int(q["top"]), int(q["left"]), int(q["height"]), int(q["width"]), list(size))
        return tuple(F.resized_crop(t, *args, interpolation=EXACT) for t in (boxes, kps, mask))
    if isinstance(op, CenterCrop):
        return tuple(F.center_crop(t, list(size)) for t in (boxes, kps, mask))
    assert isinstance(op, Resize)
    return tuple(F.resize(t, list(size), interpolation=EXACT, antialias=False) for t in (boxes, kps, mask))


OPS = [
    HorizontalFlip(),
    VerticalFlip(),
    RandomRotation(40),
    RandomAffine(20, (0.2, 0.2), (0.7, 1.3), (-10, 10, -5, 5)),
    RandomResizedCrop(40, scale=(0.2, 1.0)),
    CenterCrop(40),
    Resize((40, 56)),
]


@pytest.mark.parametrize("op", OPS, ids=lambda o: type(o).__name__)
@SETTINGS
@given(seed=st.integers(0, 10**6))
def test_each_geometric_op_agrees_with_torchvision_on_tv_tensors(op, seed):
    images, targets = scene_batch(seed, 4, (72, 56))
    aug = GpuAugment([op], seed=seed, min_visible=0.0)
    params = aug.sample_params(4, (56, 72), "cpu")
    _, moved, _ = aug.apply_targets(images, params, targets)
    out_size = aug.output_size((56, 72))
    for i in range(4):
        n = int(targets.count[i])
        boxes = tv_tensors.BoundingBoxes(targets.boxes[i, :n], format="XYXY", canvas_size=(56, 72))
        kps = tv_tensors.KeyPoints(targets.keypoints[i, :n, :, :2] - 0.5, canvas_size=(56, 72))
        mask = targets.mask[i][None]  # a plain tensor: torchvision's Mask kernels ignore NEAREST_EXACT
        tb, tk, tm = tv_apply(op, params[0], i, boxes, kps, mask, out_size)
        # torchvision keeps every box (clamped, maybe degenerate); ours drops those with nothing left
        alive = ((tb[:, 2] - tb[:, 0]) > 1e-3) & ((tb[:, 3] - tb[:, 1]) > 1e-3)
        m = int(moved.count[i])
        if m == n:
            torch.testing.assert_close(moved.boxes[i, :m], tb.as_subclass(torch.Tensor), atol=1.0, rtol=0)
            inside = moved.keypoints[i, :m, :, 2] > 0
            got = moved.keypoints[i, :m, :, :2] - 0.5
            tol = 0.01 if isinstance(op, (HorizontalFlip, VerticalFlip, CenterCrop)) else 0.75
            torch.testing.assert_close(got[inside], tk.as_subclass(torch.Tensor)[inside], atol=tol, rtol=0)
        else:  # the dropped ones are exactly those torchvision squashed to nothing (within 1 px)
            torch.testing.assert_close(moved.boxes[i, :m], tb.as_subclass(torch.Tensor)[alive][:m], atol=1.0, rtol=0)
        agree = (moved.mask[i] == tm[0]).float().mean().item()
        if not isinstance(op, (RandomRotation, RandomAffine)):  # torchvision fills 0, not 255: compare inside only
            assert agree >= 0.99, agree
        else:
            valid = moved.mask[i] != 255
            assert (moved.mask[i] == tm[0])[valid].float().mean().item() >= 0.97
