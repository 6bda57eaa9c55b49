"""DeviceDecoder (decode_on="device"): same crops as the worker path, batched decode, fallbacks, drops.

Tolerances against the worker path (:class:`CropDecoder`, per-sample decode + torch's antialiased
bilinear uint8 resize), on CPU where both decode with libjpeg-turbo:

* eval preset, and train with ``fast_decode=False`` when no DCT scaling applies: max 2 levels
  (the worker's fixed-point filter weights and its rounding between the two passes);
* default train preset: mean absolute difference <= 6 levels; the difference is the worker's
  decode (fast integer IDCT, plain chroma upsampling, DCT-scaled decode of large crops), which
  the device path does not imitate (it decodes at full resolution, exactly).

On CUDA nvJPEG's IDCT and chroma upsampling differ from libjpeg-turbo's: mean <= 2 levels.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image

import shardkit.loader.decode.cropresize as cr
import shardkit.loader.decode.device as dd
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry
from shardkit.loader.decode.jpegroute import jpeg_route
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import jpeg_bytes
from tests.support.decode_paths import EPOCH, SEED, device_path, diff, encode, worker_path
from tests.support.resume import check_resume

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]
# landscape, portrait, a panorama (eval crops it first), square; at size 24 (eval: resize 27) the worker decodes
# them at full size (libjpeg-turbo scales by k/8 only when a smaller scale still covers the target)
MIXED = [(40, 30), (30, 40), (100, 20), (29, 29)]


def test_boxes_are_the_worker_boxes_and_independent_of_the_batch():
    cfg = ImageConfig(preset="train", size=24)
    jpegs = [encode(MIXED[i % 4], i) for i in range(12)]
    gids = np.arange(500, 512)
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, gids)
    cd = CropDecoder(cfg, SEED)
    for i in range(12):  # the worker computes each sample's crop from (seed, epoch, gid) alone
        one = cd.geometry(np.array([cd.header(jpegs[i])]), EPOCH, gids[i : i + 1])
        assert geo.crops.boxes[i].tolist() == one.boxes[0].tolist() and bool(geo.crops.flips[i]) == bool(one.flips[0])
    perm = np.random.default_rng(0).permutation(12)
    shuffled = batch_geometry(CropDecoder(cfg, SEED), [jpegs[i] for i in perm], EPOCH, gids[perm])
    assert np.array_equal(shuffled.crops.boxes, geo.crops.boxes[perm]) and np.array_equal(
        shuffled.crops.flips, geo.crops.flips[perm]
    )
    assert geo.crops.flips.any() and not geo.crops.flips.all()
    # and the pixels of a sample do not depend on the rest of its batch
    full, _, _ = device_path(cfg, jpegs, gids, "cpu")
    half, _, _ = device_path(cfg, jpegs[:5], gids[:5], "cpu")
    assert torch.equal(full.images[:5], half.images)


@pytest.mark.parametrize("device", DEVICES)
def test_eval_matches_worker_bilinear(device):
    cfg = ImageConfig(preset="eval", size=24)  # resize 27: no DCT scaling of these sizes in the worker
    jpegs = [encode(MIXED[i % 4], i) for i in range(8)]
    gids = np.arange(8)
    ref, kept = worker_path(cfg, jpegs, gids)
    got, _, dec = device_path(cfg, jpegs, gids, device)
    assert kept == list(range(8)) and got.kept.tolist() == kept and got.errors == ()
    d = diff(got.images, ref)
    if device == "cpu":
        assert d.max() <= 2, d.max()
    else:
        assert d.mean() <= 2, d.mean()
    assert dec.stats.batched == 8 and dec.stats.samples == 8 and not dec.stats.fallback


@pytest.mark.parametrize("device", DEVICES)
def test_train_matches_worker(device):
    gids = np.arange(100, 112)
    # accurate decode and only upscaling crops: the worker decodes at full size too
    exact = ImageConfig(preset="train", size=48, fast_decode=False)
    jpegs = [encode(MIXED[i % 4], i) for i in range(12)]
    ref, _ = worker_path(exact, jpegs, gids)
    got, _, _ = device_path(exact, jpegs, gids, device)
    d = diff(got.images, ref)
    assert d.mean() <= 2 and (device != "cpu" or d.max() <= 2), (d.mean(), d.max())
    # the default train preset: the worker decodes with the fast IDCT and DCT-scales large crops
    default = ImageConfig(preset="train", size=16)
    jpegs = [encode((64, 48), i) for i in range(12)]
    ref, _ = worker_path(default, jpegs, gids)
    got, _, _ = device_path(default, jpegs, gids, device)
    assert diff(got.images, ref).mean() <= 6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("preset", ["detect", "letterbox"])
@pytest.mark.parametrize("size", [24, 48, 90])
def test_detection_presets_match_worker(device, preset, size):
    """``detect``/``letterbox`` on the device: the window's pixels as the worker cuts them (whole decoded pixels,
    full-resolution decode on both sides: no DCT scaling at these sizes), the padding exactly where the worker pads
    (0), mirrored with the window."""
    cfg = ImageConfig(preset=preset, size=size, fast_decode=False, decoder="torchvision")
    gids = np.arange(200, 216)
    jpegs = [encode(MIXED[i % 4], i) for i in range(16)]
    ref, kept = worker_path(cfg, jpegs, gids)
    got, _, _ = device_path(cfg, jpegs, gids, device)
    assert got.kept.tolist() == kept == list(range(16))
    a, b = got.images.cpu(), ref
    pad_dev, pad_ref = (a == 0).all(1), (b == 0).all(1)  # [n, S, S]: every channel 0
    inner = ~(pad_dev | pad_ref)
    assert pad_ref.any(), "the examples must pad somewhere"
    d = diff(a, b)
    if device == "cpu":
        assert d.max() <= 2, d.max()
    else:
        assert d.mean() <= 2, d.mean()
    # where one side pads the other is black too (the image content is never black here: encode()'s gradients)
    assert bool(inner.any()) and torch.equal(pad_dev, pad_ref)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels_last", [True, False])
def test_output_dtype_layout_shape(device, channels_last):
    cfg = ImageConfig(preset="train", size=20, channels_last=channels_last)
    jpegs = [encode(MIXED[i % 4], i) for i in range(5)]
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, np.arange(5))
    x = DeviceDecoder(cfg, device)(
        [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs], geo.sizes, geo.crops
    ).images  # tensors work too
    assert x.dtype == torch.uint8 and tuple(x.shape) == (5, 3, 20, 20) and x.device.type == device
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    assert x.is_contiguous(memory_format=fmt)
    empty = DeviceDecoder(cfg, device)([], np.zeros((0, 2), np.int64), dd.Crops(np.zeros((0, 4)), np.zeros(0, bool)))
    assert tuple(empty.images.shape) == (0, 3, 20, 20) and len(empty.kept) == 0


def test_routes_by_header():
    rgb = (40, 30)
    assert jpeg_route(encode(rgb, 0)) is None
    assert jpeg_route(encode(rgb, 0, subsampling=0)) is None  # 4:4:4
    assert jpeg_route(encode(rgb, 0, subsampling=1)) is None  # 4:2:2
    assert jpeg_route(encode(rgb, 0, mode="L")) is None  # gray
    exif = Image.Exif()
    exif[0x010F] = "camera"  # APP1 (EXIF) and APP2 (ICC) segments before the frame header are skipped
    assert jpeg_route(encode(rgb, 0, exif=exif.tobytes(), icc_profile=b"\0" * 3000)) is None
    assert jpeg_route(encode(rgb, 0, optimize=True, restart_marker_blocks=1)) is None
    assert jpeg_route(encode(rgb, 0, progressive=True)) == "progressive"
    assert jpeg_route(encode(rgb, 0, mode="CMYK")) == "cmyk"
    assert jpeg_route(encode(rgb, 0, fmt="PNG")) == "not-jpeg"
    assert jpeg_route(jpeg_bytes(1)[:10]) == "damaged"
    assert jpeg_route(data := jpeg_bytes(1)) is None and jpeg_route(data[:-300]) == "truncated"
    assert jpeg_route(data + bytes(40)) is None  # padding after the end-of-image marker
    data = encode(rgb, 0)
    assert jpeg_route(torch.frombuffer(bytearray(data), dtype=torch.uint8)) is None


@pytest.mark.parametrize("device", DEVICES)
def test_fallbacks_are_decoded_on_cpu_and_counted(device):
    cfg = ImageConfig(preset="eval", size=24)
    size = (40, 30)
    jpegs = [
        encode(size, 0),
        encode(size, 1, progressive=True),
        encode(size, 2, mode="CMYK"),
        encode(size, 3, mode="L"),
        encode(size, 4, fmt="PNG"),
        encode(size, 5, subsampling=0),
    ]
    gids = np.arange(6)
    ref, kept = worker_path(cfg, jpegs, gids)
    got, _, dec = device_path(cfg, jpegs, gids, device)
    assert kept == list(range(6)) and got.kept.tolist() == kept  # the batch stays whole
    d = diff(got.images, ref)
    assert (d.max() <= 2) if device == "cpu" else (d.mean() <= 2), d.max()
    assert dec.stats.fallback == Counter({"progressive": 1, "cmyk": 1, "not-jpeg": 1})
    assert dec.stats.batched + dec.stats.retried == 3 and dec.stats.corrupt == 0 and dec.stats.samples == 6
    if device == "cpu":
        assert dec.stats.batched == 3


@pytest.mark.parametrize("device", DEVICES)
def test_corrupt_sample_is_dropped_like_the_worker(device):
    cfg = ImageConfig(preset="eval", size=24)
    good = [encode((40, 30), i) for i in range(7)]
    broken = good[3][: len(good[3]) * 2 // 3]  # header intact, scan cut short: routed to the CPU, which fails
    i = good[4].index(b"\xff\xc4")
    bogus = (
        good[4][: i + 5] + b"\xff" * 16 + good[4][i + 21 :]
    )  # a Huffman table libjpeg rejects: the batched call fails
    no_header = b"\xff\xd8\xff\xe0garbage"
    jpegs = good[:3] + [broken] + good[3:5] + [no_header] + good[5:] + [bogus]
    gids = np.arange(len(jpegs))
    ref, kept = worker_path(cfg, jpegs, gids)
    got, geo, dec = device_path(cfg, jpegs, gids, device)
    assert [e[0] for e in geo.errors] == [6]  # unreadable header: skipped before decoding, as in the worker
    assert geo.kept[got.kept].tolist() == kept == [0, 1, 2, 4, 5, 7, 8]  # the same samples survive both paths
    assert [geo.kept[e[0]] for e in got.errors] == [3, 9] and all("cannot decode image" in e[1] for e in got.errors)
    assert dec.stats.corrupt == 2 and dec.stats.samples == 7 and dec.stats.fallback == Counter({"truncated": 1})
    assert dec.stats.batched + dec.stats.retried == 7
    d = diff(got.images, ref)
    assert (d.max() <= 2) if device == "cpu" else (d.mean() <= 2)
    clean, _, _ = device_path(
        cfg, [jpegs[i] for i in kept], gids[kept], device
    )  # bisection does not change good samples
    assert torch.equal(clean.images.cpu(), got.images.cpu())


def test_batchable_samples_are_decoded_in_one_list_call(monkeypatch):
    calls = []
    real = dd._decode_list

    def counting(tensors, device, backend):
        calls.append(len(tensors))
        return real(tensors, device, backend)

    monkeypatch.setattr(dd, "_decode_list", counting)
    cfg = ImageConfig(preset="train", size=16)
    jpegs = [encode(MIXED[i % 4], i) for i in range(10)] + [encode((40, 30), 10, progressive=True)]
    got, _, dec = device_path(cfg, jpegs, np.arange(11), "cpu")
    assert calls == [10] and dec.stats.batched == 10 and len(got.kept) == 11
    again = DeviceDecoder(cfg, "cpu")  # routes computed by the decoder itself: the same
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, np.arange(11))
    assert torch.equal(again(jpegs, geo.sizes, geo.crops).images, got.images) and again.stats == dec.stats


def test_canvas_budget_does_not_change_pixels():
    cfg = ImageConfig(preset="train", size=16)
    jpegs = [encode(MIXED[i % 4], i) for i in range(9)]
    whole, _, _ = device_path(cfg, jpegs, np.arange(9), "cpu")
    one_by_one, _, _ = device_path(cfg, jpegs, np.arange(9), "cpu", max_canvas_pixels=1)
    assert torch.equal(whole.images, one_by_one.images)
    views = [torch.arange(3 * h * w, dtype=torch.uint8).view(3, h, w)[:, 1:, ::2] for h, w in [(5, 7), (9, 4), (2, 2)]]
    assert torch.equal(cr.padded(views), cr.padded_by_copy(views))
    assert [
        len(c) for c in cr.canvas_groups(np.array([4, 1, 9, 100]), np.array([2, 1, 3, 10]), np.array([2, 1, 3, 10]), 30)
    ] == [3, 1]


def test_invalid_arguments():
    with pytest.raises(ValueError, match="hook"):
        DeviceDecoder(ImageConfig(hook=abs))
    with pytest.raises(ValueError, match="max_canvas_pixels"):
        DeviceDecoder(ImageConfig(), max_canvas_pixels=0)
    dec = DeviceDecoder(ImageConfig(size=16))
    with pytest.raises(ValueError, match="must match"):
        dec([jpeg_bytes(0)], np.zeros((2, 2), np.int64), dd.Crops(np.zeros((2, 4)), np.zeros(2, bool)))
    with pytest.raises(ValueError, match="routes"):
        dec(
            [jpeg_bytes(0)],
            np.zeros((1, 2), np.int64),
            dd.Crops(np.zeros((1, 4)), np.zeros(1, bool)),
            routes=[None, None],
        )


def test_route_never_raises_on_damaged_headers():
    data = encode((40, 30), 0)
    routes = {jpeg_route(data[:n]) for n in range(0, len(data) - 2, 7)}  # prefixes
    assert routes <= {"not-jpeg", "damaged", "truncated"}
    rng = np.random.default_rng(0)
    for _ in range(200):
        junk = np.frombuffer(data[:400], np.uint8).copy()
        junk[rng.integers(2, 400, 8)] = rng.integers(0, 256, 8)
        assert jpeg_route(junk.tobytes() + data[400:]) in {
            None,
            "damaged",
            "truncated",
            "progressive",
            "sof",
            "precision",
            "cmyk",
            "components",
            "rgb",
            "subsampling",
        }


@pytest.mark.parametrize("preset", ["eval", "train"])
def test_raw_loader_batches_decoded_on_device_equal_the_loaders(tmp_path, preset):
    """The loader's raw batches (2 workers) decoded on the device give the decoded loader's batches:
    the same keys in the same order, every key once, and the same pixels within the stated tolerance."""
    import shardkit
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "train"), num_samples=40, shard_size=9, size=(40, 30))
    opts = dict(
        batch_size=8, num_workers=2, seed=SEED, preset=preset, size=24, shuffle=preset == "train", fast_decode=False
    )
    decoded = list(shardkit.load(ds.url, with_keys=True, **opts))
    raw_loader = shardkit.load(ds.url, raw=True, **opts)
    cfg = raw_loader.config.image  # the loader's own image options
    cd, dec = CropDecoder(cfg, SEED), DeviceDecoder(cfg, "cpu")
    keys, worst = [], 0.0
    for (images, labels, batch_keys), raw in zip(decoded, raw_loader, strict=True):
        geo = batch_geometry(cd, [s.jpeg for s in raw], raw_loader.epoch, np.array([s.gid for s in raw]))
        out = dec([raw[i].jpeg for i in geo.kept], geo.sizes, geo.crops, geo.routes)
        kept = [raw[i] for i in geo.kept[out.kept]]
        assert [s.key for s in kept] == list(batch_keys) and [s.label for s in kept] == labels.tolist()
        d = diff(out.images, images)
        worst = max(worst, float(d.mean()))
        if preset == "eval":
            assert d.max() <= 2
        keys += [s.key for s in kept]
    assert sorted(keys) == sorted(ds.keys)
    assert worst <= 6


def test_a_sample_the_batched_decoder_rejects_is_decoded_on_cpu(monkeypatch):
    """Fault injection: the batched decoder rejects one sample (as nvJPEG may for a file libjpeg reads);
    bisection still decodes the others in batches and the one alone on the CPU, pixels unchanged."""
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = [encode(MIXED[i % 4], i) for i in range(9)]
    clean, _, _ = device_path(cfg, jpegs, np.arange(9), "cpu")
    real, calls = dd._decode_list, []

    def rejecting(tensors, device, backend):
        calls.append(len(tensors))
        if any(bytes(t.numpy()) == jpegs[5] for t in tensors):
            raise RuntimeError("Error while decoding JPEG images: injected")
        return real(tensors, device, backend)

    monkeypatch.setattr(dd, "_decode_list", rejecting)
    got, _, dec = device_path(cfg, jpegs, np.arange(9), "cpu")
    assert got.kept.tolist() == list(range(9)) and got.errors == ()
    assert dec.stats.retried == 1 and dec.stats.batched == 8 and dec.stats.corrupt == 0
    assert calls[0] == 9 and len(calls) <= 2 * 4 + 1  # bisection: O(log n) calls for one bad sample
    assert torch.equal(got.images, clean.images)


def test_filter_is_torchs_antialiased_bilinear():
    """cropresize against F.interpolate(antialias=True) in float: integer crops (train) and resize-then-crop (eval)."""
    import torch.nn.functional as F

    rng = np.random.default_rng(1)
    s, n = 16, 12
    images = [
        torch.from_numpy(rng.integers(0, 256, (3, int(h), int(w)), dtype=np.uint8))
        for h, w in rng.integers(6, 70, (n, 2))
    ]
    dims = np.array([t.shape[1:] for t in images])  # (h, w)
    x0, y0 = (rng.random(n) * dims[:, 1] * 0.5).astype(int), (rng.random(n) * dims[:, 0] * 0.5).astype(int)
    x1 = x0 + 1 + (rng.random(n) * (dims[:, 1] - x0 - 1)).astype(int)
    y1 = y0 + 1 + (rng.random(n) * (dims[:, 0] - y0 - 1)).astype(int)
    flips = rng.random(n) < 0.5
    box = np.ones(n, bool)
    px = cr.axis_params(s, dims[:, 1].astype(float), dims[:, 1].astype(float), x0.astype(float), x1.astype(float), box)
    py = cr.axis_params(s, dims[:, 0].astype(float), dims[:, 0].astype(float), y0.astype(float), y1.astype(float), box)
    got = cr.resized_crops(images, px, py, flips, torch.empty(n, 3, s, s, dtype=torch.uint8), 1 << 20)
    for i, t in enumerate(images):
        ref = F.interpolate(
            t[None, :, y0[i] : y1[i], x0[i] : x1[i]].float(),
            size=(s, s),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
        ref = ref.round().clamp(0, 255)[0]
        assert (got[i].float() - (ref.flip(-1) if flips[i] else ref)).abs().max() <= 1, i
    # eval: the whole image resized to (nh, nw), then an s x s window at (top, left) of it
    nh, nw = dims[:, 0] // 2 + s, dims[:, 1] // 2 + s
    top, left = (nh - s) // 2, (nw - s) // 2
    sx, sy = nw / dims[:, 1], nh / dims[:, 0]
    whole = np.zeros(n, bool)
    px = cr.axis_params(s, dims[:, 1].astype(float), dims[:, 1].astype(float), left / sx, (left + s) / sx, whole)
    py = cr.axis_params(s, dims[:, 0].astype(float), dims[:, 0].astype(float), top / sy, (top + s) / sy, whole)
    got = cr.resized_crops(images, px, py, np.zeros(n, bool), torch.empty(n, 3, s, s, dtype=torch.uint8), 1 << 20)
    for i, t in enumerate(images):
        ref = F.interpolate(
            t[None].float(), size=(int(nh[i]), int(nw[i])), mode="bilinear", antialias=True, align_corners=False
        )
        ref = ref.round().clamp(0, 255)[0, :, top[i] : top[i] + s, left[i] : left[i] + s]
        assert (got[i].float() - ref).abs().max() <= 1, i


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_memory_is_freed_per_batch():
    cfg = ImageConfig(preset="train", size=32)
    jpegs = [encode(MIXED[i % 4], i) for i in range(16)] + [encode((40, 30), 99, progressive=True)]
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, np.arange(len(jpegs)))
    dec = DeviceDecoder(cfg, "cuda")
    dec(jpegs, geo.sizes, geo.crops)  # warm-up: nvJPEG's own buffers
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    for _ in range(3):
        out = dec(jpegs, geo.sizes, geo.crops)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() - base <= out.images.numel() + (2 << 20)  # only the output stays
        del out


# --- the loader with decode_on="device" --------------------------------------------------------

LOADER = dict(pin_memory=False, multiprocessing_context="fork", seed=SEED, size=24)


def loader_batches(url, **kw):
    import shardkit

    loader = shardkit.load(url, with_keys=True, **{**LOADER, **kw})
    return loader, [(im, lab, list(keys)) for im, lab, keys in loader]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from tests.support.data import write_dataset

    return write_dataset(str(tmp_path_factory.mktemp("devwire") / "train"), num_samples=30, shard_size=4, size=(40, 30))


@pytest.mark.parametrize("preset", ["eval", "train"])
def test_loader_decode_on_device_gives_the_worker_batches(small, preset):
    """Iterating a decode_on="device" loader (2 workers; decoded on the CPU in the main process) gives the
    worker path's batches: the same keys and labels in the same order, pixels within the stated tolerance."""
    opts = dict(batch_size=8, num_workers=2, preset=preset, fast_decode=False)
    _, ref = loader_batches(small.url, **opts)
    loader, got = loader_batches(small.url, decode_on="device", **opts)
    assert [(lab.tolist(), k) for _, lab, k in got] == [(lab.tolist(), k) for _, lab, k in ref]
    assert sorted(k for _, _, ks in got for k in ks) == sorted(small.keys)
    d = torch.cat([diff(a, b).flatten() for (a, _, _), (b, _, _) in zip(got, ref)])
    assert got[0][0].dtype == torch.uint8 and got[0][0].shape[1:] == (3, 24, 24)
    assert got[0][0].is_contiguous(memory_format=torch.channels_last)
    assert (d.max() <= 2) if preset == "eval" else (d.mean() <= 6)
    assert loader.stats.samples == 30 and loader.stats.skipped == 0 and loader.stats.batches == len(got)
    assert loader.device_decoder().stats.samples == 30
    assert loader._pool.ring is None  # no pixel slots in shared memory: the workers send bytes


