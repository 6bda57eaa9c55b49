"""shardkit.targets.torchvision: dict batches as torchvision's detection models and ``transforms.v2`` take them.

Oracles: a per-sample reference loop (rows whose label is >= 0, not ``box_count``), an exact round trip
through ``tv_tensors``, torchvision's own v2 kernels against shardkit's one geometry rule (``move``,
``warp_masks``) on the same steps, colour scenes through a v2 pipeline, and a torchvision detector that
trains on the output. The mutant gate (``tests/mutants/targets_torchvision.py``) plants the bugs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from shardkit.augment.affine import affine_matrix, compose, flip_matrix, resized_crop_matrix
from shardkit.demo.scenes import COLOURS, scene
from shardkit.targets import as_tv_tensors, from_tv_tensors, move, targets_of, to_torchvision
from shardkit.targets.geometry import move_points, warp_masks

FAST = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=25)


@st.composite
def batches(draw, keypoints=None, mask=None, boxes=True):
    """A padded dict batch like the loader's: counts <= M, padding rows 0 with label -1."""
    b = draw(st.integers(1, 4))
    h, w = draw(st.integers(6, 40)), draw(st.integers(6, 40))
    m = draw(st.integers(0, 5))
    k = draw(st.sampled_from([0, 2, 3])) if keypoints is None else keypoints
    with_mask = draw(st.booleans()) if mask is None else mask
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    out = {"image": torch.randint(0, 256, (b, 3, h, w), dtype=torch.uint8, generator=g)}
    if boxes:
        counts = torch.randint(0, m + 1, (b,), generator=g)
        x0 = torch.randint(-3, w, (b, m), generator=g).float()
        y0 = torch.randint(-3, h, (b, m), generator=g).float()
        bw = torch.randint(1, w + 1, (b, m), generator=g).float() + torch.rand((b, m), generator=g)
        bh = torch.randint(1, h + 1, (b, m), generator=g).float() + torch.rand((b, m), generator=g)
        live = torch.arange(m)[None] < counts[:, None]
        bx = torch.stack([x0, y0, x0 + bw, y0 + bh], -1) * live[..., None]
        labels = torch.where(live, torch.randint(1, 7, (b, m), generator=g), torch.full((b, m), -1))
        out.update(boxes=bx, box_labels=labels, box_count=counts)
        if k:
            kp = torch.rand((b, m, k, 3), generator=g) * torch.tensor([w, h, 0.0])
            kp[..., 2] = torch.randint(0, 3, (b, m, k), generator=g).float()
            out["keypoints"] = kp * live[..., None, None]
    if with_mask:
        out["mask"] = torch.randint(0, 8, (b, h, w), dtype=torch.uint8, generator=g)
        out["mask"][torch.rand((b, h, w), generator=g) < 0.1] = 255
    return out


# ----------------------------------------------------------------------------- to_torchvision


@FAST
@given(batches())
def test_to_torchvision_is_each_samples_objects_without_padding(batch):
    images, targets = to_torchvision(batch)
    assert len(images) == len(targets) == batch["image"].shape[0]
    for i, (img, t) in enumerate(zip(images, targets)):
        # reference: the image's bytes / 255, one pixel at a time in numpy
        ref = batch["image"][i].numpy().astype(np.float64) / 255.0
        assert img.dtype == torch.float32 and tuple(img.shape) == ref.shape
        np.testing.assert_allclose(img.numpy(), ref, atol=1e-6)
        if "boxes" in batch:
            rows = [j for j in range(batch["box_labels"].shape[1]) if int(batch["box_labels"][i, j]) >= 0]
            assert t["boxes"].dtype == torch.float32 and t["labels"].dtype == torch.int64
            assert t["boxes"].tolist() == [batch["boxes"][i, j].tolist() for j in rows]
            assert t["labels"].tolist() == [int(batch["box_labels"][i, j]) for j in rows]
            if "keypoints" in batch:
                assert t["keypoints"].tolist() == [batch["keypoints"][i, j].tolist() for j in rows]
            else:
                assert "keypoints" not in t
        if "mask" in batch:
            assert torch.equal(t["mask"], batch["mask"][i])
        else:
            assert "mask" not in t
        assert "masks" not in t  # a semantic mask is never passed off as instance masks


