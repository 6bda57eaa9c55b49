"""Pure pieces of the converter: image processing, planning, tar-size arithmetic."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from shardkit.convert import imageproc as ip
from shardkit.convert import shards as plan
from shardkit.demo.sampledata import make_image
from shardkit.format import EncodedSample, write_shard
from tests.support.data import jpeg_bytes


def _jpeg(size: tuple[int, int], **kw) -> bytes:
    """A photo-like JPEG of ``size`` (``kw``: more PIL save options)."""
    return jpeg_bytes(1, 2, size, **kw)


@pytest.mark.parametrize(
    "size, opts, expected",
    [
        ((500, 375), ip.EncodeConfig(), (341, 256)),
        ((375, 500), ip.EncodeConfig(), (256, 341)),
        ((300, 300), ip.EncodeConfig(), (256, 256)),
        ((200, 100), ip.EncodeConfig(), (200, 100)),  # never upscale
        ((1000, 500), ip.EncodeConfig(short_side=None, max_side=400), (400, 200)),
        ((500, 1000), ip.EncodeConfig(short_side=None, max_side=400), (200, 400)),
        ((300, 200), ip.EncodeConfig(short_side=None, max_side=400), (300, 200)),
    ],
)
def test_target_size(size, opts, expected):
    assert ip.target_size(*size, opts) == expected


def test_options_validation():
    with pytest.raises(ValueError, match="exactly one"):
        ip.EncodeConfig(short_side=256, max_side=512)
    with pytest.raises(ValueError, match="quality"):
        ip.EncodeConfig(quality=100)


def test_draft_used_when_shrinking_a_jpeg(monkeypatch):
    calls = []
    orig = JpegImagePlugin.JpegImageFile.draft

    def spy(self, *a):
        calls.append(a)
        return orig(self, *a)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    out = ip.process(_jpeg((1200, 900)), ip.EncodeConfig(short_side=100))
    assert calls == [("RGB", (133, 100))]
    assert Image.open(io.BytesIO(out.jpeg)).size == (133, 100) and (out.width, out.height) == (1200, 900)
    calls.clear()
    ip.process(_jpeg((300, 200)), ip.EncodeConfig(short_side=150))  # less than 2x: full decode
    assert calls == []


@pytest.mark.parametrize("size,short", [((1200, 900), 100), ((1000, 777), 250), ((2001, 1003), 120)])
def test_draft_scale_decode_by_simplejpeg_equals_pillows_draft(monkeypatch, size, short):
    """simplejpeg decodes a shrinking JPEG at the scale Pillow's draft chose: the same pixels, so the same bytes."""
    if ip._fast() is None:
        pytest.skip("simplejpeg/torch not installed: Pillow decodes every image")
    data, opts = _jpeg(size), ip.EncodeConfig(short_side=short)
    decoded = []
    real = ip._sj_decode
    monkeypatch.setattr(ip, "_sj_decode", lambda *a: decoded.append(a[2:]) or real(*a))
    fast = ip.process(data, opts)
    im = Image.open(io.BytesIO(data))
    im.draft("RGB", ip.target_size(*size, opts))
    assert decoded == [im.size] and im.size != size  # decoded by simplejpeg, at the draft's reduced size
    monkeypatch.setattr(ip, "_sj_decode", lambda *a: None)  # Pillow's draft decode
    assert ip.process(data, opts) == fast


def test_output_is_baseline_and_deterministic():
    data = _jpeg((320, 240), progressive=True)
    a = ip.process(data, ip.EncodeConfig(short_side=120, quality=80))
    b = ip.process(data, ip.EncodeConfig(short_side=120, quality=80))
    assert a == b
    im = Image.open(io.BytesIO(a.jpeg))
    assert im.mode == "RGB" and not im.info.get("progressive") and not im.info.get("exif")


def _png_claiming(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (8, 8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty"),
        (b"GIF89a not really", "not_an_image"),
        (b"plain text", "not_an_image"),
        (_jpeg((64, 48))[:300], "corrupt"),
        (_png_claiming(200_000, 200_000), "too_many_pixels"),  # 40G pixels: refused from the header
    ],
)
def test_skip_reasons(data, reason):
    with pytest.raises(ip.SkipImage) as exc:
        ip.process(data, ip.EncodeConfig(max_pixels=10_000_000))
    assert exc.value.reason.value == reason


