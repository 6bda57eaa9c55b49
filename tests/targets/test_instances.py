"""Instance maps (``instances``: an object row per pixel) move and follow their objects (instance masks).

Oracles, each against a deliberately simple reference:

* :func:`shardkit.targets.geometry.move` on random maps (noise: any interpolation or a wrong pixel shows) under
  random affine maps equals a pixel-by-pixel float64 nearest loop, with each pixel's row sent to the row its
  object has among the kept boxes (which boxes stay: the per-box reference run one object at a time);
* ``kept_rows``/``relabel`` equal a Python dict lookup;
* GpuAugment's geometric ops on demo scenes (:func:`tests.support.target_geometry.check_instances`, the pixel
  oracle): the pixels of row ``k`` lie in box ``k`` (within a margin), sit on its class's colour, agree with the
  semantic mask, and no pixel names a row ``>= box_count``;
* ``to_torchvision``'s ``"masks"`` equal a per-box loop ``instances == k``; ``as_tv_tensors`` then
  ``from_tv_tensors`` gives the map back; a torchvision Mask R-CNN takes one training step of it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from shardkit.augment import GpuAugment, HorizontalFlip, RandomAffine, RandomResizedCrop, RandomRotation, Resize
from shardkit.demo.scenes import FLIP_PAIRS, scene
from shardkit.targets import as_tv_tensors, from_tv_tensors, to_torchvision
from shardkit.targets.crops import crop_maps
from shardkit.targets.geometry import Targets, move, pad_objects
from shardkit.targets.instances import kept_rows, relabel
from tests.support.target_geometry import FILL, IGNORE, check_instances, ref_move_sample, ref_warp_mask

SETTINGS = settings(
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,
    deadline=None,
    max_examples=20,
    suppress_health_check=list(HealthCheck),
)


def scene_batch_instances(seed: int, n: int, size: tuple[int, int]) -> tuple[torch.Tensor, Targets]:
    """``n`` demo scenes: images ``[n, 3, H, W]`` and targets with mask and instance map."""
    scenes = [scene(seed, i, size) for i in range(n)]
    images = torch.from_numpy(np.stack([s.image for s in scenes])).permute(0, 3, 1, 2).contiguous()
    t = pad_objects([s.objects for s in scenes], num_keypoints=2)
    mask = torch.from_numpy(np.stack([s.mask for s in scenes]))
    inst = torch.from_numpy(np.stack([s.instances for s in scenes]))  # type: ignore[misc]
    return images, Targets(t.boxes, t.labels, t.count, t.crowd, t.keypoints, mask, inst)


# --- move() against a pixel loop -----------------------------------------------------------------------------


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    m=st.integers(1, 5),
    out=st.integers(6, 20),
    frac=st.floats(0.3, 1.0),
    flip=st.booleans(),
    angle=st.sampled_from([0.0, 0.0, 0.3]),
    min_visible=st.sampled_from([0.0, 0.3, 0.7]),
)
def test_move_sends_each_pixel_to_the_nearest_source_and_its_object_to_its_new_row(
    seed, m, out, frac, flip, angle, min_visible
):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(8, 24)), int(rng.integers(8, 24))
    x0, y0 = rng.uniform(-3, w / 2), rng.uniform(-3, h / 2)
    x1, y1 = x0 + frac * w, y0 + frac * h
    inv = crop_maps(np.array([[x0, y0, x1, y1]]), np.array([flip]), out)[0].numpy()
    c, s_ = np.cos(angle), np.sin(angle)  # then a rotation about the output's centre
    mid = (out - 1) / 2
    rot = np.array([[c, -s_, mid - c * mid + s_ * mid], [s_, c, mid - s_ * mid - c * mid], [0, 0, 1]])
    inv = inv @ rot
    a = rng.uniform(0, [w, h], (m, 2))
    b = a + rng.uniform(1, [w / 2 + 1, h / 2 + 1], (m, 2))
    boxes = np.concatenate([a, b], 1).astype(np.float32)
    labels = rng.integers(1, 5, m)
    ids = rng.integers(-1, m, (h, w)).astype(np.int16)  # noise: every pixel its own row
    t = Targets(
        torch.from_numpy(boxes)[None],
        torch.from_numpy(labels)[None],
        torch.tensor([m]),
        torch.zeros(1, m, dtype=torch.bool),
        instances=torch.from_numpy(ids)[None],
    )
    got, _ = move(t, torch.from_numpy(inv)[None], (out, out), min_visible=min_visible)
    kept: dict[int, int] = {}
    for k in range(m):  # which objects stay: the per-box reference, one object at a time
        one, _, _, margin = ref_move_sample(
            boxes[k : k + 1], labels[k : k + 1], 1, None, inv, (out, out), min_visible, ()
        )
        assume(margin > 1e-3 or not len(one))  # wholly outside: clipped to one edge, sure in float32 too
        if len(one):
            kept[k] = len(kept)
    assert int(got.count[0]) == len(kept)
    warped, tie = ref_warp_mask((ids.astype(np.int64) + 1).astype(np.uint8), inv, (out, out))
    want = np.array([[-1 if v == IGNORE else kept.get(int(v) - 1, -1) for v in row] for row in warped])
    g = got.instances[0].numpy()  # type: ignore[index]
    assert got.instances.dtype == torch.int16  # type: ignore[union-attr]
    assert np.array_equal(g[~tie], want[~tie]), np.argwhere((g != want) & ~tie)[:3]


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=30)
@given(st.integers(0, 10**6), st.integers(1, 4), st.integers(0, 6))
def test_kept_rows_and_relabel_equal_a_dict_lookup(seed, n, m):
    rng = np.random.default_rng(seed)
    keep = rng.random((n, m)) < 0.6
    ids = rng.integers(-1, m + 2, (n, 5, 3))  # rows >= m name no object
    got = relabel(torch.from_numpy(ids).to(torch.int16), kept_rows(torch.from_numpy(keep))).numpy()
    for i in range(n):
        table = {int(r): j for j, r in enumerate(np.flatnonzero(keep[i]))}
        want = [table.get(int(v), -1) for v in ids[i].reshape(-1)]
        assert got[i].reshape(-1).tolist() == want


# --- GpuAugment on scenes: the pixel oracle ------------------------------------------------------------------


@SETTINGS
@given(st.data(), st.integers(0, 10**6), st.integers(48, 80), st.booleans())
def test_gpu_augment_geometric_ops_keep_each_object_on_its_pixels(data, seed, side, clip):
    out = data.draw(st.integers(24, side))
    ops = data.draw(
        st.lists(
            st.sampled_from(
                [
                    HorizontalFlip(p=1.0),
                    RandomRotation(30, fill=FILL),
                    RandomAffine(10, (0.2, 0.2), (0.7, 1.3), fill=FILL),
                    RandomResizedCrop(out, scale=(0.2, 1.0)),
                    Resize(out),
                ]
            ),
            min_size=1,
            max_size=3,
        )
    )
    loose = any(isinstance(op, (RandomRotation, RandomAffine)) for op in ops)
    images, targets = scene_batch_instances(seed, 4, (side, side - 8))
    aug = GpuAugment(ops, seed=seed, clip_intermediate=clip, flip_pairs=FLIP_PAIRS, min_visible=0.3)
    params = aug.sample_params(4, (side - 8, side), "cpu")
    x, moved, _ = aug.apply_targets(images, params, targets)
    assert moved.instances is not None and moved.instances.dtype == torch.int16
    for i in range(4):
        fails = check_instances(
            x[i],
            moved.boxes[i],
            moved.labels[i],
            moved.count[i],
            moved.instances[i],
            moved.mask[i],  # type: ignore[index]
            loose=loose,
        )
        assert not fails, (i, [type(o).__name__ for o in ops], fails[:3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cut_run_drops_boxes_and_their_pixels_follow(seed):
    """A rotation after a crop in one fused run with ``clip_intermediate=True``: boxes move canvas by canvas and drop
    at the cut, the instance map is warped once; its rows must follow every canvas's drops."""
    images, targets = scene_batch_instances(seed, 6, (72, 64))
    ops = [RandomResizedCrop(40, scale=(0.1, 0.3)), RandomRotation(25, fill=FILL)]
    aug = GpuAugment(ops, seed=seed, clip_intermediate=True, flip_pairs=FLIP_PAIRS, min_visible=0.4)
    x, moved, dropped = aug.apply_targets(images, aug.sample_params(6, (64, 72), "cpu"), targets)
    assert int(dropped.sum()) > 0 and int(moved.count.sum()) > 0  # the case at hand: drops, and boxes left
    for i in range(6):
        fails = check_instances(
            x[i],
            moved.boxes[i],
            moved.labels[i],
            moved.count[i],
            moved.instances[i],
            moved.mask[i],
            loose=True,  # type: ignore[index]
        )
        assert not fails, (i, fails[:3])


