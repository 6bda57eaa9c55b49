"""The device path's rules that a CPU can check.

* C3 one side stream per device, shared by every DevicePrefetcher (a fake stream factory on CPU);
* C4 ``GpuAugment(compile=True)`` compiles a bounded number of graphs over any batch sizes;
* C5 cropresize's host-to-device copies are non-blocking (CUDA-only check; on CPU: same results);
* C6 the resize and affine maths do not depend on the global float32 matmul precision;
* C7 out-of-range MixUp/CutMix labels: refused on the host by the prefetcher, counted (not a crash)
  in GpuAugment; every op on an empty batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import shardkit.loader.decode.cropresize as cr
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
)
from shardkit.loader import prefetch
from shardkit.loader.prefetch import DevicePrefetcher
from tests.support.augment import MatmulCalls, uint8_images

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def all_ops() -> list:
    """One of every op (both MixUp/CutMix modes), each alone in a pipeline in the empty-batch oracle."""
    return [
        RandomResizedCrop(16),
        CenterCrop(12),
        Resize(20),
        HorizontalFlip(),
        VerticalFlip(),
        RandomRotation(20, fill=3),
        RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
        ColorJitter(0.4, 0.4, 0.4, 0.1, order="random"),
        RandomGrayscale(0.2),
        GaussianBlur(3),
        GaussianBlur((3, 5), p=0.5),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(),
        MixUp(4),
        CutMix(4),
        MixUp(4, per_sample=True),
        CutMix(4, per_sample=True),
    ]


# --- C3: one side stream per device ------------------------------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA "available" with device 0 current, and a fresh stream registry whose factory records its calls."""
    made: list[torch.device] = []

    def factory(device):
        made.append(device)
        return object()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(prefetch, "side_streams", prefetch.SideStreams(factory))
    return made


