"""Decoding: RandomResizedCrop geometry distribution, eval preset vs torchvision, decoder fallbacks."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.cropgeometry import rrc_boxes, sample_uniforms
from shardkit.loader.decode.decoders import PilDecoder, make_decoder
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import jpeg_bytes


def ks_stat(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    grid = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


@pytest.mark.parametrize("size", [(320, 240), (256, 256), (900, 120)])  # the last one hits the fallback often
def test_rrc_geometry_matches_torchvision(size):
    from torchvision.transforms import RandomResizedCrop

    width, height = size
    n = 3000
    torch.manual_seed(0)
    img = torch.empty(3, height, width)
    tv = np.array([RandomResizedCrop.get_params(img, (0.08, 1.0), (3 / 4, 4 / 3)) for _ in range(n)], dtype=np.float64)
    u = sample_uniforms(7, 0, np.arange(n))
    ours = np.stack(rrc_boxes(np.full(n, width), np.full(n, height), u, (0.08, 1.0), (3 / 4, 4 / 3)), axis=1).astype(
        np.float64
    )
    for a, b in ((ours, tv),):
        features = {
            "area": a[:, 2] * a[:, 3] / (width * height),
            "aspect": np.log(a[:, 3] / a[:, 2]),
            "cy": a[:, 0] + a[:, 2] / 2,
            "cx": a[:, 1] + a[:, 3] / 2,
        }
        ref = {
            "area": b[:, 2] * b[:, 3] / (width * height),
            "aspect": np.log(b[:, 3] / b[:, 2]),
            "cy": b[:, 0] + b[:, 2] / 2,
            "cx": b[:, 1] + b[:, 3] / 2,
        }
        crit = 1.63 * np.sqrt(2 / n)  # KS critical value at alpha = 0.01
        for k in features:
            assert ks_stat(features[k], ref[k]) < crit, k
    assert (ours[:, 0] >= 0).all() and (ours[:, 0] + ours[:, 2] <= height).all()
    assert (ours[:, 1] >= 0).all() and (ours[:, 1] + ours[:, 3] <= width).all()


def test_crop_depends_on_sample_not_topology():
    d = CropDecoder(ImageConfig(), seed=3)
    sizes = np.array([[300, 200]] * 400)

    def geo(epoch, gids):
        c = d.geometry(sizes[: len(gids)], epoch, np.asarray(gids))
        return c.boxes, c.flips

    boxes, flips = geo(1, range(400))
    # a sample's crop depends only on (seed, epoch, gid): not on its batch or position in it
    again, again_flips = geo(1, range(399, -1, -1))
    assert np.array_equal(boxes, again[::-1]) and np.array_equal(flips, again_flips[::-1])
    alone = geo(1, [42])
    assert np.array_equal(alone[0][0], boxes[42]) and alone[1][0] == flips[42]
    assert not np.array_equal(geo(2, range(400))[0], boxes)  # epochs differ
    assert not np.array_equal(
        CropDecoder(ImageConfig(), seed=4).geometry(sizes, 1, np.arange(400)).boxes, boxes
    )  # seeds differ
    assert 0.4 < flips.mean() < 0.6
    assert len({tuple(b) for b in boxes}) > 390  # samples of one batch get their own crops


def test_sample_uniforms_are_uniform_and_independent():
    u = sample_uniforms(0, 0, np.arange(20000), k=4)
    assert u.shape == (20000, 4) and (u >= 0).all() and (u < 1).all()
    for col in range(4):
        assert ks_stat(u[:, col], np.linspace(0, 1, 20000, endpoint=False)) < 1.63 * np.sqrt(2 / 20000)
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.03
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.03  # neighbouring gids
    assert np.array_equal(
        sample_uniforms(0, 0, np.array([2**40 + 5]), 4), sample_uniforms(0, 0, np.array([2**40 + 5]), 4)
    )


@pytest.mark.parametrize("size", [(300, 200), (180, 260), (1200, 900)])
@pytest.mark.parametrize("decoder", ["auto", "pil", "torchvision"])
def test_eval_preset_close_to_torchvision(size, decoder):
    from torchvision.transforms import v2

    data = jpeg_bytes(2, 5, size)
    ref_img = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    ref = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])(ref_img)
    out = torch.empty(3, 224, 224, dtype=torch.uint8)
    CropDecoder(ImageConfig(preset="eval", decoder=decoder), 0)(data, out, 0, 0)
    diff = (out.float() - ref.float()).abs().mean().item()
    # identical geometry; only DCT-scaled decoding of the large image differs slightly
    assert diff < (4.0 if max(size) > 1000 else 1.0), diff


def test_train_preset_output_and_dct_scaling(monkeypatch):
    data = jpeg_bytes(1, 3, (1600, 1200))
    dec = CropDecoder(ImageConfig(size=64), 0)
    calls = []
    orig = dec.decoder.decode
    monkeypatch.setattr(dec.decoder, "decode", lambda d, w, h, fast=False: calls.append((w, h)) or orig(d, w, h, fast))
    out = torch.zeros(3, 64, 64, dtype=torch.uint8)
    dec(data, out, 0, 0)
    assert out.float().std() > 5  # a real image landed in the batch slot
    assert calls and calls[0][0] < 1600  # decoded below full resolution


def test_non_jpeg_falls_back_to_pil():
    buf = io.BytesIO()
    Image.fromarray(np.full((40, 50, 3), 128, np.uint8)).save(buf, format="PNG")
    out = torch.zeros(3, 32, 32, dtype=torch.uint8)
    CropDecoder(ImageConfig(size=32), 0)(buf.getvalue(), out, 0, 0)
    assert int(out.float().mean()) == 128


def test_grayscale_and_cmyk_jpegs_decode_as_rgb():
    for mode in ("L", "CMYK"):
        buf = io.BytesIO()
        Image.new(mode, (40, 30), 100 if mode == "L" else (0, 0, 0, 0)).save(buf, format="JPEG")
        arr = make_decoder("auto").decode(buf.getvalue(), 40, 30)
        assert arr.shape == (30, 40, 3)


def test_decoders_agree():
    data = jpeg_bytes(0, 1, (200, 150))
    a = make_decoder("auto").decode(data, 200, 150).astype(int)
    b = PilDecoder().decode(data, 200, 150).astype(int)
    assert np.abs(a - b).mean() < 1.0


def test_unknown_decoder_lists_choices():
    with pytest.raises(ValueError, match="choose one of"):
        make_decoder("ffmpeg")


@pytest.mark.parametrize("fast", [False, True])
def test_train_crop_matches_torchvision_resized_crop(fast):
    """The decoded slot is torchvision's resized_crop (+ hflip) of the stored image with the drawn box."""
    from torchvision.transforms.v2 import functional as F

    data = jpeg_bytes(3, 4, (180, 140))  # output larger than any crop: no DCT scaling, only the resize can differ
    dec = CropDecoder(ImageConfig(size=144, fast_decode=fast), seed=5)
    full = torch.from_numpy(PilDecoder().decode(data, 180, 140)).permute(2, 0, 1)
    gids = np.arange(24)
    crops = dec.geometry(np.array([[180, 140]] * len(gids)), 2, gids)
    assert crops.flips.any() and not crops.flips.all()
    for g in gids:
        out = torch.empty(3, 144, 144, dtype=torch.uint8)
        dec(data, out, 2, int(g))
        left, top, right, bottom = (int(v) for v in crops.boxes[g])
        ref = F.resized_crop(full, top, left, bottom - top, right - left, [144, 144], antialias=True)
        if crops.flips[g]:
            ref = F.horizontal_flip(ref)
        diff = (out.float() - ref.float()).abs().mean().item()
        assert diff < (2.5 if fast else 0.5), (g, diff)  # exact; fast IDCT + plain chroma upsampling: ~2 levels


