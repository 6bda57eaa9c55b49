"""Progressive resolution with ``views=``: ``set_epoch(epoch, size=S)`` scales every view by ``S / views[0].size``.

Oracles: an independent size reference (:class:`fractions.Fraction`: nearest int, halves up, at least 1) over
generated view lists; solid-colour images (every view of every row shows its key's colour) over a size schedule
with persistent workers, exactly once per epoch; the crop geometry at a scaled size against the documented
geometry drawn directly (``sample_uniforms`` + ``rrc_boxes``, no size involved) and the pixels against an
independent crop + antialiased resize of the full decode; a mid-epoch resume after a size change
(``check_resume``, pixels compared); the device path cuts at the epoch's sizes too.
"""

from __future__ import annotations

import io
import logging
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
from shardkit.loader import View
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.cropgeometry import CROP_UNIFORMS, rrc_boxes, sample_uniforms
from shardkit.loader.decode.multicrop import ViewDecoder
from tests.support.resume import check_resume
from tests.support.views import (
    Flat,
    N,
    check_colours,
    gradient,
    solid_image,
    to_jpeg,
    views_by_key,
    write_images,
)

VIEWS = [View(32, scale=(0.4, 1.0), count=2), View(16, scale=(0.05, 0.4), ratio=(0.5, 2.0), count=3)]
SEED = 5


def scaled_reference(sizes: list[int], new: int) -> list[int]:
    """Each size times ``new / sizes[0]``, to the nearest int with halves up, at least 1 (exact fractions)."""
    out = []
    for s in sizes:
        x = Fraction(s * new, sizes[0])
        n = int(x)  # floor (x > 0)
        out.append(max(1, n + 1 if x - n >= Fraction(1, 2) else n))
    return out


def expanded_sizes(sizes: list[int]) -> list[int]:
    return [s for s, v in zip(sizes, VIEWS) for _ in range(v.count)]


@pytest.fixture(scope="module")
def solid(tmp_path_factory) -> str:
    return write_images(str(tmp_path_factory.mktemp("solid")), solid_image)


@pytest.fixture(scope="module")
def smooth(tmp_path_factory) -> str:
    return write_images(str(tmp_path_factory.mktemp("smooth")), gradient)


def load(url: str, **kw):
    kw = {"views": VIEWS, "batch_size": 4, "num_workers": 0, "with_keys": True, "seed": SEED, **kw}
    return shardkit.load(url, **kw)


# ------------------------------------------------------------------ the size rule


groups = st.lists(
    st.builds(
        View,
        size=st.integers(1, 300),
        scale=st.sampled_from([(0.08, 1.0), (0.05, 0.4)]),
        ratio=st.sampled_from([(3 / 4, 4 / 3), (0.5, 2.0)]),
        flip=st.booleans(),
        count=st.integers(1, 3),
    ),
    min_size=1,
    max_size=4,
)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(views=groups, size=st.integers(1, 400))
@example(views=[View(40), View(2)], size=8)  # 0.4 -> at least 1, not 0
@example(views=[View(32), View(3)], size=16)  # 1.5 -> 2 (halves up)
@example(views=[View(32), View(10)], size=16)  # the first view decides, not the last
@example(views=[View(10), View(7)], size=13)  # 9.1 -> 9; 9.8 would be 10: nearest, not floor
@example(views=[View(224, scale=(0.4, 1.0)), View(96, scale=(0.05, 0.4), count=8)], size=160)
def test_every_view_is_scaled_by_the_first_views_factor(views, size):
    cfg = ImageConfig(views=views)
    got = cfg.at_size(size).views
    assert [v.size for v in got] == scaled_reference([v.size for v in views], size)
    assert got[0].size == size
    for a, b in zip(got, views):  # only the size changes: the crops stay
        assert (a.scale, a.ratio, a.flip, a.count) == (b.scale, b.ratio, b.flip, b.count)
    assert cfg.at_size(0) == cfg and cfg.at_size(views[0].size).views == cfg.views


# ------------------------------------------------------------------ a schedule, persistent workers


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_size_schedule_scales_every_view_exactly_once_per_epoch(solid, num_workers):
    loader = load(solid, num_workers=num_workers, persistent_workers=num_workers > 0)
    dl = None
    for epoch, size in enumerate([32, 16, 24, 16]):
        loader.set_epoch(epoch, size=size)
        want = scaled_reference([v.size for v in VIEWS], size)
        assert loader.size == size and [v.size for v in loader.views] == want
        seen = []
        for views, labels, keys in loader:
            assert [v.shape[-1] for v in views] == [v.shape[-2] for v in views] == expanded_sizes(want)
            assert all(v.dtype == torch.uint8 and v.shape[:2] == (len(keys), 3) for v in views)
            assert labels.tolist() == [int(k[1:]) % 3 for k in keys]
            check_colours(views, keys)
            seen += keys
        assert sorted(seen) == [f"k{i:06d}" for i in range(N)], f"epoch {epoch} at size {size}: not exactly once"
        assert f"views 2x{want[0]} + 3x{want[1]}" in loader.report()
        if num_workers:  # the same persistent workers throughout; smaller views fit their slots
            dl = dl or loader._pool._dl
            assert loader._pool._dl is dl
            assert loader._pool.ring.unslotted == 0
    loader.set_epoch(9)  # no size: kept
    assert loader.size == 16 and [v.size for v in loader.views] == [16, 8]
    loader.close()