def test_one_side_stream_per_device_across_prefetchers(fake_cuda):
    """README/examples build a prefetcher per epoch and per validation pass: they all get the same stream."""
    names = ["cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)]
    streams = [DevicePrefetcher([], device=names[i % 4])._side_stream() for i in range(20)]
    assert all(s is streams[0] for s in streams) and fake_cuda == [torch.device("cuda", 0)]
    other = DevicePrefetcher([], device="cuda:1")._side_stream()
    assert other is not streams[0] and fake_cuda == [torch.device("cuda", 0), torch.device("cuda", 1)]
    pf = DevicePrefetcher([], device="cuda")
    assert pf.device == torch.device("cuda", 0)  # normalised: "cuda" and "cuda:0" are one device
    prefetch.side_streams.clear()
    assert pf._side_stream() is not streams[0] and len(fake_cuda) == 3


def test_side_streams_made_once_under_threads():
    import threading

    made = []
    reg = prefetch.SideStreams(lambda d: made.append(d) or object())
    got = []
    threads = [threading.Thread(target=lambda: got.append(reg.get("cpu"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(made) == 1 and len({id(s) for s in got}) == 1 and len(got) == 8


@CUDA
def test_prefetchers_share_the_cuda_side_stream():
    batches = [(uint8_images(4), torch.arange(4)) for _ in range(3)]
    a, b = DevicePrefetcher(batches, device="cuda"), DevicePrefetcher(batches, device="cuda:0")
    got_a, got_b = list(a), list(b)
    assert a._stream is b._stream is prefetch.side_streams.get("cuda")
    for (x, y), (xa, ya), (xb, _yb) in zip(batches, got_a, got_b):
        assert torch.equal(xa.cpu(), x) and torch.equal(xb.cpu(), x) and torch.equal(ya.cpu(), y)


# --- C4: compile=True over many batch sizes -------------------------------------------------------------


def test_compile_is_bounded_over_batch_sizes(monkeypatch):
    """Skips, drops, the last partial and empty batches change the batch size: a bounded number of graphs
    (the batch dimension is dynamic), no silent fall-back to eager, and the compiled output is the eager one.
    (Graphs and recompiles are dynamo's; the aot_eager backend keeps the C++ build of inductor out of the test.)"""
    import functools

    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    ops = [
        RandomResizedCrop(16),
        HorizontalFlip(),
        ColorJitter(0.4, 0.4),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        MixUp(4),
    ]
    torch._dynamo.reset()
    counters.clear()
    try:
        aug, ref = GpuAugment(ops, seed=0, compile=True), GpuAugment(ops, seed=0)
        for b in (8, 7, 5, 1, 0, 6, 3, 2, 8, 4, 1, 0):
            x, y = uint8_images(b, seed=b), torch.arange(b) % 4
            out, soft = aug(x, y)
            exp, exp_soft = ref(x, y)
            assert out.shape == (b, 3, 16, 16) and soft.shape == (b, 4)
            assert torch.allclose(out, exp, atol=1e-5) and torch.allclose(soft, exp_soft, atol=1e-6), b
        graphs = counters["stats"]["unique_graphs"]
        assert graphs <= 2, (graphs, dict(counters["recompiles"]))  # one for B >= 2, one for B == 1
        assert not counters["recompile_limit_hit"] and not counters["cache_size_limit"]
    finally:
        torch._dynamo.reset()


# --- C6: the global matmul precision does not leak into the "exact" maths -----------------------------------


def crops_case(n: int = 10, s: int = 16, seed: int = 3, sizes: tuple[int, int] = (20, 90)):
    rng = np.random.default_rng(seed)
    imgs = [
        torch.from_numpy(rng.integers(0, 256, (3, int(h), int(w)), dtype=np.uint8))
        for h, w in rng.integers(*sizes, (n, 2))
    ]
    dims = np.array([t.shape[1:] for t in imgs], float)
    x0, y0 = np.floor(rng.random(n) * dims[:, 1] * 0.4), np.floor(rng.random(n) * dims[:, 0] * 0.4)
    x1, y1 = (
        np.maximum(x0 + 1, np.floor(dims[:, 1] * (0.6 + 0.4 * rng.random(n)))),
        np.maximum(y0 + 1, np.floor(dims[:, 0] * (0.6 + 0.4 * rng.random(n)))),
    )
    box = rng.random(n) < 0.5
    px = cr.axis_params(s, dims[:, 1], dims[:, 1], x0, x1, box)
    py = cr.axis_params(s, dims[:, 0], dims[:, 0], y0, y1, box)
    return imgs, px, py, rng.random(n) < 0.5, s


def run_crops(case) -> torch.Tensor:
    imgs, px, py, flips, s = case
    return cr.resized_crops(imgs, px, py, flips, torch.empty(len(imgs), 3, s, s, dtype=torch.uint8), 1 << 20)


GEOMETRIC = [
    RandomResizedCrop(20),
    HorizontalFlip(),
    RandomRotation(30, fill=7),
    RandomAffine(15, (0.1, 0.1), (0.8, 1.2), (5, 5, 5, 5)),
]


def test_resize_and_affine_ignore_the_global_matmul_precision():
    """A training script's torch.set_float32_matmul_precision("high") (Lightning's H100/H200 advice; "medium"
    lowers float32 matmuls on some CPUs too) must not move resize levels or sampling grids. On a CPU that does not
    round these matmuls it passes either way: test_no_float32_matmul_in_resize_or_affine is the half that fails there."""
    case = crops_case(n=12, s=96, sizes=(150, 260))
    x = uint8_images(6, size=40, seed=5)
    before = torch.get_float32_matmul_precision()
    results = {}
    try:
        for precision in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(precision)
            aug = GpuAugment(GEOMETRIC, seed=1)
            results[precision] = (run_crops(case), aug(x))
    finally:
        torch.set_float32_matmul_precision(before)
    for precision in ("high", "medium"):
        assert torch.equal(results[precision][0], results["highest"][0]), precision
        assert torch.equal(results[precision][1], results["highest"][1]), precision


def test_no_float32_matmul_in_resize_or_affine():
    """The structural half of the check above, for what this CPU does not round under "high" (a GPU does, to TF32)."""
    case = crops_case(n=4)
    aug = GpuAugment(GEOMETRIC, seed=1)
    with MatmulCalls(float32_only=True) as mm:
        run_crops(case)
        aug(uint8_images(3, size=40))
    assert mm.calls == []


# --- C5: non-blocking copies in cropresize -----------------------------------------------------------------


def test_to_device_keeps_values_on_cpu():
    a = np.array([[0.5, 3.0], [1e6, -2.0]])
    t = cr.to_device(a, torch.float32, torch.device("cpu"))
    assert t.dtype == torch.float32 and torch.equal(t, torch.tensor(a, dtype=torch.float32))


@CUDA
def test_resized_crops_never_syncs_on_cuda():
    imgs, px, py, flips, s = crops_case()
    imgs = [t.cuda() for t in imgs]
    out = torch.empty(len(imgs), 3, s, s, dtype=torch.uint8, device="cuda")
    cr.resized_crops(imgs, px, py, flips, out, 1 << 20)  # warm-up: pinned blocks, kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = cr.resized_crops(imgs, px, py, flips, out, 1 << 20)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(got.cpu(), run_crops(crops_case()))


# --- C7: labels out of range, empty batches -------------------------------------------------------------------


@pytest.mark.parametrize("compile_", [False, True])
def test_every_op_on_an_empty_batch(compile_):
    """Oracle: an empty batch gives what a batch of 2 gives, sliced to 0 (shape, dtype, strides' layout)."""
    for op in all_ops():
        aug = GpuAugment([op], seed=0, compile=compile_, memory_format="channels_last", output_dtype=torch.bfloat16)
        labels = torch.zeros(0, dtype=torch.long)
        got = aug(uint8_images(0), labels)
        full = GpuAugment([op], seed=0, memory_format="channels_last", output_dtype=torch.bfloat16)(
            uint8_images(2), torch.tensor([1, 2])
        )
        for g, f in zip(got, full):
            assert g.shape == (0, *f.shape[1:]) and g.dtype == f.dtype, op
        assert got[0].is_contiguous(memory_format=torch.channels_last), op
        assert got[1].shape == ((0, 4) if aug.needs_labels else (0,)), op


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-3, 9), min_size=1, max_size=12), st.sampled_from([MixUp, CutMix]))
@example([5, 0, -1, 3, 4], MixUp)
@example([2, -2, 7], CutMix)
def test_out_of_range_labels_are_counted_not_a_crash(labels, op):
    """On CUDA an out-of-range index in the one-hot scatter is a device-side assert (the process is lost): instead
    the row is all zeros and GpuAugment.label_errors counts it; in-range rows are exact one-hots (p=0: no mixing)."""
    k = 4
    aug = GpuAugment([op(k, p=0.0)], seed=0)
    y = torch.tensor(labels)
    for _ in range(2):
        _, soft = aug(uint8_images(len(labels)), y)
        for row, lab in zip(soft.tolist(), labels):
            assert row == [1.0 if c == lab else 0.0 for c in range(k)]
    assert aug.label_errors == 2 * sum(not 0 <= lab < k for lab in labels)


def test_prefetcher_refuses_out_of_range_labels_on_the_host():
    aug = GpuAugment([MixUp(4)], seed=0)
    good = [(uint8_images(3), torch.tensor([0, 3, 2]))]
    assert len(list(DevicePrefetcher(good, device="cpu", transform=aug))) == 1
    bad = good + [(uint8_images(3), torch.tensor([1, 4, 9]))]
    with pytest.raises(
        ValueError, match=r"label 4 \(sample 1 of the batch, 2 such\) is outside \[0, 4\).*num_classes=4"
    ):
        list(DevicePrefetcher(bad, device="cpu", transform=aug))
    with pytest.raises(ValueError, match=r"label -1 "):
        list(DevicePrefetcher([(uint8_images(2), torch.tensor([-1, 0]))], device="cpu", transform=aug))
    # without a mixing transform labels are not the prefetcher's business
    assert len(list(DevicePrefetcher(bad, device="cpu"))) == 2
