"""Damaged shards and hostile images: what is delivered, what is skipped and counted, what strict mode raises.

Guarantees: samples before the damage are delivered once, the damage is reported with shard and
byte offset, the policy holds (skip and count, or raise with ``strict=True``), ``shardkit verify``
finds it through the manifest checksum; a broken or hostile image is skipped and counted or
decoded correctly, never a worker crash, never an unbounded allocation.
"""

from __future__ import annotations

import io
import logging
import os
import tracemalloc

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.errors import DataError
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import jpeg_bytes, tar_bytes, write_dataset, write_raw_dataset
from tests.support.probes import run_fresh

SMALL = dict(size=16, pin_memory=False, multiprocessing_context="fork")


def _keys(loader):
    return [k for _, _, ks in loader for k in ks]


@pytest.fixture()
def ds(tmp_path):
    return write_dataset(str(tmp_path / "ds"), num_samples=40, shard_size=10, size=(48, 40), distinct_images=4)


def _member_offsets(path: str) -> list[tuple[str, int, int]]:
    """(name, header offset, data offset) of each member of a tar."""
    import tarfile

    with tarfile.open(path) as tf:
        return [(m.name, m.offset, m.offset_data) for m in tf.getmembers()]


@pytest.mark.parametrize("cut", ["mid-jpeg", "mid-header", "at-member-boundary"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_truncated_shard_delivers_prefix_once_and_counts_the_rest(ds, tmp_path, cut, num_workers, caplog):
    shard = os.path.join(ds.url, "train-000002.tar")
    members = _member_offsets(shard)
    name, hdr, data = next(m for m in members if m[0] == "k000024.jpg")
    at = {"mid-jpeg": data + 100, "mid-header": hdr + 200, "at-member-boundary": hdr}[cut]
    with open(shard, "r+b") as f:
        f.truncate(at)
    loader = shardkit.load(ds.url, batch_size=4, num_workers=num_workers, with_keys=True, check_sizes=False, **SMALL)
    with caplog.at_level(logging.WARNING, logger="shardkit.loader"):
        keys = _keys(loader)
    lost = {f"k{i:06d}" for i in range(24, 30)}  # k000024 is the first incomplete sample of shard 2
    assert sorted(keys) == sorted(set(ds.keys) - lost)  # before the damage and other shards: exactly once
    assert loader.stats.skipped == len(lost) and loader.stats.samples == 34
    if num_workers == 0:  # worker logs do not reach caplog
        msgs = [r.getMessage() for r in caplog.records if "damaged tar" in r.getMessage()]
        # the walker reports the first block it cannot read whole: the cut for data, the header's start otherwise
        where = at if cut == "mid-jpeg" else hdr
        first = [m for m in msgs if "samples after it are skipped" in m]
        assert len(first) == 1 and "train-000002.tar" in first[0] and f"damaged tar at byte {where}:" in first[0], msgs
        assert len(msgs) == 1 + len(lost)  # and one line per skipped sample, with the same reason
    strict = shardkit.load(
        ds.url, batch_size=4, num_workers=num_workers, strict=True, shuffle=False, check_sizes=False, **SMALL
    )
    with pytest.raises(DataError, match=r"train-000002.tar: damaged tar at byte \d+"):
        list(strict)


def test_corrupt_header_reported_at_its_offset_and_verify_finds_it(ds, capsys):
    from shardkit.cli import main

    shard = os.path.join(ds.url, "train-000001.tar")
    name, hdr, _ = next(m for m in _member_offsets(shard) if m[0] == "k000015.cls")
    with open(shard, "r+b") as f:
        f.seek(hdr + 10)
        f.write(b"\x00garbage\x01")
    loader = shardkit.load(ds.url, batch_size=5, num_workers=0, shuffle=False, with_keys=True, **SMALL)
    keys = _keys(loader)
    assert keys == [k for k in ds.keys if not "k000015" <= k <= "k000019"]
    with pytest.raises(DataError, match=rf"train-000001.tar: damaged tar at byte {hdr}: header checksum mismatch"):
        list(shardkit.load(ds.url, batch_size=5, num_workers=0, shuffle=False, strict=True, **SMALL))
    assert main(["verify", ds.url, "--quick"]) == 1  # problems found (not 2: an error)
    out = capsys.readouterr()
    assert "train-000001.tar" in out.out + out.err and "sha256" in (out.out + out.err).lower()


def test_flipped_bytes_inside_an_image_found_by_verify(ds, capsys):
    from shardkit.cli import main

    shard = os.path.join(ds.url, "train-000003.tar")
    _, _, data = next(m for m in _member_offsets(shard) if m[0] == "k000032.jpg")
    with open(shard, "r+b") as f:
        f.seek(data + 400)
        f.write(bytes(200))
    keys = _keys(shardkit.load(ds.url, batch_size=5, num_workers=0, with_keys=True, **SMALL))
    assert len(keys) in (39, 40) and len(set(keys)) == len(
        keys
    )  # decoded with damage, or skipped: never twice, never a crash
    assert main(["verify", ds.url, "--quick"]) == 1  # problems found (not 2: an error)
    assert "train-000003.tar" in capsys.readouterr().out


# ----------------------------------------------------------------------------- hostile images


def _bomb(width: int = 65000, height: int = 65000) -> bytes:
    """A valid small JPEG whose frame header declares ``width`` x ``height``."""
    data = bytearray(jpeg_bytes(0, 0, (64, 48)))
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def _png_bomb() -> bytes:
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")
    )


def _cmyk() -> bytes:
    buf = io.BytesIO()
    Image.new("CMYK", (40, 30), (0, 255, 255, 0)).save(buf, format="JPEG")  # pure red in CMYK
    return buf.getvalue()


def _hostile_images() -> dict[str, tuple[bytes, "bool | None"]]:
    """name -> (bytes, decodable; None: either is fine)."""
    good = jpeg_bytes(1, 3, (40, 30))
    one = io.BytesIO()
    Image.new("RGB", (1, 1), (10, 200, 30)).save(one, format="JPEG")
    png = io.BytesIO()
    Image.new("RGB", (20, 10), (0, 0, 255)).save(png, format="PNG")
    return {
        "good": (good, True),
        "truncated": (good[: len(good) // 2], False),
        "garbage": (os.urandom(3000), False),
        "empty": (b"", False),
        "bomb": (_bomb(), False),
        "bomb_wide": (_bomb(65000, 1), None),  # 65000 pixels: allowed; libjpeg may fill the missing rows
        "png_bomb": (_png_bomb(), False),
        "one_pixel": (one.getvalue(), True),
        "cmyk": (_cmyk(), True),
        "png_named_jpg": (png.getvalue(), True),
        "zero_dims": (_bomb(0, 0), False),
    }


@pytest.mark.parametrize("preset", ["train", "eval"])
def test_hostile_images_skipped_or_decoded_never_a_crash(tmp_path, preset):
    images = _hostile_images()
    names = list(images)
    members = []
    for i, name in enumerate(names * 2):
        members += [(f"{name}_{i}.cls", b"0"), (f"{name}_{i}.jpg", images[name][0])]
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes(members), 2 * len(names))], ["a"])
    loader = shardkit.load(root, batch_size=4, num_workers=2, preset=preset, with_keys=True, **SMALL)
    got = []
    for imgs, _labels, keys in loader:
        assert imgs.dtype.is_floating_point is False and imgs.shape[1:] == (3, 16, 16)
        got += keys
    every = [f"{n}_{i}" for i, n in enumerate(names * 2)]
    ok = {k for k in every if images[k.rsplit("_", 1)[0]][1]}
    maybe = {k for k in every if images[k.rsplit("_", 1)[0]][1] is None}
    assert len(got) == len(set(got)) and ok <= set(got) <= ok | maybe
    assert loader.stats.skipped == len(every) - len(got)