def test_float_images_pass_as_they_are():
    batch = {
        "image": torch.rand(2, 3, 5, 7),
        "boxes": torch.zeros(2, 1, 4),
        "box_labels": torch.tensor([[-1], [-1]]),
    }
    images, targets = to_torchvision(batch)
    assert all(torch.equal(a, b) for a, b in zip(images, batch["image"]))
    assert [len(t["boxes"]) for t in targets] == [0, 0]
    assert [tuple(t["boxes"].shape) for t in targets] == [(0, 4), (0, 4)]


def test_a_mask_only_batch_gives_empty_boxes_and_the_mask():
    batch = {"image": torch.zeros(2, 3, 4, 4, dtype=torch.uint8), "mask": torch.ones(2, 4, 4, dtype=torch.uint8)}
    _, targets = to_torchvision(batch)
    assert [tuple(t["boxes"].shape) for t in targets] == [(0, 4), (0, 4)]
    assert all(torch.equal(t["mask"], batch["mask"][0]) for t in targets)


@pytest.mark.parametrize(
    ("batch", "words"),
    [
        ({"boxes": torch.zeros(1, 0, 4)}, "'image'"),
        ({"image": torch.zeros(1, 3, 4, 4, dtype=torch.uint8)}, "no targets"),
        ({"image": torch.zeros(1, 3, 4, 4, dtype=torch.uint8), "boxes": torch.zeros(1, 0, 4)}, "box_labels"),
        ({"image": [torch.zeros(1, 3, 4, 4)], "mask": torch.zeros(1, 4, 4)}, "views"),
    ],
)
def test_bad_batches_are_one_line_errors(batch, words):
    for fn in (to_torchvision, as_tv_tensors):
        with pytest.raises(ValueError, match=words) as e:
            fn(batch)
        assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- tv_tensors, round trip


@FAST
@given(batches())
def test_tv_tensors_round_trip_exactly(batch):
    samples = as_tv_tensors(batch)
    h, w = batch["image"].shape[-2:]
    for i, s in enumerate(samples):
        assert isinstance(s["image"], tv_tensors.Image)
        if "boxes" in batch:
            assert isinstance(s["boxes"], tv_tensors.BoundingBoxes)
            assert s["boxes"].format == tv_tensors.BoundingBoxFormat.XYXY
            assert tuple(s["boxes"].canvas_size) == (h, w)
            assert len(s["boxes"]) == len(s["labels"]) == int(batch["box_count"][i])
        if "keypoints" in batch:
            assert isinstance(s["keypoints"], tv_tensors.KeyPoints) and tuple(s["keypoints"].canvas_size) == (h, w)
        if "mask" in batch:
            assert isinstance(s["mask"], tv_tensors.Mask)
    back = from_tv_tensors(samples, width=batch["boxes"].shape[1] if "boxes" in batch else None)
    assert sorted(back) == sorted(batch)
    for key, value in batch.items():
        assert back[key].dtype == value.dtype, key
        assert torch.equal(back[key], value), key


def test_from_tv_tensors_refuses_mixed_sizes_and_wrong_canvases():
    a = {"image": tv_tensors.Image(torch.zeros(3, 4, 5, dtype=torch.uint8))}
    b = {"image": tv_tensors.Image(torch.zeros(3, 5, 4, dtype=torch.uint8))}
    with pytest.raises(ValueError, match="sample 1 is"):
        from_tv_tensors([a, b])
    c = dict(a, boxes=tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(5, 4)))
    with pytest.raises(ValueError, match="canvas_size"):
        from_tv_tensors([c])


# ----------------------------------------------------------------------------- v2 kernels == shardkit's rule


def _each(sample, fn, *args, **kwargs):
    """A v2 functional applied to every tv_tensor of a sample (plain tensors such as labels pass as they are)."""
    return {k: fn(v, *args, **kwargs) if isinstance(v, tv_tensors.TVTensor) else v for k, v in sample.items()}


