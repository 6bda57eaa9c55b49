"""Bounded fuzzing (hypothesis) of the manifest reader, the tar/sample reader and the image decoder.

Guarantee: on any input they finish (no hang) and fail only with their documented error type:
``ManifestError`` for manifests, ``TarDamage`` for shards (a bad sample carries ``error`` instead),
for images ``ValueError`` (a header without pixels or over ``max_pixels``), ``OSError`` (PIL's truncated or
unidentified image) or PIL's ``DecompressionBombError``, which the batch stage turns into a counted skip;
anything else (an ``IndexError``, a ``ZeroDivisionError``...) would be a bug and fails the test. Each test is capped both
in examples and by a pytest timeout; CI runs them on every submission.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format import RawSample, ShardReader, TarDamage
from shardkit.format.manifest import Manifest
from tests.support.data import jpeg_bytes, tar_bytes

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

# ----------------------------------------------------------------------------- manifests

_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=30)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=20,
)
_shard_entry = st.fixed_dictionaries(
    {
        "name": st.one_of(
            st.text(max_size=20),
            st.just("train-000000.tar"),
            st.sampled_from(["../x.tar", "/x.tar", "pipe:x.tar", "a.tar"]),
        ),
        "samples": st.one_of(st.integers(-5, 2**45), _json_leaf),
        "bytes": st.one_of(st.integers(-5, 2**45), _json_leaf),
        "sha256": st.one_of(st.just("0" * 64), st.text(max_size=70)),
    },
    optional={"extra": _json},
)
_manifest = st.fixed_dictionaries(
    {
        "format": st.one_of(st.just("shardkit-manifest"), _json_leaf),
        "version": st.one_of(st.just(1), _json_leaf),
        "split": _json,
        "classes": st.one_of(st.lists(st.text(max_size=5), max_size=4), _json),
        "shards": st.one_of(st.lists(_shard_entry, max_size=4), _json),
    },
    optional={
        "class_counts": st.one_of(st.lists(st.integers(-2, 5), max_size=4), st.lists(st.floats(), max_size=3), _json),
        "skipped": _json,
        "options": _json,
        "num_samples": _json,
    },
)


@pytest.mark.timeout(120)
@FUZZ
@given(d=_manifest)
def test_fuzz_manifest_structure(d):
    try:
        m = Manifest.from_json(json.dumps(d), url="mem://m.json")
    except ManifestError:
        return
    # accepted: then it is usable
    assert all(0 <= s.samples and 0 <= s.bytes for s in m.shards)
    assert m.num_samples == sum(m.shard_sizes)
    m.shard_url(0) if m.shards else None


@pytest.mark.timeout(60)
@FUZZ
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_fuzz_manifest_bytes(data):
    with pytest.raises(ManifestError):
        Manifest.from_json(data, url="mem://m.json")


# ----------------------------------------------------------------------------- tar / sample reader

_BASE = tar_bytes(
    [
        ("a.cls", b"1"),
        ("a.jpg", b"J" * 700),
        ("a.json", b'{"x": 1}'),
        ("dir/b.cls", b"2"),
        ("dir/b.jpg", b"K" * 30),
        ("x" * 130 + ".cls", b"3"),
        ("x" * 130 + ".jpg", b"L"),
    ]
)


def _read_all(data: bytes, limit: int = 64) -> list[RawSample]:
    r = ShardReader(io.BytesIO(data), "fuzz.tar", num_classes=5)
    out = []
    try:
        for i in range(limit):  # a shard never yields more samples than it has 512-byte blocks
            s = r.read(i)
            if s is None:
                break
            assert isinstance(s, RawSample) and s.index == i
            assert s.error or (isinstance(s.jpeg, bytes) and 0 <= s.label < 5)
            out.append(s)
    except TarDamage as exc:
        assert exc.url == "fuzz.tar" and 0 <= exc.offset <= len(data) + 512 * 3
    return out


def _with_checksum(block: bytearray) -> bytearray:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return block


@pytest.mark.timeout(120)
@FUZZ
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_BASE) - 1), st.integers(0, 255)), max_size=8),
    cut=st.one_of(st.none(), st.integers(0, len(_BASE))),
)
def test_fuzz_tar_byte_flips_and_cuts(edits, cut):
    data = bytearray(_BASE)
    for pos, val in edits:
        data[pos] = val
    _read_all(bytes(data[:cut] if cut is not None else data))


@pytest.mark.timeout(120)
@FUZZ
@given(
    header=st.integers(0, 6),
    edits=st.lists(st.tuples(st.integers(0, 511), st.integers(0, 255)), min_size=1, max_size=12),
)
def test_fuzz_tar_headers_with_valid_checksums(header, edits):
    """Mutate a header and fix its checksum, so the parser goes past the checksum gate."""
    data = bytearray(_BASE)
    starts, pos = [], 0
    while pos + 512 <= len(data) and any(data[pos : pos + 512]):
        starts.append(pos)
        size = int(data[pos + 124 : pos + 136].split(b"\0")[0].strip() or b"0", 8)
        pos += 512 + (size + 511) // 512 * 512
    at = starts[header % len(starts)]
    block = bytearray(data[at : at + 512])
    for p, v in edits:
        if not 148 <= p < 156:
            block[p] = v
    data[at : at + 512] = _with_checksum(block)
    _read_all(bytes(data))


@pytest.mark.timeout(60)
@FUZZ
@given(records=st.lists(st.binary(max_size=40), max_size=5), typ=st.sampled_from([b"x", b"L", b"g"]))
def test_fuzz_pax_records(records, typ):
    import tarfile

    payload = b"".join(records)
    ti = tarfile.TarInfo("././@PaxHeader")
    ti.size = len(payload)
    hdr = bytearray(ti.tobuf(format=tarfile.USTAR_FORMAT))
    hdr[156:157] = typ
    hdr = _with_checksum(hdr[:512])
    body = payload + b"\0" * (-len(payload) % 512)
    _read_all(bytes(hdr) + body + tar_bytes([("a.cls", b"1"), ("a.jpg", b"J")], tarfile.USTAR_FORMAT))


# ----------------------------------------------------------------------------- images


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 4000),
    preset=st.sampled_from(["train", "eval"]),
)
def test_fuzz_jpeg_decode(edits, cut, preset):
    import torch

    data = bytearray(_JPEG)
    for pos, val in edits:
        if pos < len(data):
            data[pos] = val
    out = torch.zeros(3, 16, 16, dtype=torch.uint8)
    try:
        _DECODERS[preset](bytes(data[:cut]), out, 0, 1)
    except _IMAGE_ERRORS:
        pass


def _image_errors() -> tuple[type[BaseException], ...]:
    from PIL import Image

    return (ValueError, OSError, Image.DecompressionBombError)


_IMAGE_ERRORS = _image_errors()


_JPEG = jpeg_bytes(1, 2, (48, 40))
_DECODERS: dict = {}


@pytest.fixture(autouse=True, scope="module")
def _decoders():
    from shardkit.loader.config import ImageConfig
    from shardkit.loader.decode.worker import CropDecoder

    _DECODERS.update(
        train=CropDecoder(ImageConfig(size=16, max_pixels=1 << 20), 0),
        eval=CropDecoder(ImageConfig(preset="eval", size=16, max_pixels=1 << 20), 0),
    )
