"""``views=`` with ``decode_on="device"``: each sample decoded once on the consumer's device, every view cut from it.

Runs on CPU tensors (``iter(loader)`` decodes on the CPU). Oracles:

* solid colours, one per sample (keyed): every view of every row must show its key's colour;
* the documented geometry, computed here one sample and one view at a time (view ``j`` reads uniform
  columns ``[23 j, 23 j + 23)`` of ``sample_uniforms(seed, epoch, gid)``): the boxes the worker sends are
  exactly those (and the worker path's), over generated image sizes and view lists;
* images whose pixels tell their id and their geometry (red rises left to right, green top to bottom, blue
  a level per id), each view compared with a deliberately simple reference: PIL decode, crop the
  documented box, torch's antialiased bilinear resize, the documented flip. A view cut from another
  sample, another view's box or without its flip is far off; also after dropped samples;
* the worker path's views of the same dataset and seed (the device-vs-worker tolerance of
  ``tests/loader/decode/test_device.py``: mean <= 6 levels for the default train decode);
* a counting probe: one decode per sample (batched or CPU fallback), one ``resized_crops`` call per view
  group, the fallback at the DCT scale the most demanding view allows.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit
import shardkit.loader.decode.device as dd
import shardkit.loader.decode.deviceviews as dv
from shardkit.errors import DataError
from shardkit.format import RawSample
from shardkit.loader import View, ViewBatch
from shardkit.loader.batching import BatchSpec
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.cropgeometry import CROP_UNIFORMS, rrc_boxes, sample_uniforms
from shardkit.loader.decode.multicrop import ViewDecoder
from shardkit.loader.prefetch import DevicePrefetcher
from shardkit.loader.stats import COUNTERS, Counters
from tests.support.decode_paths import bad_huffman, cut_scan, mean_diff
from tests.support.resume import check_resume
from tests.support.source_reference import colour, image_id
from tests.support.views import Flat, N, check_colours, solid_image, to_jpeg, views_by_key, write_images, write_keyed

SEED, EPOCH = 5, 2
#: three groups: two globals, three locals, one without flips and with other ratios
VIEWS = [
    View(32, scale=(0.4, 1.0), count=2),
    View(16, scale=(0.05, 0.4), count=3),
    View(24, scale=(0.2, 0.6), ratio=(0.5, 2.0), flip=False),
]
EXPANDED = [v for v in VIEWS for _ in range(v.count)]
SHAPES = [v.size for v in EXPANDED]
#: mean absolute difference from the reference (CPU: both decode with libjpeg-turbo at full size; measured < 0.5)
TOLERANCE = 1.0


# ------------------------------------------------------------------ images and datasets


def shape(i: int) -> tuple[int, int]:
    """(width, height) of sample ``i``: neighbours differ, so a size or box shifted by one sample shows."""
    return 64 + 16 * (i % 3), 48 + 8 * (i % 2)


def id_image(i: int) -> Image.Image:
    """Red = x ramp, green = y ramp, blue = a level of its own per id."""
    w, h = shape(i)
    x = np.linspace(0, 255, w)[None, :].repeat(h, 0)
    y = np.linspace(0, 255, h)[:, None].repeat(w, 1)
    b = np.full((h, w), 20 + (i * 53) % 216)
    return Image.fromarray(np.stack([x, y, b], axis=2).round().astype(np.uint8))


def id_jpeg(i: int, progressive: bool = False) -> bytes:
    return to_jpeg(id_image(i), subsampling=0, progressive=progressive)


@pytest.fixture(scope="module")
def solid(tmp_path_factory) -> str:
    return write_images(str(tmp_path_factory.mktemp("solid")), solid_image)


@pytest.fixture(scope="module")
def ids(tmp_path_factory) -> str:
    """Geometry-revealing images; every fifth one progressive (decoded by the CPU fallback)."""
    return write_keyed(str(tmp_path_factory.mktemp("ids")), lambda i: id_jpeg(i, progressive=i % 5 == 4))


def load(url, **kw):
    kw = {
        "views": VIEWS,
        "batch_size": 4,
        "num_workers": 0,
        "with_keys": True,
        "seed": SEED,
        "decode_on": "device",
        **kw,
    }
    loader = shardkit.load(url, **kw)
    loader.set_epoch(EPOCH)
    return loader


def by_key(loader, it=None) -> dict[str, list[torch.Tensor]]:
    """Key -> that sample's views (cloned), over one epoch; a key twice fails."""
    return views_by_key(checked_layout(it if it is not None else loader))


