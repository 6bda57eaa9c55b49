"""Image conversion at its edges: ``--copy`` proves each JPEG decodes, JPEG's side limit, ICC profiles, transparency
and odd modes, exact large shrinks, one ``--quality`` range. Each promise is checked against a simple reference."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageCms

from shardkit.cli import main
from shardkit.convert import ConvertConfig, convert
from shardkit.convert import colour as col
from shardkit.convert import imageproc as ip
from shardkit.errors import ConvertError
from shardkit.format.manifest import load_manifest
from tests.support import icc
from tests.support.data import jpeg_bytes

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], max_examples=25, deadline=None)
JPEG = jpeg_bytes(1, 2, (120, 90))


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(float)


# ---------------------------------------------------------------- --copy proves each JPEG decodes


@SETTINGS
@given(cut=st.integers(1, len(JPEG) - 700), pillow_only=st.booleans())
@example(cut=2000, pillow_only=False)
@example(cut=2000, pillow_only=True)
@example(cut=1, pillow_only=False)
def test_copy_skips_what_a_conversion_skips(cut, pillow_only):
    """A JPEG cut short (or cut and closed with an end-of-image marker) is ``corrupt`` under ``--copy`` exactly when
    it is without it, and kept byte for byte otherwise; with simplejpeg or with Pillow alone."""
    damaged = JPEG[:-cut] if cut % 3 else JPEG[: -cut - 2] + b"\xff\xd9"
    outcomes = []
    with pytest.MonkeyPatch.context() as mp:
        if pillow_only:
            mp.setattr(ip, "_fast", lambda: None)
        for copy in (True, False):
            try:
                outcomes.append(ip.process(damaged, ip.EncodeConfig(short_side=64, copy=copy)).jpeg)
            except ip.SkipImage as exc:
                outcomes.append(exc.reason)
        kept, converted = outcomes
        assert kept == (ip.SkipReason.CORRUPT if converted == ip.SkipReason.CORRUPT else damaged)
        if cut % 3 and cut > 50:
            assert kept == ip.SkipReason.CORRUPT  # a cut into the entropy-coded data: nothing can decode it
        assert ip.process(JPEG, ip.EncodeConfig(short_side=64, copy=True)).jpeg == JPEG


def test_convert_copy_counts_a_truncated_jpeg_as_corrupt(tmp_path):
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    (src / "good.jpg").write_bytes(JPEG)
    (src / "cut.jpg").write_bytes(JPEG[:-2000])
    result = convert(
        str(tmp_path / "src"), str(tmp_path / "out"), ConvertConfig(ip.EncodeConfig(copy=True)), workers=1, quiet=True
    )
    assert (result.converted, result.skipped_reasons) == (1, {"corrupt": 1})
    assert [(s.path, s.reason) for s in load_manifest(str(tmp_path / "out" / "train")).skipped] == [
        ("cat/cut.jpg", "corrupt")
    ]


# ---------------------------------------------------------------- JPEG's side limit


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (its data is 8x8: only the header is read before the checks)."""
    import struct
    import zlib

    data = bytearray(_encode(Image.new("L", (8, 8)), "PNG"))
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return bytes(data)


@SETTINGS
@given(
    w=st.integers(1, 1900),  # w x h under Pillow's own decompression-bomb limit (178,956,970 pixels)
    h=st.integers(60_000, 90_000),
    side=st.sampled_from([("short", 256), ("short", 2000), ("max", 256), ("max", 65_500)]),
    transpose=st.booleans(),
)
@example(w=200, h=70_000, side=("short", 256), transpose=False)
@example(w=200, h=70_000, side=("max", 256), transpose=True)
def test_a_stored_side_over_65500_is_too_large_for_jpeg(w, h, side, transpose):
    """Skipped as ``too_large_for_jpeg`` exactly when the stored size has a side over 65,500, from the header alone
    (the claimed pixels are not there: what becomes of an image within the limit does not matter here)."""
    w, h = (h, w) if transpose else (w, h)
    opts = (
        ip.EncodeConfig(short_side=side[1])
        if side[0] == "short"
        else ip.EncodeConfig(short_side=None, max_side=side[1])
    )
    too_large = max(ip.target_size(w, h, opts)) > 65_500
    try:
        ip.process(_png_claiming(w, h), replace(opts, max_pixels=10**9))
        reason, detail = None, ""
    except ip.SkipImage as exc:
        reason, detail = exc.reason, exc.detail
    assert (reason is ip.SkipReason.TOO_LARGE_FOR_JPEG) == too_large, (reason, detail)
    if too_large:
        assert "65,500" in detail and "--max-side" in detail