def test_decoded_odd_images_are_right():
    dec = CropDecoder(ImageConfig(preset="eval", size=8), seed=0)
    out = np.zeros((3, 8, 8), np.uint8)
    import torch

    t = torch.from_numpy(out)
    dec(_cmyk(), t, 0, 0)
    r, g, b = (int(x) for x in t.float().mean((1, 2)))
    assert r > 200 and g < 60 and b < 60  # CMYK red stays red
    one = io.BytesIO()
    Image.new("RGB", (1, 1), (10, 200, 30)).save(one, format="JPEG", quality=100)
    dec(one.getvalue(), t, 0, 0)
    assert abs(int(t[1].float().mean()) - 200) < 10 and t.float().std((1, 2)).max() < 1  # one pixel: a flat image


_FRESH_DECODE = r"""
import json, sys, torch
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
dec = CropDecoder(ImageConfig(size=16), seed=0)
out = torch.zeros(3, 16, 16, dtype=torch.uint8)
dec(open(sys.argv[1], "rb").read(), out, 0, 0)  # a normal image first: lazy imports and buffers in place
before = peak_kib()
errors = []
for path in sys.argv[2:]:
    try:
        dec(open(path, "rb").read(), out, 0, 0)
        errors.append(None)
    except Exception as exc:
        errors.append(str(exc))
print(json.dumps({"grew_kib": peak_kib() - before, "errors": errors}))
"""


def test_bombs_refused_before_any_allocation(tmp_path):
    import torch

    bombs = (_bomb(), _bomb(20000, 20000), _png_bomb())
    tracemalloc.start()
    try:
        dec = CropDecoder(ImageConfig(size=16), seed=0)
        out = torch.zeros(3, 16, 16, dtype=torch.uint8)
        for data in bombs:
            with pytest.raises(Exception) as info:
                dec(data, out, 0, 0)
            assert "max_pixels" in str(info.value) or "decompression bomb" in str(info.value).lower()
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 8 << 20  # python-side allocations stay tiny
    finally:
        tracemalloc.stop()
    # no native spike either: measured as the peak RSS growth of a fresh process
    paths = []
    for i, data in enumerate((jpeg_bytes(0, 0, (64, 48)), *bombs)):
        paths.append(str(tmp_path / f"img{i}"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    report = run_fresh(_FRESH_DECODE, *paths)
    assert all(e and ("max_pixels" in e or "decompression bomb" in e.lower()) for e in report["errors"]), report
    assert report["grew_kib"] < 16 << 10, report  # KiB: the peak RSS grew by less than 16 MiB
    small = CropDecoder(ImageConfig(size=16, max_pixels=1000), seed=0)  # the limit is an option
    with pytest.raises(ValueError, match="max_pixels"):
        small(jpeg_bytes(0, 0, (64, 48)), out, 0, 0)
