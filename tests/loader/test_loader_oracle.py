"""Guards for the loader's older promises, fast and in-process, each against a simple reference.

* decode: a bad sample in a batch moves nothing else (pixels, label, id and key stay together; a sample's
  pixels do not depend on its neighbours);
* the batched crop/resize of the device decode, on CPU: torch's own antialiased ``interpolate`` of the crop
  box is the reference, with canvases grouped by a small budget and flips per sample;
* a dead worker's message names the signal.

The storage guards (the shard cache, remote reads) are in ``tests/storage/test_storage_oracle.py``.

The mutant gate (``tests/mutants/loader_core.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardkit.format import RawSample
from shardkit.loader.batching import BatchSpec, decode_batch
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from shardkit.loader.stats import COUNTERS, Counters
from tests.support.data import jpeg_bytes

# ----------------------------------------------------------------------------- decode: a bad sample moves nothing

_GOOD = [jpeg_bytes(i % 3, i, (60 + 7 * i, 44 + 5 * i)) for i in range(6)]
_BAD = {"garbage": b"not a jpeg at all", "truncated": _GOOD[5][: len(_GOOD[5]) // 3]}  # header fails / pixels fail


def _samples(kinds: list[str]) -> list[RawSample]:
    out = []
    for i, kind in enumerate(kinds):
        data = _GOOD[i % len(_GOOD)] if kind == "good" else _BAD[kind]
        out.append(RawSample(key=f"k{i}", gid=100 + i, shard="s.tar", index=i, jpeg=data, label=i))
    return out


def _decode(samples: list[RawSample], preset: str) -> tuple:
    cfg = ImageConfig(preset=preset, size=32, resize_size=36) if preset == "eval" else ImageConfig(size=32)
    counters = Counters()
    b = decode_batch(
        samples,
        spec=BatchSpec(batch_size=len(samples), num_batches=1, epoch=3),
        decoder=CropDecoder(cfg, seed=7),
        counters=counters,
    )
    return b, counters.v[COUNTERS.index("skipped")]


@pytest.mark.parametrize("preset", ["train", "eval"])
@pytest.mark.parametrize(
    "kinds",
    [
        ["good", "garbage", "good", "good"],
        ["good", "truncated", "good", "good", "good"],
        ["truncated", "good", "garbage", "good", "truncated", "good"],
    ],
)
def test_a_bad_sample_moves_nothing_else(preset, kinds):
    """Each row of a batch with bad samples is its own sample: the same pixels as that sample decoded alone
    (same crop and flip), its own label, id and key; the bad ones are counted as skipped."""
    samples = _samples(kinds)
    batch, skipped = _decode(samples, preset)
    good = [s for s, k in zip(samples, kinds) if k == "good"]
    assert batch.keys == [s.key for s in good]
    assert batch.labels.tolist() == [s.label for s in good]
    assert batch.gids.tolist() == [s.gid for s in good]
    assert skipped == len(samples) - len(good)
    assert batch.images.shape == (len(good), 3, 32, 32)
    for row, s in enumerate(good):
        alone, _ = _decode([s], preset)
        assert torch.equal(batch.images[row], alone.images[0]), (s.key, row)


# ----------------------------------------------------------------------------- batched crop/resize (device decode on CPU)


def _reference_crop(img: torch.Tensor, box: tuple[int, int, int, int], size: int, flip: bool) -> torch.Tensor:
    x0, y0, x1, y1 = box
    crop = img[:, y0:y1, x0:x1][None].float()
    out = torch.nn.functional.interpolate(
        crop, size=(size, size), mode="bilinear", antialias=True, align_corners=False
    )[0]
    out = out.round().clamp(0, 255)
    return out.flip(-1) if flip else out


@st.composite
def _crop_cases(draw):
    n = draw(st.integers(1, 6))
    size = 8
    cases = []
    for _ in range(n):
        h, w = draw(st.integers(size, 40)), draw(st.integers(size, 40))
        bw, bh = draw(st.integers(1, w)), draw(st.integers(1, h))
        x0, y0 = draw(st.integers(0, w - bw)), draw(st.integers(0, h - bh))
        cases.append((h, w, (x0, y0, x0 + bw, y0 + bh), draw(st.booleans()), draw(st.integers(0, 2**31))))
    return size, cases, draw(st.sampled_from([64, 500, 3000, 1 << 30]))


_TWO = [
    (30, 30, (0, 0, 30, 30), False, 1),
    (10, 12, (1, 2, 10, 11), True, 2),
]  # sorted by area, the flip moves position


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_crop_cases())
@example((8, _TWO, 1 << 30))  # one canvas
@example((8, _TWO, 64))  # one canvas per sample
def test_batched_crops_equal_torchs_interpolate_of_each_box(case):
    """Every sample of a batch is resized from its own box with its own flip, whatever the canvas grouping:
    within 1 level of torch's ``interpolate(antialias=True)`` of that box alone."""
    from shardkit.loader.decode.cropresize import axis_params, resized_crops

    size, cases, budget = case
    images = [
        torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (3, h, w), dtype=np.uint8))
        for h, w, _, _, seed in cases
    ]
    boxes = np.array([c[2] for c in cases], np.float64)
    flips = np.array([c[3] for c in cases], bool)
    hs = np.array([c[0] for c in cases], np.float64)
    ws = np.array([c[1] for c in cases], np.float64)
    clamp = np.ones(len(cases), bool)
    px = axis_params(size, ws, ws, boxes[:, 0], boxes[:, 2], clamp)
    py = axis_params(size, hs, hs, boxes[:, 1], boxes[:, 3], clamp)
    out = torch.zeros(len(cases), 3, size, size, dtype=torch.uint8)
    resized_crops(images, px, py, flips, out, budget)
    for i, (img, c) in enumerate(zip(images, cases)):
        ref = _reference_crop(img, c[2], size, c[3])
        assert (out[i].float() - ref).abs().max() <= 1, (i, c)