def checked_layout(batches):
    """The batches, each checked for its views' shapes and its labels on the way."""
    for views, labels, keys in batches:
        assert [tuple(v.shape) for v in views] == [(len(keys), 3, s, s) for s in SHAPES]
        assert labels.tolist() == [int(k[1:]) % 3 for k in keys]
        yield views, labels, keys


# ------------------------------------------------------------------ the reference


def documented_boxes(width: int, height: int, gid: int, views=EXPANDED, seed=SEED, epoch=EPOCH):
    """``[(left, top, right, bottom, flip)]`` of one sample, view by view, from the documented uniform columns."""
    u = sample_uniforms(seed, epoch, np.array([gid]), CROP_UNIFORMS * len(views))
    out = []
    for j, v in enumerate(views):
        uj = u[:, CROP_UNIFORMS * j : CROP_UNIFORMS * (j + 1)]
        top, left, h, w = (int(a[0]) for a in rrc_boxes(np.array([width]), np.array([height]), uj, v.scale, v.ratio))
        out.append((left, top, left + w, top + h, bool(v.flip and uj[0, 22] < 0.5)))
    return out


def reference(data: bytes, gid: int) -> list[torch.Tensor]:
    """Every view of one sample: PIL full decode, the documented box, antialiased bilinear resize, the flip."""
    img = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1).float()
    out = []
    for (left, top, right, bottom, flip), v in zip(documented_boxes(img.shape[2], img.shape[1], gid), EXPANDED):
        crop = img[None, :, top:bottom, left:right]
        r = F.interpolate(crop, size=(v.size, v.size), mode="bilinear", antialias=True, align_corners=False)[0]
        out.append((r.flip(-1) if flip else r).round().clamp(0, 255).to(torch.uint8))
    return out


def check_against_reference(views_of: dict[str, list[torch.Tensor]], jpeg, tolerance: float = TOLERANCE) -> None:
    for key, views in views_of.items():
        i = int(key[1:])
        for j, (got, want) in enumerate(zip(views, reference(jpeg(i), i))):
            d = mean_diff(got, want)
            assert d <= tolerance, f"{key} view {j}: not its own crop and flip (mean diff {d:.1f})"


# ------------------------------------------------------------------ colours, layout, geometry


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_view_shows_its_samples_colour(solid, num_workers):
    loader = load(solid, num_workers=num_workers)
    seen = []
    for views, labels, keys in loader:
        assert isinstance(views, list) and [tuple(v.shape[1:]) for v in views] == [(3, s, s) for s in SHAPES]
        assert all(v.dtype == torch.uint8 and v.shape[0] == len(keys) == len(labels) for v in views)
        assert all(v.is_contiguous(memory_format=torch.channels_last) for v in views)
        check_colours(views, keys)
        seen += keys
    assert sorted(seen) == [f"k{i:06d}" for i in range(N)]
    stats = loader.device_decoder("cpu").stats
    assert stats.samples == N and stats.batched == N and stats.batches == len(loader)  # decoded by the consumer


def test_contiguous_layout_and_the_prefetcher(solid):
    loader = load(solid, channels_last=False, with_keys=False)
    n = 0
    for views, labels in DevicePrefetcher(loader, device="cpu"):  # iter_on("cpu"): decoded in the prefetcher
        assert all(v.is_contiguous() for v in views) and [v.shape[-1] for v in views] == SHAPES
        n += len(labels)
    assert n == N and loader.device_decoder("cpu").stats.samples == N