def test_loader_size_without_a_schedule_is_the_first_views(solid):
    loader = load(solid)
    assert loader.size == 32 and loader.views == tuple(VIEWS)
    assert "views 2x32 + 3x16" in loader.report()
    loader.set_epoch(0, size=32)  # the configured size: no change
    assert loader.views == tuple(VIEWS) and loader.state_dict()["size"] == 0


# ------------------------------------------------------------------ crops do not depend on the size


def documented(width: int, height: int, gid: int, epoch: int) -> list[tuple[tuple[int, int, int, int], bool]]:
    """Each view's (left, top, right, bottom) and flip, drawn from the configured views: no size involved."""
    views = [v for v in VIEWS for _ in range(v.count)]
    u = sample_uniforms(SEED, epoch, np.array([gid]), CROP_UNIFORMS * len(views))
    out = []
    for j, v in enumerate(views):
        uj = u[:, CROP_UNIFORMS * j : CROP_UNIFORMS * (j + 1)]
        top, left, h, w = (int(a[0]) for a in rrc_boxes(np.array([width]), np.array([height]), uj, v.scale, v.ratio))
        out.append(((left, top, left + w, top + h), bool(v.flip and uj[0, 22] < 0.5)))
    return out


@settings(derandomize=True, deadline=None, max_examples=30)
@given(size=st.integers(1, 96), epoch=st.integers(0, 5), gids=st.lists(st.integers(0, 10**6), min_size=1, max_size=5))
@example(size=16, epoch=1, gids=[3, 7, 123456])
def test_the_crop_boxes_at_any_size_are_the_configured_ones(size, epoch, gids):
    decoder = ViewDecoder(ImageConfig(views=VIEWS).at_size(size), SEED)
    sizes = np.array([[80 + 3 * g % 50, 60 + g % 40] for g in gids], np.int64)
    crops = decoder.view_geometry(sizes, epoch, np.array(gids, np.int64))
    for i, g in enumerate(gids):
        want = documented(int(sizes[i, 0]), int(sizes[i, 1]), g, epoch)
        got = [(tuple(int(x) for x in c.boxes[i]), bool(c.flips[i])) for c in crops]
        assert got == want, f"sample {g} at size {size}: crops moved with the size"


def test_the_views_at_a_size_are_the_documented_crops_resized(smooth):
    loader = load(smooth, shuffle=False)
    loader.set_epoch(1, size=20)
    sizes = expanded_sizes(scaled_reference([v.size for v in VIEWS], 20))
    worst = 0.0
    for key, views in views_by_key(loader).items():
        i = int(key[1:])
        full = torch.from_numpy(np.array(Image.open(io.BytesIO(to_jpeg(gradient(i)))).convert("RGB"))).permute(2, 0, 1)
        h, w = full.shape[1:]
        for j, ((x0, y0, x1, y1), flip) in enumerate(documented(w, h, i, 1)):
            want = F.interpolate(
                full[None, :, y0:y1, x0:x1].float(), size=(sizes[j], sizes[j]), mode="bilinear", antialias=True
            )[0]
            if flip:
                want = want.flip(-1)
            err = (views[j].float() - want).abs().mean().item()
            worst = max(worst, err)
            assert err < 6, f"{key} view {j} at size 20: mean abs difference {err:.1f} from its documented crop"
    assert worst > 0


# ------------------------------------------------------------------ resume, device path, larger sizes


def test_mid_epoch_resume_after_a_size_change(smooth):
    res = check_resume(
        lambda **kw: Flat(load(smooth, batch_size=3, num_workers=2, **kw)),
        after=2,
        pixels=True,
        start=lambda loader: loader.set_epoch(1, size=16),
    )
    assert res.states[0]["size"] == 16
    resumed = res.loaders[0]
    assert (
        resumed.size == 16 and [v.size for v in resumed.views] == [16, 8] and resumed.epoch == 2
    )  # the next epoch keeps it
    assert res.rest[0] and res.rest[0][0].images.shape[1] == 2 * 3 * 16**2 + 3 * 3 * 8**2
    resumed.close()


def test_device_views_are_cut_at_the_epochs_sizes(solid):
    loader = load(solid, decode_on="device")
    for epoch, size in enumerate([16, 40]):
        loader.set_epoch(epoch, size=size)
        want = expanded_sizes(scaled_reference([v.size for v in VIEWS], size))
        seen = []
        for views, _labels, keys in loader:
            assert [v.shape[-1] for v in views] == want
            check_colours(views, keys)
            seen += keys
        assert sorted(seen) == [f"k{i:06d}" for i in range(N)]


def test_a_size_larger_than_the_configured_views_warns_and_goes_to_new_memory(solid, caplog):
    loader = load(solid, num_workers=2)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        loader.set_epoch(0, size=24)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        loader.set_epoch(0, size=48)
    assert len(caplog.records) == 1 and "2x48 + 3x24" in caplog.text and "\n" not in caplog.text.strip()
    seen = []
    for views, _labels, keys in loader:
        assert [v.shape[-1] for v in views] == [48, 48, 24, 24, 24]
        check_colours(views, keys)
        seen += keys
    assert sorted(seen) == [f"k{i:06d}" for i in range(N)]
    loader.close()


def test_a_bad_size_and_hooks_stay_one_line_errors(solid):
    loader = load(solid)
    for bad in (0, -3, 2.5, "32"):
        with pytest.raises(ValueError, match="size must be an int >= 1") as e:
            loader.set_epoch(0, size=bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not supported with views"):
        ImageConfig(views=VIEWS, hook=lambda x: x)