def test_batches_are_channels_last_unless_asked_otherwise(tmp_path):
    import shardkit
    from tests.support.data import write_dataset

    root = str(tmp_path / "ds")
    write_dataset(root, num_samples=40, shard_size=20)
    a = next(iter(shardkit.load(root, batch_size=16, shuffle=False, num_workers=0)))[0]
    b = next(iter(shardkit.load(root, batch_size=16, shuffle=False, num_workers=0, channels_last=False)))[0]
    assert a.shape == b.shape == (16, 3, 224, 224)
    assert a.is_contiguous(memory_format=torch.channels_last) and b.is_contiguous()
    assert torch.equal(a, b)
    assert ImageConfig().fast_decode and not ImageConfig(preset="eval").fast_decode


def test_resize_kernel_equals_public_interpolate(monkeypatch):
    """The direct kernel call (it writes into the batch row) gives F.interpolate's bytes; so does the fallback."""
    import torch.nn.functional as F

    from shardkit.loader.decode import resample as D

    arr = np.random.default_rng(0).integers(0, 256, (256, 341, 3), dtype=np.uint8)
    src = torch.from_numpy(arr).permute(2, 0, 1)
    cases = [((10, 210, 20, 240), 224), ((0, 256, 0, 341), 160), ((30, 90, 40, 100), 224), ((0, 256, 0, 341), 300)]
    for use_kernel in (True, False):
        if not use_kernel:
            monkeypatch.setattr(D, "upsample_bilinear_aa_kernel", lambda: None)
        for (y0, y1, x0, x1), s in cases:
            view = src[:, y0:y1, x0:x1]
            out = D.channels_last_empty((3, s, s))
            D.resize_into(view, out)
            want = F.interpolate(view[None].float(), size=(s, s), mode="bilinear", antialias=True, align_corners=False)
            ref = F.interpolate(
                view[None].contiguous(), size=(s, s), mode="bilinear", antialias=True, align_corners=False
            )[0]
            assert torch.equal(out, ref), (use_kernel, s)
            assert (out.float() - want[0]).abs().max() < 1.01  # and the uint8 kernel is the float filter, rounded