@settings(derandomize=True, deadline=None, max_examples=15)
@given(
    sizes=st.lists(st.tuples(st.integers(8, 160), st.integers(8, 160)), min_size=1, max_size=5),
    groups=st.lists(
        st.tuples(
            st.integers(4, 64),
            st.floats(0.05, 1.0),
            st.floats(0.05, 1.0),
            st.booleans(),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=3,
    ),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 50),
    first=st.integers(0, 10**6),
)
@example(
    sizes=[(80, 60), (33, 120)], groups=[(32, 0.4, 1.0, True, 2), (16, 0.05, 0.4, True, 3)], seed=5, epoch=2, first=0
)
def test_the_worker_sends_each_jpeg_once_with_every_views_documented_box(sizes, groups, seed, epoch, first):
    views = [View(s, scale=(min(a, b), max(a, b)), flip=f, count=c) for s, a, b, f, c in groups]
    expanded = [v for v in views for _ in range(v.count)]
    cfg = ImageConfig(views=views)
    jpegs = [to_jpeg(Image.new("RGB", wh, (9, 99, 199))) for wh in sizes]
    good = [RawSample(f"s{i}", first + 7 * i, "shard-0.tar", i, jpeg=d, label=i) for i, d in enumerate(jpegs)]
    decoder = ViewDecoder(cfg, seed)
    batch = dv.encode_views(good, spec=BatchSpec(len(good), 1, epoch), decoder=decoder, counters=Counters(), t0=0.0)
    jp = batch.jpegs
    assert [bytes(t.numpy()) for t in jp.tensors()] == jpegs  # each sample's bytes once, in order
    assert jp.boxes.shape == (len(sizes), len(expanded), 4) and jp.flips.shape == (len(sizes), len(expanded))
    for i, (w, h) in enumerate(sizes):
        want = documented_boxes(w, h, first + 7 * i, expanded, seed, epoch)
        assert jp.sizes[i].tolist() == [w, h]
        assert jp.boxes[i].tolist() == [list(b[:4]) for b in want], f"sample {i}: not the documented boxes"
        assert jp.flips[i].tolist() == [b[4] for b in want], f"sample {i}: not the documented flips"
    # the same geometry as the worker path's (decode_on="worker" cuts these very boxes)
    worker = decoder.view_geometry(np.array(sizes), epoch, first + 7 * np.arange(len(sizes)))
    for j, c in enumerate(worker):
        assert np.array_equal(jp.boxes[:, j], c.boxes) and np.array_equal(jp.flips[:, j], c.flips)


def test_every_view_is_its_documented_crop_and_flip(ids):
    """Against the independent reference, batched and CPU-fallback (progressive) samples alike."""
    loader = load(ids, fast_decode=False, shuffle_buffer=5)
    views_of = by_key(loader)
    assert len(views_of) == N
    check_against_reference(views_of, lambda i: id_jpeg(i, progressive=i % 5 == 4))
    stats = loader.device_decoder("cpu").stats
    assert stats.fallback["progressive"] == N // 5 and stats.batched == N - N // 5


def test_the_reference_sees_a_wrong_view_or_sample():
    """Not vacuous: another sample's view, another view's crop, a missing flip are far off the reference."""
    refs = {i: reference(id_jpeg(i), i) for i in range(6)}
    flips = [b[4] for b in documented_boxes(*shape(0), 0)]
    assert any(flips) and not all(flips[:5])
    for i in range(5):
        assert all(mean_diff(a, b) > 3 * TOLERANCE for a, b in zip(refs[i], refs[i + 1]))
        for j in range(1, len(EXPANDED)):
            if EXPANDED[j].size == EXPANDED[j - 1].size:
                assert mean_diff(refs[i][j], refs[i][j - 1]) > 3 * TOLERANCE, (i, j)
    for j, f in enumerate(flips):
        if f:
            assert mean_diff(refs[0][j], refs[0][j].flip(-1)) > 3 * TOLERANCE


@pytest.mark.parametrize("fast", [False, True])
def test_device_views_match_the_worker_views(ids, fast):
    """The same dataset and seed through decode_on="worker": the same crops, pixels within the device-vs-worker
    tolerance (the worker decodes at a DCT scale, with the fast IDCT by default)."""
    device = by_key(load(ids, fast_decode=fast, num_workers=2))
    worker = by_key(load(ids, fast_decode=fast, decode_on="worker"))
    assert device.keys() == worker.keys()
    worst = max(mean_diff(a, b) for k in device for a, b in zip(device[k], worker[k]))
    assert worst <= (2 if not fast else 6), worst


# ------------------------------------------------------------------ one decode, drops


