"""The JPEG backend of decode_on="device" and decoder="torchvision": TorchCodec when installed, torchvision's
(deprecated) decoder otherwise, and how a device name is normalised.

Every promise is checked through both backends (TorchCodec's tests skip where it is not installed; torchvision
is forced through the injectable choice) against the same oracle: the worker path's pixels and skip counts.
"""

from __future__ import annotations

import importlib.util
import io
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

import shardkit.loader.decode.backend as jb
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.decoders import PilDecoder, TorchvisionDecoder
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry
from shardkit.loader.decode.jpegroute import jpeg_route
from shardkit.loader.decode.worker import CropDecoder
from tests.support.decode_paths import EPOCH, SEED, device_path, diff, encode, worker_path

HAVE_TORCHCODEC = importlib.util.find_spec("torchcodec") is not None
BACKENDS = [
    pytest.param("torchcodec", marks=pytest.mark.skipif(not HAVE_TORCHCODEC, reason="torchcodec not installed")),
    "torchvision",
]


def oriented(size: tuple[int, int], seed: int, orientation: int, **kw) -> bytes:
    """A JPEG whose EXIF orientation tag is ``orientation`` (stored pixels unchanged)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(size, seed, exif=exif.tobytes(), **kw)


# ----------------------------------------------------------------------------- the choice


def test_the_choice_is_a_pure_function_of_what_imports():
    asked = []
    assert jb.choose_backend(lambda name: asked.append(name) or True) == "torchcodec"
    assert jb.choose_backend(lambda name: False) == "torchvision"
    assert asked == ["torchcodec"]
    # chosen once per process: TorchCodec here when installed (it is in the dev extras)
    assert jb.default_backend() == ("torchcodec" if HAVE_TORCHCODEC else "torchvision")
    assert jb.default_backend.cache_info().misses <= 1
    assert DeviceDecoder(ImageConfig(size=16)).backend == jb.default_backend()
    with pytest.raises(ValueError, match="torchcodec, torchvision"):
        DeviceDecoder(ImageConfig(size=16), backend="nvjpeg")


@pytest.mark.skipif(not HAVE_TORCHCODEC, reason="torchcodec not installed")
def test_with_torchcodec_the_device_path_never_calls_torchvisions_decoders(monkeypatch):
    """Under DeprecationWarning-as-error, and with torchvision's decode_jpeg replaced by a tripwire: the device
    path (batched and fallback samples) and decoder="torchvision" decode through TorchCodec and say so."""
    import torchvision.io

    def tripwire(*a, **k):
        raise AssertionError("torchvision.io.decode_jpeg called")

    monkeypatch.setattr(torchvision.io, "decode_jpeg", tripwire)
    cfg = ImageConfig(preset="eval", size=24, decoder="torchvision")  # the CPU fallback is decoder="torchvision" too
    jpegs = [encode((40, 30), i) for i in range(5)] + [encode((40, 30), 5, progressive=True), oriented((40, 30), 6, 6)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        got, _, dec = device_path(cfg, jpegs, np.arange(7), "cpu")
        assert TorchvisionDecoder().decode(jpegs[0], 40, 30).shape == (30, 40, 3)
    assert dec.backend == dec.stats.backend == "torchcodec" and TorchvisionDecoder().backend == "torchcodec"
    assert got.kept.tolist() == list(range(7)) and dec.stats.batched == 5
    assert dec.stats.fallback == Counter({"progressive": 1, "orientation": 1})


def test_a_backend_that_does_not_import_is_named_with_the_fix(monkeypatch):
    monkeypatch.setitem(jb._MODULES, "torchcodec", "torchcodec_not_installed_here")
    with pytest.raises(ImportError, match=r"shardkit\[gpu\]"):
        DeviceDecoder(ImageConfig(size=16), backend="torchcodec")
    assert jb.choose_backend(jb._importable) == "torchvision"  # what a process without TorchCodec chooses


def test_torchvision_backend_is_used_when_forced(monkeypatch):
    """The fallback for installs without TorchCodec: the batched call goes to torchvision's decode_jpeg."""
    import torchvision.io

    calls = []
    real = torchvision.io.decode_jpeg
    monkeypatch.setattr(torchvision.io, "decode_jpeg", lambda t, **k: calls.append(len(t)) or real(t, **k))
    cfg = ImageConfig(preset="eval", size=24)
    got, _, dec = device_path(cfg, [encode((40, 30), i) for i in range(4)], np.arange(4), "cpu", backend="torchvision")
    assert calls == [4] and dec.backend == dec.stats.backend == "torchvision" and len(got.kept) == 4