def test_mode_conversions():
    rgba = np.zeros((10, 10, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, 5:, 3] = 255
    out = ip._to_rgb(Image.fromarray(rgba))
    arr = np.asarray(out)
    assert out.mode == "RGB" and (arr[:, :5] == 255).all() and (arr[:, 5:] == [200, 0, 0]).all()
    i16 = Image.fromarray(np.full((4, 4), 65535, np.uint16))
    assert np.asarray(ip._to_rgb(i16)).min() == 255
    i16 = Image.fromarray(np.full((4, 4), 32768, np.uint16))
    assert np.asarray(ip._to_rgb(i16)).max() == 128
    assert ip._to_rgb(Image.new("CMYK", (4, 4), (0, 0, 0, 0))).getpixel((0, 0)) == (255, 255, 255)
    assert ip._to_rgb(Image.new("1", (4, 4), 1)).mode == "RGB"


def test_tar_size_matches_writer():
    rng = np.random.default_rng(0)
    samples = [
        EncodedSample(
            f"{i:08d}",
            bytes(int(rng.integers(0, 3000))),
            int(rng.integers(0, 1000)),
            {"path": f"c/ü {i}.jpg", "class": "c", "width": 5, "height": 7},
        )
        for i in range(23)
    ]
    for n in (1, 2, 7, 23):
        buf = io.BytesIO()
        _, nbytes, _ = write_shard(samples[:n], buf)
        assert nbytes == plan.shard_bytes_for(sum(plan.tar_size(s) for s in samples[:n])) == len(buf.getvalue())


def test_pack_and_split_at_cap():
    sizes = [3000] * 10
    cap = plan.shard_bytes_for(3 * 3000)
    assert plan.split_at_cap(sizes, cap) == 3
    assert plan.split_at_cap([cap * 2, 10], cap) == 1  # one oversized sample still gets a shard
    streamed = plan.CapSplit(cap)  # the streaming form the writer uses: a prefix, even if a later sample would fit
    assert [streamed.fits(s) for s in [3000, 3000, 3000, 3000, 10]] == [True, True, True, False, False]
    assert all(plan.CapSplit(None).fits(s) for s in [cap * 2] * 3)
    groups = plan.pack(sizes, 2, cap)
    assert groups == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    groups = plan.pack(sizes, None, cap)
    assert [b - a for a, b in groups] == [3, 3, 3, 1]
    assert all(plan.shard_bytes_for(sum(sizes[a:b])) <= cap for a, b in groups)


def test_order_and_tasks_are_partitions():
    from shardkit.convert.scan.source import SourceFile

    files = [SourceFile(f"c{i % 3}/{i:03d}.jpg", i % 3, 10) for i in range(50)]
    a = plan.order(files, seed=5, shuffle=True)
    assert a == plan.order(list(reversed(files)), seed=5, shuffle=True)  # only sorted order matters
    assert sorted(it.index for it in a) == list(range(50)) and [it.index for it in a] != list(range(50))
    assert [it.index for it in plan.order(files, 5, False)] == list(range(50))
    owned = [plan.task_shards(11, 4, i) for i in range(4)]
    assert sorted(j for o in owned for j in o) == list(range(11))
    assert plan.shard_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    for cap in (10**6, 3 * 10**5, 123_457):  # the byte cap binds: shards stay within it, and are not much smaller
        n = plan.samples_per_shard(1000, 100, cap, [20_000] * 5)
        assert (
            plan.shard_bytes_for(n * 20_000) <= cap < plan.shard_bytes_for((n + 1) * 20_000) / plan.FILL_TARGET * 1.1
        ), (cap, n)
    assert plan.samples_per_shard(1000, 30, 10**6, [20_000] * 5) == 30
    assert plan.samples_per_shard(10, None, 10**9, [20_000]) == 10


@pytest.mark.parametrize(
    "size, target",
    [((500, 375), (341, 256)), ((375, 500), (256, 341)), ((1000, 300), (853, 256)), ((257, 256), (256, 255))],
)
def test_torch_resize_matches_pil_bilinear(size, target):
    arr = make_image(3, 1, size)
    ours = ip.resize_bilinear(arr, *target)
    pil = np.asarray(Image.fromarray(arr).resize(target, Image.Resampling.BILINEAR))
    assert ours.shape == pil.shape and ours.dtype == np.uint8
    diff = np.abs(ours.astype(int) - pil)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.02  # same filter, rounding differs at most by 1
    assert np.array_equal(ours, ip.resize_bilinear(arr.copy(), *target))  # deterministic


def test_fast_path_close_to_pillow_path_and_deterministic(monkeypatch):
    data = _jpeg((500, 375))
    opts = ip.EncodeConfig()
    fast = ip.process(data, opts)
    assert fast == ip.process(data, opts)
    if ip._fast() is not None:
        assert "simplejpeg" in ip.encoder_version() and "torch" in ip.encoder_version()
    monkeypatch.setattr(ip, "_fast", lambda: None)  # the Pillow-only fallback
    slow = ip.process(data, opts)
    assert "torch" not in ip.encoder_version()
    a, b = (np.asarray(Image.open(io.BytesIO(e.jpeg))).astype(int) for e in (fast, slow))
    assert a.shape == b.shape == (256, 341, 3) and (fast.width, fast.height) == (500, 375)
    assert np.abs(a - b).mean() < 2.0
    im = Image.open(io.BytesIO(fast.jpeg))
    assert not im.info.get("progressive") and not im.info.get("exif")
    assert JpegImagePlugin.get_sampling(im) == 2  # 4:2:0
    assert im.quantization == Image.open(io.BytesIO(slow.jpeg)).quantization  # same tables for --quality


def test_fast_path_keeps_exif_rotation_and_falls_back_on_truncated_jpeg():
    ex = Image.Exif()
    ex[0x0112] = 6  # rotate 90
    out = ip.process(_jpeg((400, 300), exif=ex.tobytes()), ip.EncodeConfig(short_side=150))
    assert Image.open(io.BytesIO(out.jpeg)).size == (150, 200) and (out.width, out.height) == (300, 400)
    with pytest.raises(ip.SkipImage) as exc:
        ip.process(_jpeg((400, 300))[:-400], ip.EncodeConfig(short_side=150))
    assert exc.value.reason is ip.SkipReason.CORRUPT


def test_torch_not_used_where_pillow_would_reduce_or_filter_differs():
    assert ip._torch_resizes(500, 375, 341, 256, ip.Resample.BILINEAR)
    assert not ip._torch_resizes(500, 375, 341, 256, ip.Resample.BICUBIC)
    assert not ip._torch_resizes(3000, 2000, 384, 256, ip.Resample.BILINEAR)  # Pillow's reducing_gap pre-reduces