def test_workers_send_bytes_and_the_worker_paths_geometry(small):
    """decode_on="device" batches carry each sample's bytes (one flat buffer), header size and exactly the
    crop boxes and flips the worker path computes for the same (seed, epoch, sample)."""
    from shardkit.loader import LoaderConfig, ShardDataset
    from shardkit.loader.config import WorkerConfig
    from shardkit.plan import PlanConfig

    cfg = LoaderConfig(
        PlanConfig(batch_size=8, seed=SEED),
        ImageConfig(size=24, decode_on="device"),
        workers=WorkerConfig(num_workers=0),
    )
    raw = {
        s.key: s
        for b in ShardDataset(
            small.url, LoaderConfig(PlanConfig(batch_size=8, seed=SEED), workers=WorkerConfig(num_workers=0), raw=True)
        )
        for s in b.raw
    }
    ds = ShardDataset(small.url, cfg)
    ds.set_epoch(EPOCH)
    cd, n = CropDecoder(cfg.image, SEED), 0
    for b in ds:
        jp = b.encoded
        assert not hasattr(b, "images") and len(jp) == len(b.keys) and jp.data.dtype == np.uint8
        assert [bytes(t.numpy()) for t in jp.tensors()] == [raw[k].jpeg for k in b.keys]
        assert jp.sizes.tolist() == [list(cd.header(raw[k].jpeg)) for k in b.keys]
        ref = cd.geometry(jp.sizes, EPOCH, b.gids.numpy())
        assert np.array_equal(jp.boxes, ref.boxes) and np.array_equal(jp.flips, ref.flips)
        n += len(b.keys)
    assert n == 30