def test_a_tall_image_is_shrunk_with_max_side_and_sides_over_the_limit_are_refused():
    tall = _encode(Image.fromarray(np.tile(np.linspace(0, 255, 200).astype(np.uint8), (70_000, 1))), "PNG")
    with pytest.raises(ip.SkipImage, match="too_large_for_jpeg: 200x70000 would be stored as 200x70000"):
        ip.process(tall, ip.EncodeConfig())
    assert Image.open(io.BytesIO(ip.process(tall, ip.EncodeConfig(short_side=None, max_side=256)).jpeg)).size == (
        1,
        256,
    )
    for bad in (dict(short_side=70_000), dict(short_side=None, max_side=65_501)):
        with pytest.raises(ValueError, match="at most 65500"):
            ip.EncodeConfig(**bad)


# ---------------------------------------------------------------- exact large shrinks


@SETTINGS
@given(
    n=st.integers(6, 3000),
    m=st.integers(1, 40),
    t=st.integers(1, 40),
    ends=st.tuples(st.integers(0, 255), st.integers(0, 255)),
    vertical=st.booleans(),
    resample=st.sampled_from(list(ip.Resample)),
)
@example(n=200, m=40, t=1, ends=(0, 255), vertical=False, resample=ip.Resample.BILINEAR)
@example(n=70_000, m=2, t=2, ends=(0, 255), vertical=True, resample=ip.Resample.BILINEAR)
def test_large_shrinks_are_exact_area_averages(n, m, t, ends, vertical, resample):
    """An axis shrunk to one pixel by any filter (all are symmetric) is the exact mean of a linear ramp along it,
    whatever the reduction factor, divisor of ``n`` or not; the other axis is constant."""
    t = min(t, m)
    ramp = np.rint(np.linspace(*ends, n)).astype(np.uint8)
    arr = np.tile(ramp[:, None], (1, m)) if vertical else np.tile(ramp[None, :], (m, 1))
    size = (t, 1) if vertical else (1, t)
    out = np.asarray(ip.resize_pil(Image.fromarray(arr), *size, resample)).astype(float)
    assert np.abs(out - ramp.mean()).max() <= 1.0, (out.ravel()[:4], ramp.mean())


def test_process_shrinks_a_200x70000_ramp_to_its_mean(monkeypatch):
    ramp = np.tile(np.rint(np.linspace(0, 255, 200)).astype(np.uint8), (70_000, 1))
    out = _pixels(
        ip.process(_encode(Image.fromarray(ramp), "PNG"), ip.EncodeConfig(short_side=None, max_side=256)).jpeg
    )
    assert out.shape == (256, 1, 3) and abs(out.mean() - ramp.mean()) <= 1.5


# ---------------------------------------------------------------- ICC profiles

P3 = icc.rgb_profile(icc.DISPLAY_P3, name="P3-like")
ADOBE = icc.rgb_profile(icc.ADOBE_RGB, name="AdobeRGB-like")
SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _vivid(size=(96, 64)) -> np.ndarray:
    """Smooth saturated colours (JPEG keeps them within a few levels; a profile moves them by tens)."""
    y, x = np.mgrid[0 : size[1], 0 : size[0]] / max(size)
    return np.stack([40 + 200 * x, 200 - 150 * y, 60 + 100 * x * y], axis=-1).astype(np.uint8)


def _reference(arr: np.ndarray, profile: bytes) -> np.ndarray:
    src = ImageCms.ImageCmsProfile(io.BytesIO(profile))
    return np.asarray(
        ImageCms.profileToProfile(Image.fromarray(arr), src, ImageCms.createProfile("sRGB"), outputMode="RGB")
    ).astype(float)


@pytest.mark.parametrize("profile", [P3, ADOBE], ids=["p3", "adobe"])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("copy", [False, True])
def test_profiles_are_converted_to_srgb(profile, fmt, copy):
    arr = _vivid()
    data = _encode(Image.fromarray(arr), fmt, icc_profile=profile, **({"quality": 95} if fmt == "JPEG" else {}))
    ref, raw = _reference(arr, profile), arr.astype(float)
    assert np.abs(ref - raw).mean() > 8  # the profile matters for these colours
    out = ip.process(data, ip.EncodeConfig(copy=copy))
    assert out.jpeg != data
    assert np.abs(_pixels(out.jpeg) - ref).mean() < 3.0
    kept = ip.process(data, ip.EncodeConfig(copy=copy, colour="raw"))
    assert np.abs(_pixels(kept.jpeg) - raw).mean() < 3.0
    assert (kept.jpeg == data) == (copy and fmt == "JPEG")


