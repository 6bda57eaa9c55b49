"""``load(views=...)``: multi-crop views decoded once per sample in the worker.

Oracles: solid-colour images (one colour per sample, keyed), so every view of a sample must show that
sample's colour; a smooth gradient image, whose views are checked against an independent crop-and-resize of
the full decode at the documented geometry (view ``j`` reads uniform columns ``[23 j, 23 j + 23)``); a
counting decoder probe (one decode per sample, not per view); the shared ring's counters (every batch's views
in one slot).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit.loader import View, ViewBatch
from shardkit.loader.decode import worker as worker_decode
from shardkit.loader.decode.cropgeometry import CROP_UNIFORMS, rrc_boxes, sample_uniforms
from shardkit.loader.prefetch import DevicePrefetcher
from tests.support.data import jpeg_bytes
from tests.support.resume import check_resume
from tests.support.source_reference import colour, image_id
from tests.support.views import (
    Flat,
    N,
    check_colours,
    gradient,
    solid_image,
    to_jpeg,
    views_by_key,
    write_keyed,
)

VIEWS = [View(32, scale=(0.4, 1.0), count=2), View(16, scale=(0.05, 0.4), count=3)]
SHAPES = [32, 32, 16, 16, 16]


def write(
    root: str, image, n: int = N, shard_size: int = 7, bad: tuple[int, ...] = (), truncated: tuple[int, ...] = ()
) -> str:
    """``n`` samples ``k{i:06d}`` (label ``i % 3``) of ``image(i)``; the samples in ``bad`` are not JPEGs (the header
    fails), those in ``truncated`` a photo cut short (the header reads, the pixels fail)."""

    def data(i: int) -> bytes:
        if i in truncated:
            photo = jpeg_bytes(1, i, (96, 72))
            return photo[: len(photo) // 3]
        return b"\xff\xd8 not a jpeg" if i in bad else to_jpeg(image(i))

    return write_keyed(root, data, n, shard_size)


@pytest.fixture(scope="module")
def solid(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("solid")), solid_image)


@pytest.fixture(scope="module")
def smooth(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("smooth")), gradient)


def load(url: str, **kw):
    kw = {"views": VIEWS, "batch_size": 4, "num_workers": 0, "with_keys": True, "seed": 5, **kw}
    return shardkit.load(url, **kw)


# ------------------------------------------------------------------ shapes, order, colours


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_view_shows_its_samples_colour(solid, num_workers):
    loader = load(solid, num_workers=num_workers)
    seen = []
    for views, labels, keys in loader:
        assert isinstance(views, list) and [tuple(v.shape[1:]) for v in views] == [(3, s, s) for s in SHAPES]
        assert all(v.dtype == torch.uint8 and v.shape[0] == len(keys) == len(labels) for v in views)
        assert all(v.is_contiguous(memory_format=torch.channels_last) for v in views)
        assert labels.tolist() == [int(k[1:]) % 3 for k in keys]
        check_colours(views, keys)
        seen += keys
    assert sorted(seen) == [f"k{i:06d}" for i in range(N)]


def test_views_follow_the_documented_geometry(smooth):
    """View ``j`` of a sample is its RandomResizedCrop from uniform columns ``[23 j, 23 j + 23)``, in the order given:
    checked against an independent crop + antialiased resize of the full-resolution decode."""
    loader = load(smooth, num_workers=0, shuffle=False)
    views_of = views_by_key(loader)
    expanded = [v for v in VIEWS for _ in range(v.count)]
    worst = 0.0
    for key, views in views_of.items():
        i = int(key[1:])
        full = torch.from_numpy(np.array(Image.open(io.BytesIO(to_jpeg(gradient(i)))).convert("RGB"))).permute(2, 0, 1)
        h, w = full.shape[1:]
        u = sample_uniforms(5, 0, np.array([i]), CROP_UNIFORMS * len(expanded))
        for j, v in enumerate(expanded):
            uj = u[:, CROP_UNIFORMS * j : CROP_UNIFORMS * (j + 1)]
            top, left, ch, cw = (int(a[0]) for a in rrc_boxes(np.array([w]), np.array([h]), uj, v.scale, v.ratio))
            crop = full[None, :, top : top + ch, left : left + cw].float()
            want = F.interpolate(crop, size=(v.size, v.size), mode="bilinear", antialias=True)[0]
            if v.flip and uj[0, 22] < 0.5:
                want = want.flip(-1)
            err = (views[j].float() - want).abs().mean().item()
            worst = max(worst, err)
            assert err < 6, f"{key} view {j}: mean abs difference {err:.1f} from its documented crop"
    assert worst > 0  # the oracle compared pixels


def test_different_views_of_a_sample_are_different_crops(smooth):
    views = views_by_key(load(smooth))["k000003"]
    for a, b in [(0, 1), (2, 3), (3, 4), (2, 4)]:
        assert not torch.equal(views[a], views[b]), f"views {a} and {b} of one sample are the same crop"


def test_crops_are_a_function_of_seed_epoch_sample_view(smooth):
    one = views_by_key(load(smooth, num_workers=0))
    two = views_by_key(load(smooth, num_workers=2, batch_size=3))
    assert one.keys() == two.keys()
    for key in one:
        assert all(torch.equal(a, b) for a, b in zip(one[key], two[key])), f"{key}: views depend on the workers"
    other_seed = views_by_key(load(smooth, seed=6))
    assert any(not torch.equal(one[k][0], other_seed[k][0]) for k in one)
    nxt = load(smooth)
    nxt.set_epoch(1)
    assert any(not torch.equal(one[k][0], v[0]) for k, v in views_by_key(nxt).items())


# ------------------------------------------------------------------ decode once, skips, ring, prefetcher


def test_each_sample_is_decoded_once_for_all_its_views(tmp_path, monkeypatch):
    """One decode per sample (a counting decoder probe), at the DCT scale its most demanding view needs: the
    largest of 1/2, 1/4, 1/8 that leaves every view's box at least its output size (computed here from the
    documented geometry)."""
    big = lambda i: Image.new("RGB", (320, 240), colour(i))  # noqa: E731
    url = write(str(tmp_path), big, n=12)
    sample_of = {to_jpeg(big(i)): i for i in range(12)}
    asked: list[tuple[int, int, int]] = []
    make = worker_decode.make_decoder

    def counting(name):
        dec = make(name)
        real = dec.decode

        def decode(data, w, h, *a, **kw):
            asked.append((sample_of[bytes(data)], w, h))
            return real(data, w, h, *a, **kw)

        dec.decode = decode
        return dec

    monkeypatch.setattr(worker_decode, "make_decoder", counting)
    delivered = sum(len(keys) for _v, _l, keys in load(url, num_workers=0))
    assert delivered == 12
    assert sorted(i for i, _, _ in asked) == list(range(12)), f"{len(asked)} decodes for 12 samples with 5 views each"
    expanded = [v for v in VIEWS for _ in range(v.count)]
    for i, w, h in asked:
        u = sample_uniforms(5, 0, np.array([i]), CROP_UNIFORMS * len(expanded))
        need = min(
            min(
                int(b[0])
                for b in rrc_boxes(np.array([320]), np.array([240]), u[:, 23 * j : 23 * j + 23], v.scale, v.ratio)[2:]
            )
            / v.size
            for j, v in enumerate(expanded)
        )
        r = max([1] + [r for r in (2, 4, 8) if r <= need])
        assert (w, h) == (-(-320 // r), -(-240 // r)), f"sample {i} decoded at {w} x {h}, its views need 1/{r}"


def test_a_bad_sample_drops_all_its_views_together(tmp_path):
    url = write(str(tmp_path), lambda i: Image.new("RGB", (80, 60), colour(i)), n=12, bad=(1,), truncated=(5, 6))
    seen = []
    for views, _labels, keys in load(url, shuffle=False):
        assert all(v.shape[0] == len(keys) for v in views)
        check_colours(views, keys)
        seen += keys
    assert sorted(seen) == [f"k{i:06d}" for i in range(12) if i not in (1, 5, 6)]


def test_every_batch_travels_in_one_shared_slot(solid):
    loader = load(solid, num_workers=2, batch_size=4)
    batches = [(views, keys) for views, _labels, keys in loader]
    for views, keys in batches:
        check_colours(views, keys)
    ring = loader._pool.ring
    assert ring is not None and ring.leased == len(batches) and ring.unslotted == 0, (ring.leased, ring.unslotted)
    del batches
    loader.close()


def test_device_prefetcher_moves_every_view(solid):
    moved = []

    loader = load(solid, with_keys=False)
    for views, labels in DevicePrefetcher(loader, device="cpu", transform=lambda vs: [v + 0 for v in vs]):
        assert isinstance(views, list) and [v.shape[-1] for v in views] == SHAPES
        moved.append(len(labels))
    assert sum(moved) == N
    from shardkit.loader.prefetch import _map_batch, _tensors

    batch = ([torch.zeros(2), torch.ones(2)], torch.zeros(2, dtype=torch.int64), ["a", "b"])
    assert len(_tensors(batch)) == 3
    mapped = _map_batch(batch, lambda t: t + 1)
    assert [v.tolist() for v in mapped[0]] == [[1, 1], [2, 2]] and mapped[1].tolist() == [1, 1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_prefetcher_moves_every_view_to_cuda(solid):
    for views, labels in DevicePrefetcher(load(solid, with_keys=False, num_workers=2), device="cuda"):
        assert labels.is_cuda and len(views) == len(SHAPES) and all(v.is_cuda and v.dtype == torch.uint8 for v in views)


def test_a_view_batch_pickles_and_pins(solid):
    import pickle

    views, labels, keys = next(iter(load(solid)))
    b = ViewBatch([v.clone() for v in views], labels, torch.arange(len(keys)), keys)
    c = pickle.loads(pickle.dumps(b))
    assert all(torch.equal(x, y) for x, y in zip(b.views, c.views)) and c.keys == keys
    assert [t.shape for t in b.copied(torch.clone).pixels()] == [v.shape for v in views]


# ------------------------------------------------------------------ exactly once, resume


def test_exactly_once_over_ranks_and_workers(solid):
    keys = []
    for rank in range(2):
        for views, _labels, ks in load(solid, rank=rank, world_size=2, num_workers=2, batch_size=3):
            check_colours(views, ks)
            keys += ks
    assert sorted(keys) == [f"k{i:06d}" for i in range(N)]


def test_mid_epoch_resume_with_views(smooth):
    check_resume(lambda **kw: Flat(load(smooth, batch_size=3, num_workers=2, **kw)), after=2, pixels=True)


def test_elastic_resume_with_views(solid):
    res = check_resume(
        lambda **kw: Flat(load(solid, batch_size=3, num_workers=2, **kw)),
        after=2,
        world_size=2,
        resume_world_size=3,
    )
    assert len(res.keys()) == N


def test_a_mixture_with_views_and_sources(solid, tmp_path):
    """Two sources (the solid colours 0..29 and 30..41): each view shows its sample, sources and keys follow it."""
    other = write(str(tmp_path), lambda i: Image.new("RGB", (80, 60), colour(30 + i)), n=12)
    sources = [shardkit.Source(solid, repeat=1), shardkit.Source(other, repeat=1)]
    seen = []
    for views, _labels, keys, source in load(sources, num_workers=2, with_source=True):
        for j, v in enumerate(views):
            for row, (key, src) in enumerate(zip(keys, source.tolist())):
                src_of_key, sample = key.split("/")
                assert int(src_of_key) == src
                r, g, b = v[row].float().mean(dim=(1, 2)).tolist()
                assert image_id((r, g, b)) == int(sample[1:]) + 30 * src, f"view {j} of {key}"
        seen += keys
    assert len(seen) == N + 12 == len(set(seen))


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"preset": "eval"}, "views= and preset= are exclusive"),
        ({"size": 64}, "views= and size= are exclusive"),
        ({"scale": (0.5, 1.0)}, "views= and scale= are exclusive"),
        ({"views": []}, "non-empty list of shardkit.View"),
        ({"views": [(224, 2)]}, "must be shardkit.View objects"),
    ],
)
def test_exclusive_and_unsupported_options_are_one_line_errors(solid, kw, words):
    with pytest.raises(ValueError) as e:
        load(solid, **kw)
    assert words in str(e.value) and "\n" not in str(e.value)


@settings(max_examples=40, deadline=None)
@given(
    size=st.one_of(st.integers(-3, 0), st.floats(1, 9), st.just("224")),
    count=st.one_of(st.integers(-3, 0), st.just(True)),
)
def test_bad_view_size_or_count_is_refused(size, count):
    for kw in ({"size": size}, {"size": 8, "count": count}):
        with pytest.raises(ValueError, match="must be an int >= 1") as e:
            View(**kw)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"scale": (0.0, 1.0)}, "View scale must satisfy"),
        ({"scale": (0.6, 0.4)}, "View scale must satisfy"),
        ({"scale": (0.5, 1.5)}, "View scale must satisfy"),
        ({"ratio": (-1, 2)}, "View ratio must satisfy"),
        ({"ratio": 3}, "View ratio must be a pair"),
        ({"flip": 1}, "View flip must be True or False"),
    ],
)
def test_bad_view_arguments_are_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        View(8, **kw)


def test_view_is_a_frozen_value_exported_from_shardkit():
    assert shardkit.View is View
    v = View(96, scale=[0.05, 0.4], count=8)
    assert v.scale == (0.05, 0.4) and v == View(96, scale=(0.05, 0.4), count=8)
    with pytest.raises(AttributeError):
        v.size = 3


def test_set_epoch_with_a_size_scales_the_views(solid):
    """A size is not silently ignored with views: it scales every view (tests/loader/test_views_resolution.py)."""
    loader = load(solid, num_workers=0, batch_size=4)
    loader.set_epoch(1, size=16)
    assert loader.size == 16 and [v.size for v in loader.views] == [16, 8]
    views, _labels, keys = next(iter(loader))
    assert [v.shape[-1] for v in views] == [16, 16, 8, 8, 8]
    check_colours(views, keys)
    loader.set_epoch(2)  # without a size: kept
    assert loader.epoch == 2 and loader.size == 16