def test_device_decode_exactly_once_resume_and_elastic_resume(small):
    """The plan does not depend on where decoding happens: every key once over 2 ranks x 2 workers, a
    mid-epoch resume gives the remaining batches (same pixels), and 3 -> 2 ranks still covers each key once."""
    import shardkit

    kw = dict(batch_size=3, num_workers=2, persistent_workers=False, shuffle_buffer=5, decode_on="device")
    seen = Counter()
    for rank in range(2):
        _, batches = loader_batches(small.url, rank=rank, world_size=2, **kw)
        seen.update(k for _, _, ks in batches for k in ks)
    assert sorted(seen) == sorted(small.keys) and set(seen.values()) == {1}

    def make(**topo):
        return shardkit.load(small.url, with_keys=True, **topo, **{**LOADER, **kw})

    check_resume(make, after=4, pixels=True)
    res = check_resume(
        make,
        after=2,
        world_size=3,
        resume_world_size=2,
        resume=lambda **topo: shardkit.load(small.url, with_keys=True, **topo, **{**LOADER, **kw, "num_workers": 1}),
    )
    assert sorted(res.keys()) == sorted(small.keys)  # every key once


def write_with_bad(root: str, not_jpeg: int = 3, cut: int = 8) -> list[str]:
    """12 samples in 2 shards: ``k003`` is not a JPEG (its header fails in the worker), ``k008``'s scan is cut short
    (its header is fine: it fails when decoded, in the consumer with decode_on="device")."""
    from shardkit.format import EncodedSample
    from tests.support.data import write_samples

    shards, keys = [], [f"k{i:03d}" for i in range(12)]
    for start in (0, 6):
        datas = [encode((40, 30), i) for i in range(start, start + 6)]
        datas = [
            b"this is not a jpeg" if i == not_jpeg else d[: len(d) * 2 // 3] if i == cut else d
            for i, d in enumerate(datas, start)
        ]
        shards.append([EncodedSample(keys[i], d, i % 2, {"class": str(i % 2)}) for i, d in enumerate(datas, start)])
    write_samples(root, shards, ["a", "b"])
    return keys


@pytest.mark.parametrize("num_workers", [0, 2])
def test_device_decode_skips_bad_samples_like_the_worker_and_strict_raises(tmp_path, caplog, num_workers):
    """Bad samples are dropped from their batch, logged and counted in stats.skipped, exactly the ones the
    worker path drops (a bad header in the worker, a bad scan in the consumer); strict=True raises naming the key."""
    import logging

    import shardkit
    from shardkit.errors import DataError

    root = str(tmp_path / "bad")
    keys = write_with_bad(root)
    opts = dict(batch_size=4, num_workers=num_workers, preset="eval", shuffle=False)
    worker, ref = loader_batches(root, **opts)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        loader, got = loader_batches(root, decode_on="device", **opts)
    assert [k for _, _, k in got] == [k for _, _, k in ref] and len(got) == 3
    assert sorted(k for _, _, ks in got for k in ks) == sorted(set(keys) - {"k003", "k008"})
    assert loader.stats.skipped == worker.stats.skipped == 2 and loader.stats.samples == worker.stats.samples == 10
    assert all(diff(a, b).max() <= 2 for (a, _, _), (b, _, _) in zip(got, ref))
    logged = [r.getMessage() for r in caplog.records if "k008" in r.getMessage()]
    assert len(logged) == 1 and "train-000001.tar" in logged[0] and "cannot decode image" in logged[0]
    assert loader.device_decoder().stats.corrupt == 1
    only_cut = write_with_bad(str(tmp_path / "cut"), not_jpeg=-1)  # k008 alone: it fails in the consumer
    for url, bad in ((root, "k003"), (str(tmp_path / "cut"), "k008")):
        strict = shardkit.load(url, strict=True, **{**LOADER, **opts, "decode_on": "device"})
        with pytest.raises(DataError, match=bad):
            list(strict)
    assert len(only_cut) == 12


def test_decode_on_option_is_a_typed_choice():
    from shardkit.loader.config import DecodeOn, build_config

    assert (
        ImageConfig().decode_on is DecodeOn.WORKER
        and build_config(None, {"decode_on": "device"}).image.decode_on is DecodeOn.DEVICE
    )
    with pytest.raises(ValueError, match=r"\['worker', 'device'\]"):
        ImageConfig(decode_on="gpu")
    with pytest.raises(ValueError, match="decode_on='worker'"):
        ImageConfig(decode_on="device", batch_hook=print)


def test_a_device_decoding_loader_is_freed_when_dropped(tmp_path):
    """In a fresh process (the JPEG backend's first import -- TorchCodec's or torchvision's -- happens in the
    loader's first decode), a
    decode_on="device" loader is freed by reference counting when dropped, not left to the garbage collector."""
    from tests.support.probes import run_fresh

    code = """
import gc, json, sys, weakref
gc.disable()
from tests.support.data import write_dataset
import shardkit
ds = write_dataset(sys.argv[1], num_samples=8, shard_size=4, size=(40, 30))
loader = shardkit.load(ds.url, batch_size=4, num_workers=0, size=16, decode_on="device", pin_memory=False)
n = sum(len(y) for _, y in loader)
ref = weakref.ref(loader)
del loader
from shardkit.loader.decode.backend import _MODULES, default_backend  # the backend's first import happened in the decode
print(json.dumps({"n": n, "alive": ref() is not None, "tv": _MODULES[default_backend()] in sys.modules}))
"""
    assert run_fresh(code, str(tmp_path / "ds")) == {"n": 8, "alive": False, "tv": True}


def test_a_mixtures_per_source_stats_count_device_decode_drops_as_skipped(tmp_path):
    """A sample the consumer cannot decode moves from its source's ``samples`` to its ``skipped``, as in the worker path."""
    from shardkit import Source

    bad, clean = str(tmp_path / "bad"), str(tmp_path / "clean")
    write_with_bad(bad)  # k003 fails in the worker, k008 in the consumer
    write_with_bad(clean, not_jpeg=-1, cut=-1)
    sources = [Source(bad, repeat=1), Source(clean, repeat=1)]
    opts = dict(batch_size=4, num_workers=0, preset="eval", shuffle=False)
    worker, ref = loader_batches(sources, **opts)
    device, got = loader_batches(sources, decode_on="device", **opts)
    assert [k for _, _, k in got] == [k for _, _, k in ref]
    assert worker.stats.sources == device.stats.sources
    assert [(s.samples, s.skipped) for s in device.stats.sources] == [(10, 2), (12, 0)]
    assert device.stats.samples == 22 and device.stats.skipped == 2


# --------------------------------------------------------------------------- C1: a barrier before nvJPEG
def test_the_batched_decode_waits_for_the_current_stream_first(monkeypatch):
    """nvJPEG writes from its own stream without waiting for the caller's (pytorch/vision#9606): every batched
    device decode must sync the current stream of its device before it starts, whatever the backend."""
    import shardkit.loader.decode.backend as backend

    calls: list[str] = []

    class Stream:
        def synchronize(self) -> None:
            calls.append("sync")

    def fake_decode(tensors, device):
        calls.append("decode")
        return [torch.zeros(3, 2, 2, dtype=torch.uint8) for _ in tensors]

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    for name in list(backend.DECODE):
        monkeypatch.setitem(backend.DECODE, name, fake_decode)
        calls.clear()
        dd._decode_list([torch.zeros(4, dtype=torch.uint8)], torch.device("cuda", 0), name)
        assert calls == ["sync", "decode"], name
    calls.clear()
    dd._decode_list([torch.zeros(4, dtype=torch.uint8)], torch.device("cpu"), name)
    assert calls == ["decode"]  # off CUDA there is no stream to wait for


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_decode_after_queued_reads_of_freed_blocks_leaves_them_intact():
    """The upstream pattern: kernels queued on the current stream read a block, the block is freed (the caching
    allocator may hand it to the decode's outputs at once), then a batched decode: the queued reads must see the
    old contents, and the decoded pixels must equal the CPU decode's."""
    dev = torch.device("cuda")
    jpegs = [jpeg_bytes(i % 4, seed=i, size=(512, 384)) for i in range(16)]
    tensors = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    for backend_name in ("torchcodec", "torchvision"):
        try:
            dd.import_backend(backend_name)
        except Exception:  # noqa: BLE001 - a backend this install lacks
            continue
        x = torch.randn(2048, 2048, device=dev)
        want = (x.double() @ x.double()).float().cpu()
        y = x
        for _ in range(8):  # a long queue of reads of x's block
            y = x @ x
        del x  # x's block goes back to the allocator while the matmuls are still queued
        images = dd._decode_list(tensors, dev, backend_name)
        torch.testing.assert_close(y.cpu(), want, rtol=1e-3, atol=1e-1)
        cpu = dd._decode_list(tensors, torch.device("cpu"), backend_name)
        for a, b in zip(images, cpu):
            assert (a.cpu().int() - b.int()).abs().max() <= 2