def test_gray_profiles_and_exif_rotation():
    gray = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (40, 1))
    profile = icc.gray_profile(gamma=1.0)
    ref = _reference(np.stack([gray] * 3, -1), icc.rgb_profile(gamma=1.0))[..., 0]  # a linear gray, as a linear RGB
    out = _pixels(ip.process(_encode(Image.fromarray(gray), "PNG", icc_profile=profile), ip.EncodeConfig()).jpeg)
    assert np.abs(out[..., 0] - ref).mean() < 3.0 and np.abs(ref - gray).mean() > 20
    ex = Image.Exif()
    ex[0x0112] = 6
    arr = _vivid()
    data = _encode(Image.fromarray(arr), "JPEG", quality=95, icc_profile=P3, exif=ex.tobytes())
    out = _pixels(ip.process(data, ip.EncodeConfig()).jpeg)
    assert np.abs(out - np.rot90(_reference(arr, P3), k=-1)).mean() < 3.0


def test_copy_keeps_srgb_profiles_and_the_option_is_part_of_the_conversion(tmp_path):
    data = _encode(Image.fromarray(_vivid()), "JPEG", quality=90, icc_profile=SRGB)
    assert ip.process(data, ip.EncodeConfig(copy=True)).jpeg == data  # an sRGB profile needs nothing
    assert ip.EncodeConfig().colour is col.Colour.SRGB
    with pytest.raises(ValueError, match="srgb, raw"):
        ip.EncodeConfig(colour="p3")
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "x.jpg").write_bytes(data)
    convert(str(tmp_path / "src"), str(tmp_path / "out"), ConvertConfig(), workers=1, quiet=True)
    assert load_manifest(str(tmp_path / "out" / "train")).options["colour"] == "srgb"
    with pytest.raises(ConvertError, match="--colour was 'srgb', now 'raw'"):
        convert(
            str(tmp_path / "src"),
            str(tmp_path / "out"),
            ConvertConfig(ip.EncodeConfig(colour="raw")),
            workers=1,
            quiet=True,
        )


# ---------------------------------------------------------------- transparency and odd modes

MODES = [
    "1",
    "L",
    "L+tRNS",
    "LA",
    "P",
    "P+alpha",
    "RGB",
    "RGB+tRNS",
    "RGBA",
    "I;16",
    "I;16+tRNS",
    "I",
    "F",
    "F>1",
    "CMYK",
]


def _over_white(v: np.ndarray, a: np.ndarray) -> np.ndarray:
    return (v * a[..., None] + 255.0 * (255 - a[..., None])) / 255