def _moved(batch, inv, out_size):
    """shardkit's one rule applied to the batch's targets."""
    t, _ = move(targets_of(batch), inv, out_size)
    return t


def _tv_boxes(sample):
    """v2's output boxes, clamped to the image (``ClampBoundingBoxes``), with positive area (v2 keeps
    degenerate rows; shardkit drops them)."""
    bx = F.clamp_bounding_boxes(sample["boxes"]).as_subclass(torch.Tensor)
    keep = (bx[:, 2] > bx[:, 0]) & (bx[:, 3] > bx[:, 1])
    return bx[keep], sample["labels"][keep]


def _same_boxes(batch, samples, moved, atol=1e-3):
    for i, s in enumerate(samples):
        bx, lab = _tv_boxes(s)
        n = int(moved.count[i])
        assert lab.tolist() == moved.labels[i, :n].tolist(), i
        torch.testing.assert_close(bx, moved.boxes[i, :n], atol=atol, rtol=1e-5)


@st.composite
def steps(draw):
    kind = draw(st.sampled_from(["hflip", "vflip", "crop", "resize", "affine"]))
    return kind, draw(st.integers(0, 2**31 - 1))


@FAST
@given(batches(keypoints=0, mask=True), steps())
def test_v2_kernels_move_boxes_and_masks_like_shardkits_rule(batch, step):
    kind, seed = step
    rng = np.random.default_rng(seed)
    n, _, h, w = batch["image"].shape
    samples = as_tv_tensors(batch)
    if kind == "hflip":
        out = [_each(s, F.horizontal_flip) for s in samples]
        inv, size = flip_matrix(torch.ones(n, dtype=torch.bool), (h, w), horizontal=True), (h, w)
    elif kind == "vflip":
        out = [_each(s, F.vertical_flip) for s in samples]
        inv, size = flip_matrix(torch.ones(n, dtype=torch.bool), (h, w), horizontal=False), (h, w)
    elif kind == "crop":
        top, left = int(rng.integers(0, h)), int(rng.integers(0, w))
        ch, cw = int(rng.integers(1, h - top + 1)), int(rng.integers(1, w - left + 1))
        out = [_each(s, F.crop, top, left, ch, cw) for s in samples]
        t = torch.full((n,), float(top)), torch.full((n,), float(left))
        inv, size = (
            resized_crop_matrix(t[0], t[1], torch.full((n,), float(ch)), torch.full((n,), float(cw)), (ch, cw)),
            (ch, cw),
        )
    elif kind == "resize":
        size = (int(rng.integers(3, 60)), int(rng.integers(3, 60)))
        out = [_each(s, F.resize, list(size), interpolation=v2.InterpolationMode.NEAREST_EXACT) for s in samples]
        z = torch.zeros(n)
        inv = resized_crop_matrix(z, z, torch.full((n,), float(h)), torch.full((n,), float(w)), size)
    else:
        angle, scale = float(rng.uniform(-40, 40)), float(rng.uniform(0.7, 1.3))
        tx, ty = int(rng.integers(-3, 4)), int(rng.integers(-3, 4))
        out = [_each(s, F.affine, angle=angle, translate=[tx, ty], scale=scale, shear=[0.0, 0.0]) for s in samples]

        def full(v):
            return torch.full((n,), float(v))

        inv = affine_matrix(full(angle), full(tx), full(ty), full(scale), full(0), full(0), (h, w))
        size = (h, w)
    moved = _moved(batch, inv, size)
    _same_boxes(batch, out, moved)
    if kind != "affine":  # v2's affine fills masks with 0, shardkit with 255 (no source pixel)
        got = torch.stack([s["mask"].as_subclass(torch.Tensor) for s in out])
        assert torch.equal(got, warp_masks(batch["mask"], inv, size))