def test_a_fresh_process_under_W_error_decodes_through_the_reported_backend(tmp_path):
    """``python -W error::DeprecationWarning``: a decode_on="device" loader runs an epoch and its report names
    the backend (TorchCodec where installed)."""
    from tests.support.data import write_dataset
    from tests.support.probes import run_fresh

    ds = write_dataset(str(tmp_path / "ds"), num_samples=12, shard_size=6, size=(40, 30))
    code = (
        "import sys, json, warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "import shardkit\n"
        "loader = shardkit.load(sys.argv[1], batch_size=4, num_workers=0, size=16, decode_on='device', pin_memory=False)\n"
        "n = sum(len(x) for x, _ in loader)\n"
        "print(json.dumps({'n': n, 'report': loader.report(), 'backend': loader.device_decoder().backend}))\n"
    )
    out = run_fresh(code, ds.url)
    want = "torchcodec" if HAVE_TORCHCODEC else "torchvision"
    assert out["n"] == 12 and out["backend"] == want and out["report"].endswith(f"decoded on cpu by {want}"), out


def test_bench_names_the_backend(tmp_path, capsys):
    from shardkit.cli import main
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "ds"), num_samples=16, shard_size=8, size=(40, 30))
    assert (
        main(
            [
                "bench",
                ds.url,
                "--workers",
                "0",
                "--batches",
                "2",
                "--window",
                "2",
                "--batch-size",
                "4",
                "--size",
                "16",
                "--decode-on",
                "device",
                "--device",
                "cpu",
                "--decoder",
                "torchvision",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    want = "torchcodec" if HAVE_TORCHCODEC else "torchvision"
    assert f"decoded on cpu by {want}" in out and f"torchvision via {want}" in out, out


# ----------------------------------------------------------------------------- same promises, both backends


@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_pixels_match_the_worker_path(backend):
    cfg = ImageConfig(preset="eval", size=24)
    sizes = [(40, 30), (30, 40), (100, 20), (29, 29)]
    jpegs = [encode(sizes[i % 4], i) for i in range(8)] + [
        encode((40, 30), 8, mode="L"),
        encode((40, 30), 9, subsampling=0),
    ]
    ref, kept = worker_path(cfg, jpegs, np.arange(10))
    got, _, dec = device_path(cfg, jpegs, np.arange(10), "cpu", backend=backend)
    assert got.kept.tolist() == kept == list(range(10)) and dec.stats.batched == 10
    assert diff(got.images, ref).max() <= 2


def bad_batch() -> list[bytes]:
    """Good samples mixed with every kind of bad or unusual input the issue names."""
    good = [encode((40, 30), i) for i in range(6)]
    i = good[4].index(b"\xff\xc4")
    return [
        good[0],
        good[1][: len(good[1]) * 2 // 3],  # truncated: header intact, scan cut short
        b"\xff\xd8\xff\xe0garbage" + bytes(64),  # garbage after a JPEG signature: header unreadable
        encode((40, 30), 7, mode="CMYK"),
        encode((40, 30), 8, mode="L"),  # grayscale
        encode((40, 30), 9, fmt="PNG"),  # a PNG named .jpg
        encode((40, 30), 10, progressive=True),
        good[2],
        good[4][: i + 5] + b"\xff" * 16 + good[4][i + 21 :],  # a Huffman table libjpeg rejects: the batched call fails
        oriented((40, 30), 11, 6),  # EXIF: rotate 90 degrees to view; TorchCodec would
        oriented((30, 40), 12, 3, progressive=True),
        good[3],
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_jpegs_skip_rule_and_counts_are_the_worker_paths(backend):
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = bad_batch()
    gids = np.arange(len(jpegs))
    ref, kept = worker_path(cfg, jpegs, gids)
    got, geo, dec = device_path(cfg, jpegs, gids, "cpu", backend=backend)
    assert geo.kept[got.kept].tolist() == kept  # the same samples survive both paths
    assert kept == [0, 3, 4, 5, 6, 7, 9, 10, 11]
    assert [e[0] for e in geo.errors] == [2] and [geo.kept[e[0]] for e in got.errors] == [1, 8]
    assert dec.stats.fallback == Counter({"truncated": 1, "cmyk": 1, "not-jpeg": 1, "progressive": 2, "orientation": 1})
    assert dec.stats.batched == 4 and dec.stats.retried == 0 and dec.stats.corrupt == 2 and dec.stats.samples == 9
    assert diff(got.images, ref).max() <= 2  # the oriented samples too: stored pixels, as the worker decodes them


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=12))
def test_damaged_scans_keep_or_drop_like_the_worker_path(backend, seed, flips):
    """Bytes changed inside the entropy-coded data (the header intact): each backend keeps exactly the samples the
    worker path keeps (libjpeg's "corrupt data" warnings are not errors for either), with the worker's pixels."""
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = []
    for k in range(6):
        d = bytearray(encode((40, 30), seed + k))
        sos = d.index(b"\xff\xda") + 14
        for pos, value in flips[k::6]:
            d[sos + int(pos * (len(d) - 3 - sos))] = value
        jpegs.append(bytes(d))
    ref, kept = worker_path(cfg, jpegs, np.arange(6))
    got, geo, _ = device_path(cfg, jpegs, np.arange(6), "cpu", backend=backend)
    assert geo.kept[got.kept].tolist() == kept
    assert diff(got.images, ref).max() <= 2


@pytest.mark.skipif(not HAVE_TORCHCODEC, reason="torchcodec not installed")
def test_torchcodec_rotates_what_the_route_keeps_away_from_it():
    """Why "orientation" is a route: TorchCodec's decode applies the tag (the worker path does not)."""
    data = oriented((40, 30), 0, 6)
    assert tuple(
        jb.DECODE["torchcodec"]([torch.frombuffer(bytearray(data), dtype=torch.uint8)], torch.device("cpu"))[0].shape
    ) == (3, 40, 30)
    assert np.asarray(PilDecoder().decode(data, 40, 30)).shape == (30, 40, 3)
    assert jpeg_route(data) == "orientation" and jpeg_route(oriented((40, 30), 0, 1)) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_decoder_torchvision_gives_the_stored_pixels(backend):
    """decoder="torchvision" through either backend: the stored pixels (PIL's full-size decode, libjpeg-turbo both)."""
    dec = TorchvisionDecoder(backend)
    assert dec.backend == backend
    for data in (
        encode((40, 30), 0),
        oriented((40, 30), 1, 6),
        oriented((30, 40), 2, 2),
        encode((40, 30), 3, mode="CMYK"),
    ):
        got, ref = dec.decode(data, 40, 30), PilDecoder().decode(data, 1 << 20, 1 << 20)
        assert got.shape == ref.shape
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= (
            2 if Image.open(io.BytesIO(data)).mode != "CMYK" else 255
        )
    assert dec.decode(encode((40, 30), 4, fmt="PNG"), 40, 30).shape == (30, 40, 3)  # not a JPEG: PIL


@settings(max_examples=40, deadline=None)
@example(orientation=6, extra=2, swapped=True)
@example(orientation=8, extra=5, swapped=False)
@example(orientation=1, extra=1, swapped=True)
@given(orientation=st.integers(0, 10), extra=st.integers(0, 4), swapped=st.booleans())
def test_exif_orientation_reads_the_tag_like_pil(orientation, extra, swapped):
    exif = Image.Exif()
    for tag in (0x010D, 0x010E, 0x010F, 0x0110, 0x0131)[:extra]:  # other IFD0 tags before and after 0x0112
        exif[tag] = f"tag {tag}"
    exif[0x0112] = orientation
    raw = exif.tobytes()
    if swapped:  # the other byte order (PIL writes one; Intel and Motorola headers must read the same)
        raw = swap_tiff(raw)
    data = encode((40, 30), 0, exif=raw)
    with Image.open(io.BytesIO(data)) as im:
        want = im.getexif().get(0x0112, 1)
    want = want if 1 <= want <= 8 else 1
    assert jb.exif_orientation(data) == want
    assert (jpeg_route(data) == "orientation") == (want != 1)


def swap_tiff(raw: bytes) -> bytes:
    """The same IFD0 as ``raw`` (an EXIF payload of SHORT and ASCII entries) in the other byte order."""
    assert raw[:6] == b"Exif\x00\x00" and raw[6:8] in (b"II", b"MM")
    t = raw[6:]
    src, dst = ("little", "big") if t[:2] == b"II" else ("big", "little")

    def rd(o: int, n: int) -> int:
        return int.from_bytes(t[o : o + n], src)

    out = bytearray(t)

    def wr(o: int, n: int) -> None:
        out[o : o + n] = rd(o, n).to_bytes(n, dst)

    out[:2] = b"MM" if dst == "big" else b"II"
    wr(2, 2)
    ifd = rd(4, 4)
    wr(4, 4)
    n = rd(ifd, 2)
    wr(ifd, 2)
    for k in range(n):
        e = ifd + 2 + 12 * k
        typ, cnt = rd(e + 2, 2), rd(e + 4, 4)
        wr(e, 2), wr(e + 2, 2), wr(e + 4, 4)
        if typ == 3 and cnt == 1:
            wr(e + 8, 2)
        elif typ == 2 and cnt > 4:
            wr(e + 8, 4)
    wr(ifd + 2 + 12 * n, 4)
    return b"Exif\x00\x00" + bytes(out)


def test_exif_orientation_never_raises_on_damaged_headers():
    data = oriented((40, 30), 0, 6)
    rng = np.random.default_rng(1)
    for n in range(0, 200, 3):
        assert jb.exif_orientation(data[:n]) in range(1, 9)
    for _ in range(200):
        junk = np.frombuffer(data, np.uint8).copy()
        junk[rng.integers(2, 120, 6)] = rng.integers(0, 256, 6)
        assert jb.exif_orientation(junk.tobytes()) in range(1, 9)


# ----------------------------------------------------------------------------- batched decode errors (C2)


def _inject(monkeypatch, backend: str, exc: BaseException, bad: bytes | None = None):
    """Make ``backend``'s batched decode raise ``exc`` (for every list holding ``bad``, or always)."""
    real, calls = jb.DECODE[backend], []

    def failing(tensors, device):
        calls.append(len(tensors))
        if bad is None or any(bytes(t.numpy()) == bad for t in tensors):
            raise exc
        return real(tensors, device)

    monkeypatch.setitem(jb.DECODE, backend, failing)
    return calls


NOT_DATA = [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("nvjpegDecode failed: 5"),  # NVJPEG_STATUS_ALLOCATOR_FAILURE
    RuntimeError("nvjpegDecodeBatchedPhaseOne failed: 6"),  # EXECUTION_FAILED
    RuntimeError("Failed to initialize nvjpeg with default backend: 8"),
    RuntimeError("Failed to create nvjpeg handle: 1"),
    OSError("libnvjpeg.so.13: cannot open shared object file"),
    ImportError("cannot import name 'decode_jpeg'"),
    NotImplementedError("Could not run 'torchcodec_ns::decode_jpegs_cuda' with arguments from the 'CUDA' backend"),
    MemoryError(),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exc", NOT_DATA, ids=lambda e: type(e).__name__ + ":" + str(e)[:24])
def test_out_of_memory_cuda_and_start_errors_propagate_without_bisection(monkeypatch, backend, exc):
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = [encode((40, 30), i) for i in range(6)]
    calls = _inject(monkeypatch, backend, exc, bad=jpegs[4])
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, np.arange(6))
    dec = DeviceDecoder(cfg, "cpu", backend=backend)
    with pytest.raises(type(exc)):
        dec(jpegs, geo.sizes, geo.crops, geo.routes)
    assert calls == [6] and dec.stats.corrupt == 0 and dec.stats.retried == 0  # not bisected, nothing dropped
    assert not jb.is_data_error(exc)


DATA = [
    RuntimeError("read_header_and_start, DecodeJpeg.cpp:208, Not a JPEG file: starts with 0x89 0x50"),
    RuntimeError("nvjpegDecode failed: 3"),  # NVJPEG_STATUS_BAD_JPEG
    RuntimeError("nvjpegDecodeBatchedPhaseOne failed: 10"),  # INCOMPLETE_BITSTREAM
    RuntimeError("Error while decoding JPEG images"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exc", DATA, ids=lambda e: str(e)[:24])
def test_a_data_error_is_bisected_and_the_sample_decoded_on_cpu(monkeypatch, backend, exc):
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = [encode((40, 30), i) for i in range(9)]
    clean, _, _ = device_path(cfg, jpegs, np.arange(9), "cpu", backend=backend)
    calls = _inject(monkeypatch, backend, exc, bad=jpegs[5])
    got, _, dec = device_path(cfg, jpegs, np.arange(9), "cpu", backend=backend)
    assert got.kept.tolist() == list(range(9)) and got.errors == ()
    assert dec.stats.retried == 1 and dec.stats.batched == 8 and dec.stats.corrupt == 0
    assert calls[0] == 9 and len(calls) <= 2 * 4 + 1
    assert torch.equal(got.images, clean.images)
    assert jb.is_data_error(exc)


class _NoRoomOnDevice:
    """CPU pixels whose copy to the device fails as an out-of-memory does."""

    def to(self, *a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected in the copy)")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("route", ["fallback", "retried"])
def test_the_cpu_fallbacks_copy_to_the_device_is_not_swallowed(monkeypatch, backend, route):
    """An out-of-memory in the CPU fallback's ``.to(device)`` propagates; the good sample is not logged as corrupt."""
    cfg = ImageConfig(preset="eval", size=24)
    jpegs = [encode((40, 30), i) for i in range(3)]
    if route == "fallback":
        jpegs.append(encode((40, 30), 3, progressive=True))
    else:
        _inject(monkeypatch, backend, RuntimeError("Not a JPEG file"), bad=jpegs[1])
    monkeypatch.setattr(DeviceDecoder, "_cpu_pixels", lambda self, data, w, h: _NoRoomOnDevice())
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, np.arange(len(jpegs)))
    dec = DeviceDecoder(cfg, "cpu", backend=backend)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="injected"):
        dec(jpegs, geo.sizes, geo.crops, geo.routes)
    assert dec.stats.corrupt == 0


# ----------------------------------------------------------------------------- one decoder per device (C7)


def test_cuda_and_cuda0_share_one_decoder(tmp_path, monkeypatch):
    import shardkit
    from tests.support.data import write_dataset

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # no GPU needed: constructing a decoder touches none
    assert jb.normalize_device("cuda") == jb.normalize_device("cuda:0") == torch.device("cuda", 0)
    assert jb.normalize_device("cuda:1") == torch.device("cuda", 1) and jb.normalize_device("cpu:0") == torch.device(
        "cpu"
    )
    ds = write_dataset(str(tmp_path / "ds"), num_samples=8, shard_size=8, size=(40, 30))
    loader = shardkit.load(ds.url, batch_size=4, num_workers=0, size=16, decode_on="device", pin_memory=False)
    cuda = loader.device_decoder("cuda")
    assert loader.device_decoder("cuda:0") is cuda and loader.device_decoder(torch.device("cuda", 0)) is cuda
    assert cuda.device == torch.device("cuda", 0)
    assert loader.device_decoder("cpu") is loader.device_decoder("cpu:0") is loader.device_decoder(torch.device("cpu"))
    assert loader.device_decoder("cpu") is not cuda and len(loader._device_decoders) == 2