def _sample(kind: str, w: int, h: int, seed: int) -> tuple[Image.Image, str, np.ndarray]:
    """A ``kind`` image, the format it is saved in, and what it should become (float RGB), by a plain rule."""
    rng = np.random.default_rng(seed)
    u8 = lambda *shape: rng.integers(0, 256, (h, w, *shape)).astype(np.uint8)  # noqa: E731
    if kind == "1":
        bits = rng.integers(0, 2, (h, w)).astype(bool)
        return Image.fromarray(bits), "PNG", np.repeat(bits[..., None] * 255.0, 3, -1)
    if kind in ("L", "L+tRNS"):
        g = u8()
        im = Image.fromarray(g)
        rgb = np.repeat(g[..., None].astype(float), 3, -1)
        if kind == "L":
            return im, "PNG", rgb
        im.info["transparency"] = int(g[0, 0])
        return im, "PNG", np.where((g == g[0, 0])[..., None], 255.0, rgb)
    if kind == "LA":
        la = u8(2)
        return Image.fromarray(la, "LA"), "PNG", _over_white(np.repeat(la[..., :1].astype(float), 3, -1), la[..., 1])
    if kind in ("P", "P+alpha"):
        palette, idx = rng.integers(0, 256, (256, 3)).astype(np.uint8), u8()
        im = Image.fromarray(idx, "P")
        im.putpalette(palette.ravel().tolist())
        rgb = palette[idx].astype(float)
        if kind == "P":
            return im, "PNG", rgb
        alpha = rng.integers(0, 256, 256).astype(np.uint8)
        im.info["transparency"] = alpha.tobytes()
        return im, "PNG", _over_white(rgb, alpha[idx])
    if kind in ("RGB", "RGB+tRNS"):
        rgb = u8(3)
        rgb[-1, -1] = rgb[0, 0]
        im = Image.fromarray(rgb)
        if kind == "RGB":
            return im, "PNG", rgb.astype(float)
        im.info["transparency"] = tuple(int(c) for c in rgb[0, 0])
        return im, "PNG", np.where((rgb == rgb[0, 0]).all(-1)[..., None], 255.0, rgb.astype(float))
    if kind == "RGBA":
        rgba = u8(4)
        return Image.fromarray(rgba), "PNG", _over_white(rgba[..., :3].astype(float), rgba[..., 3])
    if kind in ("I;16", "I;16+tRNS"):
        v = rng.integers(0, 65536, (h, w)).astype(np.uint16)
        im = Image.fromarray(v)
        rgb = np.repeat((v >> 8)[..., None].astype(float), 3, -1)
        if kind == "I;16":
            return im, "PNG", rgb
        im.info["transparency"] = int(v[0, 0])
        return im, "PNG", np.where((v == v[0, 0])[..., None], 255.0, rgb)
    if kind == "I":
        v = rng.integers(-70_000, 200_000, (h, w)).astype(np.int32)
        return Image.fromarray(v), "TIFF", np.repeat((np.clip(v, 0, 65535) >> 8)[..., None].astype(float), 3, -1)
    if kind in ("F", "F>1"):
        f = rng.uniform(0, 1, (h, w)) if kind == "F" else rng.uniform(-20, 400, (h, w))
        f = f.astype(np.float32)
        scaled = f.astype(float) * (255 if kind == "F" else 1)
        return Image.fromarray(f), "TIFF", np.repeat(np.clip(np.rint(scaled), 0, 255)[..., None], 3, -1)
    assert kind == "CMYK"
    cmyk = u8(4).astype(float)
    return Image.fromarray(cmyk.astype(np.uint8), "CMYK"), "TIFF", (255 - cmyk[..., :3]) * (255 - cmyk[..., 3:]) / 255


@SETTINGS
@given(kind=st.sampled_from(MODES), w=st.integers(1, 7), h=st.integers(1, 7), seed=st.integers(0, 2**16))
@example(kind="RGB+tRNS", w=3, h=2, seed=0)
@example(kind="L+tRNS", w=3, h=2, seed=0)
@example(kind="I;16+tRNS", w=3, h=2, seed=0)
@example(kind="LA", w=3, h=2, seed=0)
@example(kind="P+alpha", w=3, h=2, seed=0)
@example(kind="F", w=3, h=2, seed=0)
@example(kind="F>1", w=3, h=2, seed=0)
def test_every_mode_becomes_the_reference_rgb(kind, w, h, seed):
    """Each mode, saved and read back as a real file, becomes what a plain per-pixel rule says; transparency of
    every kind (alpha, palette alpha, ``tRNS`` colour keys) is composited onto white."""
    im, fmt, want = _sample(kind, w, h, seed)
    saved = Image.open(
        io.BytesIO(_encode(im, fmt, **({"transparency": im.info["transparency"]} if "transparency" in im.info else {})))
    )
    out = col.to_rgb(saved)
    assert out.mode == "RGB" and out.size == (w, h)
    assert np.abs(np.asarray(out).astype(float) - want).max() <= 1.0, kind


def test_a_float_tiff_through_process_is_not_black():
    f = np.full((20, 30), 0.5, np.float32)
    out = _pixels(ip.process(_encode(Image.fromarray(f), "TIFF"), ip.EncodeConfig()).jpeg)
    assert np.abs(out - 128).max() <= 2


# ---------------------------------------------------------------- one --quality range


@pytest.mark.parametrize("command", [["sample-data", "{tmp}/sd"], ["convert", "{tmp}/nowhere", "{tmp}/out"]])
def test_quality_is_1_to_95_for_convert_and_sample_data(tmp_path, capsys, command):
    args = [a.format(tmp=tmp_path) for a in command]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--help"])
    assert exc.value.code == 0 and "1-95" in capsys.readouterr().out
    for bad in ("0", "96", "100"):
        assert main([*args, "--quality", bad]) != 0
        err = capsys.readouterr().err
        assert "between 1 and 95" in err and "Traceback" not in err