def test_instances_move_without_host_reads():
    """Relabelling is a gather on the device: a GpuAugment call with instance maps (a cut run, a dict batch) reads
    nothing back to the host (``tests/support/augment.py``'s HostReads, the CPU stand-in for CUDA's)."""
    from tests.support.augment import HostReads

    images, targets = scene_batch_instances(4, 6, (48, 40))
    aug = GpuAugment([RandomResizedCrop(32), RandomRotation(30, fill=FILL)], seed=0, flip_pairs=FLIP_PAIRS)
    batch = {"image": images, "boxes": targets.boxes, "box_labels": targets.labels, "instances": targets.instances}
    aug(images, targets=targets), aug(batch)  # generators, cached constants
    with HostReads() as reads:
        aug(images, targets=targets)
        out = aug(batch)
    assert reads.calls == [], reads.calls
    assert out["instances"].dtype == torch.int16 and out["instances"].shape == (6, 32, 32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_moves_instances_like_cpu_without_a_sync():
    images, targets = scene_batch_instances(7, 8, (64, 48))
    aug = GpuAugment([RandomResizedCrop(40), HorizontalFlip(), RandomRotation(25, fill=FILL)], seed=0, min_visible=0.4)
    params = aug.sample_params(8, (48, 64), "cpu")
    _, cpu, _ = aug.apply_targets(images, params, targets)
    cuda_params = [{k: v.cuda() for k, v in p.items()} for p in params]
    images, targets = images.cuda(), targets.to("cuda")
    aug.apply_targets(images, cuda_params, targets)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _, gpu, _ = aug.apply_targets(images, cuda_params, targets)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    gpu = gpu.to("cpu")
    assert torch.equal(cpu.count, gpu.count)
    assert (cpu.instances != gpu.instances).float().mean() < 1e-3  # type: ignore[operator]  # float32 ties


# --- torchvision ---------------------------------------------------------------------------------------------


def _batch(seed: int = 3) -> dict[str, torch.Tensor]:
    images, t = scene_batch_instances(seed, 3, (64, 48))
    aug = GpuAugment([RandomResizedCrop(40, scale=(0.3, 1.0))], seed=seed, min_visible=0.5)
    params = aug.sample_params(3, (48, 64), "cpu")
    x, moved, _ = aug.apply_targets(images, params, t)
    return {
        "image": x,
        "boxes": moved.boxes,
        "box_labels": moved.labels,
        "box_count": moved.count,
        "instances": moved.instances,  # type: ignore[dict-item]
    }


def test_to_torchvision_masks_are_one_binary_mask_per_kept_box():
    b = _batch()
    _, targets = to_torchvision(b)
    for i, d in enumerate(targets):
        n = int(b["box_count"][i])
        assert d["masks"].dtype == torch.uint8 and tuple(d["masks"].shape) == (n, 40, 40)
        for k in range(n):
            assert torch.equal(d["masks"][k], (b["instances"][i] == k).to(torch.uint8))
    tv = as_tv_tensors(b)
    assert all(type(s["masks"]).__name__ == "Mask" for s in tv)
    back = from_tv_tensors(tv)
    assert torch.equal(back["instances"], b["instances"])


def test_a_batch_with_instances_but_no_boxes_is_one_line():
    b = _batch()
    with pytest.raises(ValueError, match="'instances' needs 'boxes'"):
        to_torchvision({"image": b["image"], "instances": b["instances"]})


def test_mask_rcnn_takes_one_training_step():
    """torchvision's ``MaskRCNN`` (the model of ``maskrcnn_resnet50_fpn``) on a tiny one-conv backbone, so the step
    stays well under a second on CPU: the targets' format is the model's, whatever the backbone."""
    det = pytest.importorskip("torchvision.models.detection")
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    b = _batch()
    images, targets = to_torchvision(b)
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4, padding=1), torch.nn.ReLU())
    backbone.out_channels = 8  # type: ignore[assignment]
    model = det.MaskRCNN(
        backbone,
        min_size=64,
        max_size=64,
        rpn_anchor_generator=AnchorGenerator(sizes=((8, 16, 32),), aspect_ratios=((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2),
        mask_roi_pool=MultiScaleRoIAlign(featmap_names=["0"], output_size=14, sampling_ratio=2),
        mask_head=det.mask_rcnn.MaskRCNNHeads(8, (16, 16), 1),
        mask_predictor=det.mask_rcnn.MaskRCNNPredictor(16, 16, 7),
        box_head=det.faster_rcnn.TwoMLPHead(8 * 7 * 7, 64),
        box_predictor=det.faster_rcnn.FastRCNNPredictor(64, 7),
    )
    model.train()
    losses = model(images, targets)
    assert {"loss_mask", "loss_box_reg", "loss_classifier"} <= set(losses)
    total = sum(losses.values())
    assert torch.isfinite(total)
    total.backward()
