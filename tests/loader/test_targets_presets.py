"""The aspect-preserving presets' geometry: ``detect`` (scale jitter, crop or pad, flip) and ``letterbox``.

Checked against the definitions, by plain arithmetic on each sample: the image keeps its aspect (to the pixel),
its longer side becomes ``s * size`` with ``s`` in ``scale`` (``letterbox``: exactly ``size``), the window is
``size`` x ``size`` at whole scaled pixels, crops where the scaled image is larger and pads where it is smaller,
``letterbox`` centres it; a sample's geometry is a pure function of ``(seed, epoch, gid)`` (not of its batch);
every dataset (with or without targets) loads with both presets. The targets' oracle over these presets is
``tests/loader/test_targets_oracle.py`` (:mod:`tests.support.scene_crops`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.demo.scenes import write_scenes
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder


def image_in_output(box, w: int, h: int, size: int) -> tuple[float, float, float, float]:
    """Where the stored image ``[0, w] x [0, h]`` lands in the output, by the box's linear map."""
    x0, y0, x1, y1 = box
    fx, fy = size / (x1 - x0), size / (y1 - y0)
    return -x0 * fx, -y0 * fy, (w - x0) * fx, (h - y0) * fy


sizes = st.tuples(st.integers(1, 700), st.integers(1, 700))


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)
@given(wh=st.lists(sizes, min_size=1, max_size=6), size=st.integers(4, 300), seed=st.integers(0, 999))
@example(wh=[(340, 90)], size=119, seed=872)  # 90 * 119 / 340 is exactly 31.5
def test_letterbox_fits_the_longer_side_and_centres(wh, size, seed):
    dec = CropDecoder(ImageConfig(preset="letterbox", size=size), seed)
    crops = dec.geometry(np.array(wh), 0, np.arange(len(wh)))
    assert not crops.flips.any()
    for (w, h), box in zip(wh, crops.boxes.tolist()):
        a0, b0, a1, b1 = image_in_output(box, w, h, size)
        long_side, short_side = (a1 - a0, b1 - b0) if w >= h else (b1 - b0, a1 - a0)
        assert long_side == pytest.approx(size, abs=1e-6)
        assert short_side == pytest.approx(max(1, round(min(w, h) * size / max(w, h))), abs=1e-6)
        for lo, hi in ((a0, a1), (b0, b1)):
            assert lo == pytest.approx(round(lo), abs=1e-6), "the image starts at a whole output pixel"
            assert lo == pytest.approx((size - round(hi - lo)) // 2, abs=1e-6), "centred (the odd pixel at the end)"


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)
@given(
    wh=st.lists(sizes, min_size=1, max_size=6),
    size=st.integers(4, 300),
    seed=st.integers(0, 999),
    scale=st.tuples(st.floats(0.1, 2.0), st.floats(0.0, 1.5)).map(lambda t: (t[0], t[0] + t[1])),
)
def test_detect_scales_then_crops_or_pads(wh, size, seed, scale):
    dec = CropDecoder(ImageConfig(preset="detect", size=size, scale=scale), seed)
    gids = np.arange(len(wh)) * 7 + 3
    crops = dec.geometry(np.array(wh), 2, gids)
    for k, ((w, h), box) in enumerate(zip(wh, crops.boxes.tolist())):
        a0, b0, a1, b1 = image_in_output(box, w, h, size)
        long_side = max(a1 - a0, b1 - b0)
        assert scale[0] * size - 0.5 - 1e-6 <= long_side <= max(1, scale[1] * size + 0.5) + 1e-6
        long_stored, short_stored = max(w, h), min(w, h)
        short_side = min(a1 - a0, b1 - b0) if w != h else b1 - b0
        assert short_side == pytest.approx(round(short_side), abs=1e-6), "whole pixels"
        assert abs(short_side - max(1.0, short_stored * long_side / long_stored)) <= 1 + 1e-6, "aspect (to the pixel)"
        for lo, hi in ((a0, a1), (b0, b1)):
            assert lo == pytest.approx(round(lo), abs=1e-6), "whole scaled pixels"
            if hi - lo >= size:
                assert lo <= 1e-6 and hi >= size - 1e-6, "larger: a crop inside the image"
            else:
                assert lo >= -1e-6 and hi <= size + 1e-6, "smaller: the whole image, padded"
        # a pure function of (seed, epoch, gid): the same alone as in its batch
        alone = dec.geometry(np.array([wh[k]]), 2, gids[k : k + 1])
        assert alone.boxes[0].tolist() == box and bool(alone.flips[0]) == bool(crops.flips[k])
    other = dec.geometry(np.array(wh), 3, gids)
    assert len(wh) < 3 or not np.array_equal(other.boxes, crops.boxes), "another epoch, other crops"


def test_detect_flips_about_half_and_scale_default():
    cfg = ImageConfig(preset="detect", size=64)
    assert cfg.scale == (0.5, 1.5) and ImageConfig().scale == (0.08, 1.0)
    assert cfg.updated(preset="train").scale == (0.08, 1.0), "the preset's default follows the preset"
    assert ImageConfig(preset="detect", scale=(0.9, 1.1)).updated(preset="train").scale == (0.9, 1.1)
    flips = CropDecoder(cfg, 0).geometry(np.full((400, 2), 100), 0, np.arange(400)).flips
    assert 150 < flips.sum() < 250
    assert (
        not CropDecoder(ImageConfig(preset="detect", size=64, flip=False), 0)
        .geometry(np.full((50, 2), 100), 0, np.arange(50))
        .flips.any()
    )


@pytest.mark.parametrize("preset", ["detect", "letterbox"])
def test_every_dataset_loads_with_the_detection_presets(tmp_path, preset):
    """A classification dataset (tuples) and a scenes dataset (targets), padding black, sizes as asked."""
    from tests.support.data import write_fields_dataset

    plain = write_fields_dataset(str(tmp_path / "plain"), ["image", "label"])
    images, labels = next(iter(shardkit.load(plain, preset=preset, size=24, batch_size=4, num_workers=0)))
    assert images.shape == (4, 3, 24, 24) and images.dtype == torch.uint8 and labels.shape == (4,)
    scenes = write_scenes(str(tmp_path / "scenes"), 6, size=(120, 40))
    b = next(iter(shardkit.load(scenes, preset=preset, size=32, batch_size=6, num_workers=0, fields=("image", "mask"))))
    pad = b["mask"] == 255
    assert pad.any(), "a 3:1 image in a square window is padded"
    assert (b["image"].permute(0, 2, 3, 1)[pad] == 0).all()


@pytest.mark.parametrize("preset", ["detect", "letterbox"])
def test_device_decode_takes_the_detection_presets(tmp_path, preset):
    """``decode_on="device"`` cuts the same windows (tests/loader/decode/test_device.py compares the pixels)."""
    scenes = write_scenes(str(tmp_path / "scenes"), 6)
    kw = dict(preset=preset, size=40, batch_size=3, seed=1, num_workers=0, decoder="torchvision", fields=("image",))
    dev = [b["image"] for b in shardkit.load(scenes, decode_on="device", **kw)]
    work = [b["image"] for b in shardkit.load(scenes, **kw)]
    assert len(dev) == len(work) == 2
    for a, b in zip(dev, work):
        assert a.shape == b.shape and (a.int() - b.int()).abs().max() <= 2