# ----------------------------------------------------------------------------- dead workers


def test_a_dead_worker_is_named_with_its_signal():
    from shardkit.loader.worker_death import dead_workers, reported_dead

    it = SimpleNamespace(
        _workers=[
            SimpleNamespace(pid=11, exitcode=None),
            SimpleNamespace(pid=12, exitcode=-9),
            SimpleNamespace(pid=13, exitcode=3),
        ]
    )
    assert dead_workers(it, wait_s=0) == ["12 (killed by SIGKILL)", "13 (exit status 3)"]
    exc = RuntimeError("DataLoader worker (pid(s) 21, 22) is killed by signal: Killed. ")
    assert reported_dead(exc) == ["21 (killed by SIGKILL)", "22 (killed by SIGKILL)"]


def test_train_flip_is_independent_of_the_crop():
    """The flip is its own draw: over many samples it is uncorrelated with where the crop lies and how large it is."""
    d = CropDecoder(ImageConfig(size=32), seed=11)
    n = 6000
    c = d.geometry(np.array([[300, 200]] * n), 2, np.arange(n))
    left, top, w, h = c.boxes[:, 0], c.boxes[:, 1], c.boxes[:, 2] - c.boxes[:, 0], c.boxes[:, 3] - c.boxes[:, 1]
    flips = c.flips.astype(np.float64)
    assert 0.45 < flips.mean() < 0.55
    for what in (left / (300 - w + 1), top / (200 - h + 1), w * h):
        assert abs(np.corrcoef(flips, what)[0, 1]) < 0.06


# ----------------------------------------------------------------------------- crop geometry against a per-sample reference


def _reference_rrc(
    width: int, height: int, u: np.ndarray, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params``, one sample, written out as torchvision does, with the
    uniforms ``u`` in place of torch's generator (columns 0-9 areas, 10-19 ratios, 20 top, 21 left)."""
    import math

    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for k in range(10):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[k])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[10 + k])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return int(u[20] * (height - h + 1)), int(u[21] * (width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=20),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(0.08, 1.0), (0.5, 1.0), (1.0, 1.0)]),
)
@example([(w, h) for w in range(1, 8) for h in range(1, 8)], 0, (0.08, 1.0))  # boxes that fill a side exactly
def test_rrc_boxes_equal_a_per_sample_reference(sizes, seed, scale):
    """The vectorised crop boxes equal torchvision's algorithm run per sample on the same uniforms,
    small images (boxes that fill a side exactly) and the centre fallback included."""
    from shardkit.loader.decode.cropgeometry import rrc_boxes

    wh = np.array(sizes, np.int64)
    u = np.random.default_rng(seed).random((len(sizes), 23))
    top, left, h, w = rrc_boxes(wh[:, 0], wh[:, 1], u, scale, (3 / 4, 4 / 3))
    got = list(zip(top.tolist(), left.tolist(), h.tolist(), w.tolist()))
    assert got == [_reference_rrc(int(a), int(b), u[i], scale) for i, (a, b) in enumerate(wh)]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6000), st.integers(1, 6000), st.floats(0.05, 40))
@example(100, 100, 1.0)
def test_dct_scaled_crop_keeps_at_least_the_output_size(width, height, reduce):
    """Decoding at a reduced DCT scale never leaves a crop fewer pixels than the output (no upscaling blur), and
    a crop at least 4x the output is not decoded at full size (the point of DCT scaling)."""
    from shardkit.loader.decode.resample import dct_size

    dw, dh = dct_size(width, height, reduce)
    assert (dw, dh) == (width, height) or (dw * reduce >= width * (1 - 1e-9) and dh * reduce >= height * (1 - 1e-9))
    if reduce >= 4 and min(width, height) >= 16:
        assert dw < width and dh < height


# ----------------------------------------------------------------------------- DevicePrefetcher (CPU path)


def test_prefetched_batches_keep_their_type_and_fields_with_a_transform():
    """A transform replaces only the images (and labels with ``transform_labels``); the batch keeps its type
    (named tuple, tuple, list) and every other field, so ``batch.images`` and ``x, y, keys = batch`` still work."""
    from collections import namedtuple

    from shardkit.loader.prefetch import DevicePrefetcher

    Named = namedtuple("Named", "images labels keys")
    for batch in (
        Named(torch.ones(2, 3), torch.tensor([1, 2]), ["a", "b"]),
        (torch.ones(2, 3), torch.tensor([1, 2]), ["a", "b"]),
        [torch.ones(2, 3), torch.tensor([1, 2]), ["a", "b"]],
    ):
        out = next(iter(DevicePrefetcher([batch], device="cpu", transform=lambda t: t * 2)))
        assert type(out) is type(batch) and torch.equal(out[0], torch.full((2, 3), 2.0))
        assert torch.equal(out[1], batch[1]) and out[2] == ["a", "b"]
        mixed = next(
            iter(DevicePrefetcher([batch], device="cpu", transform=lambda x, y: (x + 1, y * 10), transform_labels=True))
        )
        assert type(mixed) is type(batch) and torch.equal(mixed[1], batch[1] * 10) and mixed[2] == ["a", "b"]
    assert next(
        iter(DevicePrefetcher([Named(torch.ones(1), torch.zeros(1), [])], device="cpu", transform=lambda t: t))
    ).images.shape == (1,)
