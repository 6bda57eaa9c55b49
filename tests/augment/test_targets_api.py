"""GpuAugment with targets: the call forms, what each op kind does to targets, refusals, no host sync, compile.

Oracles: a dict batch gives exactly what ``aug(images, targets=...)`` gives for the same draw; colour ops and
RandomErasing leave targets bit-identical; a run split by a pixel op moves each target by its own run's map
(equal to the two runs applied by hand with ``move``); ``apply_targets`` traces with ``fullgraph=True`` and
a whole call reads nothing back to the host (``tests/support/augment.py``'s HostReads; on CUDA
``set_sync_debug_mode("error")``); CPU and CUDA give the same targets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CenterCrop,
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    HorizontalFlip,
    MixUp,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    VerticalFlip,
    ViewAugment,
)
from shardkit.demo.scenes import FLIP_PAIRS
from shardkit.targets.geometry import move
from tests.support.augment import HostReads, MatmulCalls
from tests.support.target_geometry import scene_batch

GEOMETRIC = [
    RandomResizedCrop(40, scale=(0.3, 1.0)),
    HorizontalFlip(),
    RandomRotation(20, fill=3),
    RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
]
COLOUR = [
    ColorJitter(0.4, 0.4, 0.4, 0.1),
    RandomGrayscale(0.2),
    GaussianBlur(3),
    Normalize(IMAGENET_MEAN, IMAGENET_STD),
    RandomErasing(p=1.0),
]


def same(a, b) -> bool:
    return all(
        (x is None and y is None) or torch.equal(x, y)
        for x, y in zip(
            (a.boxes, a.labels, a.count, a.keypoints, a.mask), (b.boxes, b.labels, b.count, b.keypoints, b.mask)
        )
    )


def test_a_dict_batch_is_the_images_and_targets_call():
    images, targets = scene_batch(3, 4, (64, 48))
    batch = {
        "image": images,
        "boxes": targets.boxes,
        "box_labels": targets.labels,
        "box_count": targets.count,
        "keypoints": targets.keypoints,
        "mask": targets.mask,
        "key": ["a", "b", "c", "d"],
    }
    a = GpuAugment(GEOMETRIC + COLOUR, seed=5, flip_pairs=FLIP_PAIRS, min_visible=0.5)
    b = GpuAugment(GEOMETRIC + COLOUR, seed=5, flip_pairs=FLIP_PAIRS, min_visible=0.5)
    out = a(batch)
    x, moved = b(images, targets=targets)
    assert torch.equal(out["image"], x) and out["key"] == batch["key"]
    assert torch.equal(out["boxes"], moved.boxes) and torch.equal(out["box_labels"], moved.labels)
    assert torch.equal(out["box_count"], moved.count) and torch.equal(out["keypoints"], moved.keypoints)
    assert torch.equal(out["mask"], moved.mask)
    assert a.objects_dropped == b.objects_dropped == int((targets.count - moved.count).sum()) > 0
    # a mask-only batch (segmentation) and a plain one (classification) work too
    seg = a({"image": images, "mask": targets.mask})
    assert seg["mask"].shape == (4, 40, 40) and set(seg) == {"image", "mask"}
    assert set(a({"image": images, "label": torch.arange(4)})) == {"image", "label"}


def test_colour_ops_and_erasing_leave_targets_alone():
    images, targets = scene_batch(1, 4, (64, 48))
    x, moved = GpuAugment(COLOUR, seed=0, flip_pairs=FLIP_PAIRS)(images, targets=targets)
    assert same(moved, targets) and x.shape == images.shape


def test_each_run_moves_targets_by_its_own_map():
    """Two geometric runs split by a pixel op: the targets equal ``move`` by run 1's map, then by run 2's."""
    images, targets = scene_batch(2, 4, (64, 48))
    ops = [RandomResizedCrop(40), HorizontalFlip(), ColorJitter(0.2), VerticalFlip(), CenterCrop(32), Resize(36)]
    aug = GpuAugment(ops, seed=1, flip_pairs=FLIP_PAIRS)
    params = aug.sample_params(4, (48, 64), "cpu")
    _, got, dropped = aug.apply_targets(images, params, targets)
    from shardkit.augment.affine import chain

    size = (48, 64)
    want = targets
    for run in ([0, 1], [3, 4, 5]):
        mats, sizes = [], [size]
        for k in run:
            sizes.append(ops[k].output_size(sizes[-1]))
            mats.append(ops[k].matrix(params[k], sizes[-2], sizes[-1], torch.device("cpu")))
        want, _ = move(want, chain(mats, torch.device("cpu"))[0], sizes[-1], flip_pairs=FLIP_PAIRS)
        size = sizes[-1]
    assert same(got, want)
    assert torch.equal(dropped, targets.count - got.count)


def test_refusals_are_one_line():
    images, targets = scene_batch(0, 2, (48, 40))
    with pytest.raises(ValueError, match="MixUp/CutMix blend two samples"):
        GpuAugment([HorizontalFlip(), MixUp(4)], seed=0, flip_pairs=FLIP_PAIRS)(images, targets=targets)
    with pytest.raises(ValueError, match="MixUp/CutMix blend two samples"):
        GpuAugment([CutMix(4)], seed=0)({"image": images, "boxes": targets.boxes, "box_labels": targets.labels})
    with pytest.raises(ValueError, match="ViewAugment does not move boxes"):
        ViewAugment([(2, [HorizontalFlip()])], seed=0)([images, images], targets=targets)
    with pytest.raises(ValueError, match="targets cannot follow the views list"):
        GpuAugment([HorizontalFlip()], seed=0, flip_pairs=FLIP_PAIRS)([images, images], targets=targets)
    with pytest.raises(ValueError, match=r"mask must be \[B, H, W\]"):
        GpuAugment([HorizontalFlip()], seed=0, flip_pairs=FLIP_PAIRS)(
            images, targets=replace(targets, mask=targets.mask[:, :10])
        )
    with pytest.raises(ValueError, match="targets hold 1 samples but the images 2"):
        GpuAugment([HorizontalFlip()], seed=0, flip_pairs=FLIP_PAIRS)(images, targets=targets.take(torch.tensor([0])))
    with pytest.raises(ValueError, match="needs 'box_labels'"):
        GpuAugment([HorizontalFlip()], seed=0)({"image": images, "boxes": targets.boxes})
    with pytest.raises(ValueError, match="min_visible must be a fraction"):
        GpuAugment([HorizontalFlip()], min_visible=1.5)
    with pytest.raises(ValueError, match="flip_pairs name keypoint 1 twice"):
        GpuAugment([HorizontalFlip()], flip_pairs=[(0, 1), (1, 2)])
    with pytest.raises(ValueError, match="two distinct keypoint indices"):
        GpuAugment([HorizontalFlip()], flip_pairs=[(2, 2)])
    with pytest.raises(ValueError, match="keypoints need flip_pairs"):  # a flip would leave "left" on the right
        GpuAugment([HorizontalFlip()], seed=0)(images, targets=targets)


def test_an_empty_batch_gives_empty_targets():
    images, targets = scene_batch(0, 2, (48, 40))
    x, moved = GpuAugment(GEOMETRIC, seed=0, flip_pairs=FLIP_PAIRS)(images[:0], targets=targets.take(torch.arange(0)))
    assert x.shape == (0, 3, 40, 40) and moved.boxes.shape == (0, targets.boxes.shape[1], 4)
    assert moved.mask.shape == (0, 40, 40)


def test_a_whole_call_with_targets_reads_nothing_back_to_the_host():
    images, targets = scene_batch(4, 8, (48, 40))
    aug = GpuAugment(GEOMETRIC + COLOUR, seed=0, output_dtype=torch.bfloat16, flip_pairs=FLIP_PAIRS)
    cut = GpuAugment([RandomResizedCrop(32), RandomRotation(30)], seed=0, flip_pairs=FLIP_PAIRS)  # a cut
    batch = {"image": images, "boxes": targets.boxes, "box_labels": targets.labels, "mask": targets.mask}
    aug(images, targets=targets), cut(images, targets=targets), aug(batch)  # generators, cached constants
    with HostReads() as reads:
        for _ in range(2):
            aug(images, targets=targets)
            cut(images, targets=targets)
            aug(batch)
    assert reads.calls == [], reads.calls


def test_apply_targets_traces_without_graph_breaks():
    images, targets = scene_batch(5, 4, (48, 40))
    # a fused run with a cut (rotation after a crop), colour ops, erasing, a fixed crop
    for ops in (
        [
            RandomResizedCrop(32),
            RandomRotation(30),
            HorizontalFlip(),
            ColorJitter(0.4),
            RandomErasing(p=1.0),
            CenterCrop(24),
        ],
    ):
        aug = GpuAugment(ops, seed=0, flip_pairs=FLIP_PAIRS)
        params = aug.sample_params(4, (40, 48), "cpu")
        torch._dynamo.reset()
        traced = torch.compile(aug.apply_targets, backend="eager", fullgraph=True, dynamic=False)
        a, ta, da = traced(images, params, targets)
        b, tb, db = aug.apply_targets(images, params, targets)
        assert torch.equal(a, b) and same(ta, tb) and torch.equal(da, db)


def test_compile_true_moves_targets_like_eager(monkeypatch):
    """``compile=True`` runs ``apply_targets`` through ``torch.compile`` (the eager backend here: inductor
    takes minutes on a small CPU; the graph is the same) and moves targets as eager does."""
    real, seen = torch.compile, []

    def eager_compile(fn, **kw):
        seen.append(getattr(fn, "__name__", fn))
        return real(fn, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    images, targets = scene_batch(6, 4, (48, 40))
    ops = [RandomResizedCrop(32), HorizontalFlip()]
    eager = GpuAugment(ops, seed=2, flip_pairs=FLIP_PAIRS)
    compiled = GpuAugment(ops, seed=2, flip_pairs=FLIP_PAIRS, compile=True)
    torch._dynamo.reset()
    x, t = eager(images, targets=targets)
    y, u = compiled(images, targets=targets)
    assert seen == ["apply_targets"]
    assert torch.equal(x, y) and same(t, u)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@CUDA
def test_no_host_sync_with_targets_on_cuda():
    images, targets = scene_batch(4, 8, (64, 48))
    images, targets = images.cuda(), targets.to("cuda")
    aug = GpuAugment(GEOMETRIC + COLOUR, seed=0, output_dtype=torch.bfloat16, flip_pairs=FLIP_PAIRS)
    cut = GpuAugment([RandomResizedCrop(32), RandomRotation(30)], seed=0, flip_pairs=FLIP_PAIRS)
    aug(images, targets=targets), cut(images, targets=targets)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            aug(images, targets=targets)
            cut(images, targets=targets)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@CUDA
def test_cuda_moves_targets_like_cpu():
    images, targets = scene_batch(7, 8, (64, 48))
    ops = [
        RandomResizedCrop(40),
        HorizontalFlip(),
        VerticalFlip(),
        RandomRotation(25),
        RandomAffine(10, scale=(0.8, 1.2)),
    ]
    aug = GpuAugment(ops, seed=0, flip_pairs=FLIP_PAIRS)
    params = aug.sample_params(8, (48, 64), "cpu")
    _, cpu, _ = aug.apply_targets(images, params, targets)
    cuda_params = [{k: v.cuda() for k, v in p.items()} for p in params]
    _, gpu, _ = aug.apply_targets(images.cuda(), cuda_params, targets.to("cuda"))
    gpu = gpu.to("cpu")
    assert torch.equal(cpu.labels, gpu.labels) and torch.equal(cpu.count, gpu.count)
    torch.testing.assert_close(cpu.boxes, gpu.boxes, atol=1e-3, rtol=0)
    assert (cpu.mask != gpu.mask).float().mean() < 1e-3  # float32 ties may round either way


def test_no_matmul_in_the_target_path():
    """The targets' maths is elementwise, so ``torch.set_float32_matmul_precision("high")`` (TF32 on
    a GPU) cannot shift a box, a keypoint or a mask pixel."""
    images, targets = scene_batch(8, 4, (48, 40))
    aug = GpuAugment([RandomResizedCrop(32), HorizontalFlip(), RandomRotation(30)], seed=0, flip_pairs=FLIP_PAIRS)
    aug(images, targets=targets)
    with MatmulCalls() as mm:
        aug(images, targets=targets)
        move(targets, torch.eye(3)[None], (40, 48), flip_pairs=FLIP_PAIRS)
    assert mm.calls == []