@FAST
@given(batches(keypoints=2, mask=False), st.integers(0, 2**31 - 1))
def test_keypoints_follow_v2_crops_and_flips_with_the_documented_pixel(batch, seed):
    rng = np.random.default_rng(seed)
    n, _, h, w = batch["image"].shape
    top, left = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
    ch, cw = h - top, w - left
    out = [_each(_each(s, F.crop, top, left, ch, cw), F.horizontal_flip) for s in as_tv_tensors(batch)]
    crop = resized_crop_matrix(
        torch.full((n,), float(top)),
        torch.full((n,), float(left)),
        torch.full((n,), float(ch)),
        torch.full((n,), float(cw)),
        (ch, cw),
    )
    inv = compose(crop, flip_matrix(torch.ones(n, dtype=torch.bool), (ch, cw), horizontal=True))
    want = move_points(batch["keypoints"], inv)  # shardkit's rule for points (move() also drops hidden boxes)
    back = from_tv_tensors(out, width=batch["boxes"].shape[1])
    live = batch["box_labels"] >= 0
    assert torch.equal(back["box_labels"], batch["box_labels"])  # v2 keeps every row
    got, want = back["keypoints"][live], want[live]
    # the documented difference: v2's flip sends x to W - 1 - x, shardkit's (pixel edges) to W - x
    torch.testing.assert_close(got[..., 0], want[..., 0] - 1, atol=1e-4, rtol=0)
    torch.testing.assert_close(got[..., 1], want[..., 1], atol=1e-4, rtol=0)
    assert torch.equal(got[..., 2], batch["keypoints"][..., 2][live])


# ----------------------------------------------------------------------------- colour scenes through v2


def _scene_batch(n, size=(96, 72)):
    ss = [scene(7, i, size) for i in range(n)]
    m = max(len(s.objects) for s in ss)
    boxes = torch.zeros(n, m, 4)
    labels = torch.full((n, m), -1)
    for i, s in enumerate(ss):
        c = len(s.objects)
        boxes[i, :c] = torch.from_numpy(s.objects.boxes)
        labels[i, :c] = torch.from_numpy(s.objects.labels)
    image = torch.stack([torch.from_numpy(s.image).permute(2, 0, 1) for s in ss])
    mask = torch.stack([torch.from_numpy(s.mask) for s in ss])
    return {"image": image, "boxes": boxes, "box_labels": labels, "box_count": (labels >= 0).sum(1), "mask": mask}


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=8)
@given(st.integers(0, 2**31 - 1))
def test_a_v2_pipeline_on_shardkits_output_keeps_boxes_and_mask_on_their_colours(seed):
    torch.manual_seed(seed)
    pipeline = v2.Compose(
        [
            v2.RandomResizedCrop(48, scale=(0.3, 1.0), interpolation=v2.InterpolationMode.NEAREST),
            v2.RandomHorizontalFlip(),
            v2.SanitizeBoundingBoxes(min_size=2),
        ]
    )
    batch = from_tv_tensors([pipeline(s) for s in as_tv_tensors(_scene_batch(6))])
    colours = torch.tensor(COLOURS, dtype=torch.int16)
    img = batch["image"].to(torch.int16)
    for i in range(img.shape[0]):
        for j in range(int(batch["box_count"][i])):
            c = int(batch["box_labels"][i, j])
            x0, y0, x1, y1 = batch["boxes"][i, j].tolist()
            patch = img[i, :, math.floor(y0) : math.ceil(y1), math.floor(x0) : math.ceil(x1)]
            near = (patch - colours[c][:, None, None]).abs().amax(0) <= 2
            assert bool(near.any()), (i, j, c)
        m = batch["mask"][i]
        for c in range(1, len(COLOURS)):
            on = m == c
            if bool(on.any()):
                assert bool(((img[i] - colours[c][:, None, None]).abs().amax(0)[on] <= 2).all()), (i, c)


# ----------------------------------------------------------------------------- a torchvision detector takes it


def test_a_torchvision_detector_trains_on_it():
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    torch.manual_seed(0)
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=len(COLOURS))
    model.train()
    images, targets = to_torchvision(_scene_batch(2))
    losses = model(images, targets)
    assert set(losses) >= {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
    assert all(math.isfinite(float(v.detach())) for v in losses.values())
    model.eval()
    with torch.no_grad():
        det = model(images)
    assert len(det) == 2 and all(set(d) >= {"boxes", "labels", "scores"} for d in det)