def test_each_sample_is_decoded_once_and_each_view_group_cut_in_one_call(tmp_path, monkeypatch):
    """Counting probes: every sample decoded once (one batched call per batch, or the CPU fallback), one
    ``resized_crops`` call per view group per batch; the fallback asks for the DCT scale its most demanding view
    allows (computed here from the documented geometry)."""
    big = lambda i: to_jpeg(Image.new("RGB", (320, 240), colour(i)), progressive=i % 3 == 2)  # noqa: E731
    url = write_keyed(str(tmp_path), big, n=12)
    sample_of = {big(i): i for i in range(12)}
    batched: list[list[int]] = []
    fallback: list[tuple[int, int, int]] = []
    cuts: list[int] = []
    real_decode, real_make, real_cut = dd._decode_list, dd.make_decoder, dv.resized_crops

    def decode_list(tensors, device, backend):
        batched.append([sample_of[bytes(t.numpy())] for t in tensors])
        return real_decode(tensors, device, backend)

    def make(name):
        dec = real_make(name)
        real = dec.decode

        def decode(data, w, h, *a, **kw):
            fallback.append((sample_of[bytes(data)], w, h))
            return real(data, w, h, *a, **kw)

        dec.decode = decode
        return dec

    def cut(images, *a, **kw):
        cuts.append(len(images))
        return real_cut(images, *a, **kw)

    monkeypatch.setattr(dd, "_decode_list", decode_list)
    monkeypatch.setattr(dd, "make_decoder", make)
    monkeypatch.setattr(dv, "resized_crops", cut)
    loader = load(url, batch_size=4, shuffle=False)
    seen = []
    for views, _labels, keys in loader:
        check_colours(views, keys)
        seen += keys
    assert len(seen) == 12
    decoded = sorted([i for call in batched for i in call] + [i for i, _, _ in fallback])
    assert decoded == list(range(12)), f"{len(decoded)} decodes for 12 samples with {len(EXPANDED)} views each"
    assert len(batched) == 3, "one batched call per batch"
    assert cuts == [4 * v.count for v in VIEWS] * 3, "one resized_crops call per view group over the whole batch"
    assert sorted(i for i, _, _ in fallback) == [2, 5, 8, 11]  # sample 2: its 3rd view needs more than its 1st
    for i, w, h in fallback:
        need = min((min(b[2] - b[0], b[3] - b[1]) / v.size for b, v in zip(documented_boxes(320, 240, i), EXPANDED)))
        r = max([1] + [r for r in (2, 4, 8) if r <= need])
        assert (w, h) == (-(-320 // r), -(-240 // r)), f"sample {i} decoded at {w} x {h}, its views need 1/{r}"
    assert any(w < 320 for _, w, _ in fallback), "no fallback sample was decoded at a reduced scale"


BAD = {3: cut_scan, 4: bad_huffman, 9: cut_scan, 13: bad_huffman, 14: cut_scan, 23: bad_huffman}


def damaged(i: int) -> bytes:
    if i == 17:
        return b"\xff\xd8 not a jpeg"  # the header fails: skipped in the worker
    return BAD[i](id_jpeg(i)) if i in BAD else id_jpeg(i)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_sample_no_decoder_reads_drops_all_its_views(tmp_path, num_workers):
    """Bad scans among the samples: each one drops from every view, every later view is still its own sample's
    crop and flip, the skips are counted (in the workers and on the consumer)."""
    url = write_keyed(str(tmp_path), damaged, n=24)
    loader = load(url, fast_decode=False, num_workers=num_workers, shuffle_buffer=6)
    views_of = by_key(loader)
    gone = set(BAD) | {17}
    assert sorted(views_of) == [f"k{i:06d}" for i in range(24) if i not in gone]
    check_against_reference(views_of, id_jpeg)
    assert loader.stats.skipped == len(gone) and loader.stats.samples == 24 - len(gone)
    assert loader.device_decoder("cpu").stats.corrupt == len(BAD)


def test_views_of_a_batch_stay_with_their_samples_after_drops():
    """One batch straight through the consumer half: drops at the start, the middle and the end."""
    cfg = ImageConfig(views=VIEWS, fast_decode=False)
    gids = list(range(10))
    bad = {0: cut_scan, 4: bad_huffman, 5: cut_scan, 9: bad_huffman}
    good = [
        RawSample(f"k{i:06d}", i, "s.tar", i, jpeg=bad[i](id_jpeg(i)) if i in bad else id_jpeg(i), label=i % 3)
        for i in gids
    ]
    counters = Counters()
    batch = dv.encode_views(good, spec=BatchSpec(10, 1, EPOCH), decoder=ViewDecoder(cfg, SEED), counters=counters)
    batch = pickle.loads(pickle.dumps(batch))  # as it travels from a worker
    dec = dd.DeviceDecoder(cfg, "cpu")
    out = dv.decode_views_on_device(batch, dec, strict=False, counters=counters)
    assert isinstance(out, ViewBatch) and out.keys == [f"k{i:06d}" for i in gids if i not in bad]
    assert out.gids.tolist() == [i for i in gids if i not in bad] and out.labels.tolist() == [i % 3 for i in out.gids]
    check_against_reference({k: [v[r] for v in out.views] for r, k in enumerate(out.keys)}, id_jpeg)
    assert dec.stats.corrupt == 4 and dec.stats.retried == 0 and dict(zip(COUNTERS, counters.v))["skipped"] == 4
    with pytest.raises(DataError, match="k000000.*strict=True"):
        dv.decode_views_on_device(batch, dec, strict=True, counters=Counters())


# ------------------------------------------------------------------ exactly once, resume


def test_exactly_once_over_ranks_and_workers(solid):
    keys = []
    for rank in range(2):
        for views, _labels, ks in load(solid, rank=rank, world_size=2, num_workers=2, batch_size=3):
            check_colours(views, ks)
            keys += ks
    assert sorted(keys) == [f"k{i:06d}" for i in range(N)]


def test_mid_epoch_resume_with_device_views(ids):
    check_resume(lambda **kw: Flat(load(ids, batch_size=3, num_workers=2, **kw)), after=3, pixels=True)


def test_a_hook_is_still_refused_with_device_views(solid):
    with pytest.raises(ValueError) as e:
        load(solid, batch_hook=lambda images, labels, keys: None)
    assert "decode_on='worker'" in str(e.value) and "\n" not in str(e.value)


def test_a_mixture_counts_each_drop_against_its_source(solid, tmp_path):
    """Two sources (solid colours 0..29, and 30..41 with bad scans): every view shows its sample, keys and sources
    follow it, and a sample dropped on the consumer moves from its source's samples to its skipped."""
    bad = {2: cut_scan, 7: bad_huffman}
    colours = lambda i: to_jpeg(Image.new("RGB", (80, 60), colour(30 + i)))  # noqa: E731
    other = write_keyed(str(tmp_path), lambda i: bad[i](colours(i)) if i in bad else colours(i), n=12)
    sources = [shardkit.Source(solid, repeat=1), shardkit.Source(other, repeat=1)]
    loader = load(sources, num_workers=2, with_source=True)
    seen = []
    for views, _labels, keys, source in loader:
        for j, v in enumerate(views):
            for row, (key, src) in enumerate(zip(keys, source.tolist())):
                src_of_key, sample = key.split("/")
                assert int(src_of_key) == src
                rgb = v[row].float().mean(dim=(1, 2)).tolist()
                assert image_id(rgb) == int(sample[1:]) + 30 * src, f"view {j} of {key}"
        seen += keys
    assert len(seen) == N + 12 - len(bad) == len(set(seen))
    per_source = [(s.samples, s.skipped) for s in loader.stats.sources]
    assert per_source == [(N, 0), (12 - len(bad), len(bad))], per_source


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_views_decoded_on_cuda_are_the_cpu_ones(ids):
    """nvJPEG (through TorchCodec) differs from libjpeg-turbo by a level or two: mean <= 2 per view."""
    cpu = by_key(load(ids, fast_decode=False))
    loader = load(ids, fast_decode=False, with_keys=True)
    gpu = by_key(loader, loader.iter_on("cuda"))
    assert cpu.keys() == gpu.keys()
    assert all(v.is_cuda for views in gpu.values() for v in views)
    worst = max(mean_diff(a, b) for k in cpu for a, b in zip(cpu[k], gpu[k]))
    assert worst <= 2, worst
    assert loader.device_decoder("cuda").stats.batched == N - N // 5


def test_a_batch_whose_samples_all_drop_is_yielded_empty_in_every_view():
    """Headers that fail (dropped in the worker) and scans no decoder reads (dropped on the consumer)."""
    cfg = ImageConfig(views=VIEWS)
    for jpegs in ([b"\xff\xd8 not a jpeg"] * 3, [cut_scan(id_jpeg(i)) for i in range(3)]):
        good = [RawSample(f"k{i:06d}", i, "s.tar", i, jpeg=d, label=0) for i, d in enumerate(jpegs)]
        counters = Counters()
        sent = dv.encode_views(good, spec=BatchSpec(3, 1, EPOCH), decoder=ViewDecoder(cfg, SEED), counters=counters)
        out = dv.decode_views_on_device(sent, dd.DeviceDecoder(cfg, "cpu"), strict=False, counters=counters)
        assert out.keys == [] and [tuple(v.shape) for v in out.views] == [(0, 3, s, s) for s in SHAPES]
        assert dict(zip(COUNTERS, counters.v))["skipped"] == 3


def test_elastic_resume_with_device_views(solid):
    res = check_resume(
        lambda **kw: Flat(load(solid, batch_size=3, num_workers=2, **kw)), after=2, world_size=2, resume_world_size=3
    )
    assert sorted(res.keys()) == [f"k{i:06d}" for i in range(N)]
