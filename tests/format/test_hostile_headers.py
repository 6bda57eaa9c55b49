"""Review of the shard format package: hostile tar headers and hostile sample indexes.

The index must never hand out a sample the header walk would not (another key, a member the walk skips,
bytes behind an extended header), and a hostile header or index is damage (``TarDamage``/``IndexDamage``),
never another exception and never a large allocation.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import zlib
from dataclasses import replace

import numpy as np
import pytest

import shardkit
from shardkit.format import IndexDamage, ShardReader, TarDamage, load_index, write_tar
from shardkit.format.index import SampleIndex
from shardkit.format.indexio import build_index
from shardkit.format.writer import EncodedSample
from shardkit.ops.verify import verify
from tests.support.data import jpeg_bytes, tar_bytes, write_raw_dataset

CLASSES = ["x", "y", "z"]
SMALL = dict(size=16, pin_memory=False, multiprocessing_context="fork")
SAMPLES = [
    EncodedSample(f"{i:04d}", jpeg_bytes(i % 3, i, (24, 20)), i % 3, {"class": CLASSES[i % 3]}) for i in range(6)
]


def _shard() -> tuple[bytes, SampleIndex]:
    buf = io.BytesIO()
    w = write_tar(SAMPLES, buf)
    assert w.index is not None
    return buf.getvalue(), w.index


def _walk_samples(data: bytes) -> list:
    """The samples the header walk delivers (``gid`` = index), up to any damage."""
    r = ShardReader(io.BytesIO(data), "s", num_classes=3)
    got: list = []
    with contextlib.suppress(TarDamage):
        got.extend(iter(lambda: r.read(r.index, r.index), None))
    return got


def _walk(data: bytes) -> list:
    return [(s.key, s.error) for s in _walk_samples(data)]


def _fix_checksum(data: bytearray, at: int) -> None:
    """Recompute the checksum of the header at ``at`` (a tampered header that still passes the checksum)."""
    h = data[at : at + 512]
    h[148:156] = b" " * 8
    data[at + 148 : at + 156] = b"%06o\0 " % sum(h)


def _header_of(idx: SampleIndex, i: int, c: int) -> int:
    return int(idx.starts[i]) + int(idx.offsets[i, c]) - 512


def _retarget(idx: SampleIndex, data: bytes) -> SampleIndex:
    """``idx`` for the tampered shard bytes ``data`` (size and sha256 as a manifest written after it would say)."""
    import hashlib

    return SampleIndex(
        idx.keys, idx.exts, idx.starts, idx.offsets, idx.sizes, len(data), hashlib.sha256(data).hexdigest()
    )


def _slice_all(idx: SampleIndex, data: bytes) -> list:
    lo, hi = idx.byte_range(0, len(idx))
    return [(s.key, s.error) for s in idx.slice(data[lo:hi], 0, len(idx), url="s", num_classes=3)]


def _assert_withheld(idx: SampleIndex, data: bytes, sample: int) -> None:
    """Sample ``sample`` of the tampered ``data`` is withheld, by its CRC32C and (an index without
    checksums) by its tar headers alone; the other samples are delivered."""
    for index in (idx, replace(idx, crc32c=None)):
        got = _slice_all(index, data)
        assert "changed since conversion" in (got[sample][1] or ""), (index.has_checksums, got[sample])
        assert all(err is None for i, (_, err) in enumerate(got) if i != sample)


def test_member_of_another_type_is_not_sliced(tmp_path):
    """A member the walk skips (a directory, a link) must not be handed out by the index."""
    data, idx = _shard()
    tampered = bytearray(data)
    at = _header_of(idx, 1, idx.exts.index("jpg"))
    tampered[at + 156 : at + 157] = b"5"  # sample 1's image becomes a directory entry
    _fix_checksum(tampered, at)
    walked = _walk(bytes(tampered))
    assert walked[1] == ("0001", "missing field 'jpg'")
    _assert_withheld(idx, bytes(tampered), 1)


def test_ustar_prefix_changes_the_key_for_the_walk_so_the_index_must_see_it():
    data, idx = _shard()
    tampered = bytearray(data)
    for c in range(len(idx.exts)):
        at = _header_of(idx, 2, c)
        tampered[at + 345 : at + 350] = b"other"  # USTAR prefix: the member is other/0002.<ext> for the walk
        _fix_checksum(tampered, at)
    assert [k for k, _ in _walk(bytes(tampered))][2] == "other/0002"
    _assert_withheld(idx, bytes(tampered), 2)


def test_index_cannot_point_behind_an_extended_header():
    """A pax header names the next member for the walk; an index skipping over it would rename the sample."""
    import tarfile

    ti = tarfile.TarInfo("a.cls")
    ti.pax_headers = {"path": "evil.cls"}
    data = tar_bytes([(ti, b"1"), ("a.jpg", SAMPLES[0].jpeg)])
    assert [k for k, _ in _walk(data)] == ["evil", "a"]
    # a consistent, hand-made index that calls bytes [1024, ...) sample "a" with both members
    r = ShardReader(io.BytesIO(data), "s")
    r.read(0)
    cls = r.layout.members[0]
    r.read(1)
    jpg = r.layout.members[0]
    starts = np.array([cls.data_offset - 512, r.layout.end], np.uint64)
    offsets = np.array([[512, jpg.data_offset - cls.data_offset + 512]], np.uint32)
    sizes = np.array([[cls.size, jpg.size]], np.uint32)
    import hashlib

    hostile = SampleIndex(("a",), ("cls", "jpg"), starts, offsets, sizes, len(data), hashlib.sha256(data).hexdigest())
    with pytest.raises(IndexDamage):
        SampleIndex.from_bytes(hostile.to_bytes())


def _craft(n: int, keys: list[str], exts: list[str], starts, offsets, sizes, nbytes: int) -> bytes:
    e, k = "\n".join(exts).encode(), "\n".join(keys).encode()
    head = struct.pack(
        "<8sIIQ32sII", b"SKINDEX1", n, len(offsets[0]) if len(offsets) else 1, nbytes, b"\0" * 32, len(e), len(k)
    )
    body = (
        head
        + e
        + k
        + np.asarray(starts, "<u8").tobytes()
        + np.asarray(offsets, "<u4").tobytes()
        + np.asarray(sizes, "<u4").tobytes()
    )
    return body + struct.pack("<I", zlib.crc32(body))


def test_hostile_index_fields_are_index_damage():
    ok = _craft(2, ["a", "b"], ["cls"], [0, 1024, 2048], [[512], [512]], [[1], [1]], 10240)
    assert len(SampleIndex.from_bytes(ok)) == 2
    cases = {
        # a uint64 start above 2**63 passed the ordering check (read as a negative int64): read() then seeks to 2**64
        "start beyond 2**63": _craft(
            2, ["a", "b"], ["cls"], [2**64 - 1024, 1024, 2048], [[512], [512]], [[1], [1]], 10240
        ),
        # the walk reads a name from the 100-byte name field only: a longer name can only match bytes the walk ignores
        "name longer than a header's name field": _craft(1, ["k" * 120], ["cls"], [0, 1024], [[512]], [[1]], 10240),
        # members must follow each other (header, data, padding): a gap could hide a header the walk reads
        "gap between members": _craft(1, ["a"], ["cls", "jpg"], [0, 2560], [[512, 2048]], [[1, 1]], 10240),
        "gap between samples": _craft(2, ["a", "b"], ["cls"], [0, 1536, 2560], [[512], [512]], [[1], [1]], 10240),
        "first sample not at byte 0": _craft(1, ["a"], ["cls"], [512, 1536], [[512]], [[1]], 10240),
    }
    for what, raw in cases.items():
        with pytest.raises(IndexDamage):
            SampleIndex.from_bytes(raw)
            pytest.fail(what)


def test_malformed_size_field_is_a_mismatch_not_a_value_error():
    data, idx = _shard()
    tampered = bytearray(data)
    at = _header_of(idx, 0, 0)
    tampered[at + 124 : at + 136] = b"9" * 11 + b"\0"  # not octal, checksum fixed
    _fix_checksum(tampered, at)
    _assert_withheld(idx, bytes(tampered), 0)


def test_huge_member_size_is_tar_damage_for_walk_loader_and_verify(tmp_path):
    data = bytearray(tar_bytes([("a.cls", b"1"), ("a.txt", b"x" * 10), ("a.jpg", SAMPLES[0].jpeg), ("b.cls", b"2")]))
    data[1024 + 124 : 1024 + 136] = b"\x80" + (2**80).to_bytes(11, "big")  # a.txt: a base-256 size of 2**80 bytes
    _fix_checksum(data, 1024)
    with pytest.raises(TarDamage):
        ShardReader(io.BytesIO(bytes(data)), "s").read(1)
    root = write_raw_dataset(str(tmp_path / "ds"), [(bytes(data), 2)], CLASSES)
    with open(root + "/train-000000.tar", "rb") as f:
        with pytest.raises(TarDamage):
            ShardReader(f, "s").read(1)
    msgs = [p.message for p in verify(root).problems]
    assert any("not a readable tar" in m for m in msgs), msgs
    loader = shardkit.load(root, batch_size=2, num_workers=0, raw=True, shuffle=False, **SMALL)
    assert [
        s for b in loader for s in b
    ] == [] and loader.stats.skipped == 2  # both samples lost to the damage, counted


class _Recording:
    """A file over ``data`` that records how many bytes each read asked for."""

    def __init__(self, data: bytes):
        self.f, self.asked = io.BytesIO(data), []

    def read(self, n: int = -1) -> bytes:
        self.asked.append(n)
        return self.f.read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_load_index_reads_what_the_header_announces_not_256_mib():
    data, idx = _shard()
    raw = idx.to_bytes()
    opened = []

    def open_fn(url):
        opened.append(_Recording(raw))
        return opened[-1]

    assert load_index("s.tar", shard_bytes=idx.shard_bytes, shard_sha256=idx.shard_sha256, open_fn=open_fn) == idx
    assert max(opened[0].asked) <= len(raw)
    # a header announcing 2**32-1 samples is refused before anything that size is read
    huge = bytearray(raw)
    huge[8:12] = struct.pack("<I", 2**32 - 1)
    raw = bytes(huge)
    opened.clear()
    with pytest.raises(IndexDamage):
        load_index("s.tar", shard_bytes=idx.shard_bytes, shard_sha256=idx.shard_sha256, open_fn=open_fn)
    assert max(opened[0].asked) <= len(raw)


def test_index_from_the_writer_still_loads_and_slices_like_the_walk():
    data, idx = _shard()
    back = SampleIndex.from_bytes(idx.to_bytes(), shard_bytes=len(data), shard_sha256=idx.shard_sha256)
    assert _slice_all(back, data) == _walk(data) == [(s.key, None) for s in SAMPLES]
    assert build_index([], [], 0, "0" * 64) is None
    assert json.loads(b"{}") == {}


def test_index_member_larger_than_the_walk_loads_is_refused():
    """The walk refuses to load a member over MAX_MEMBER_BYTES (a bad sample); the index must not load it either."""
    from shardkit.format.tar import MAX_MEMBER_BYTES, pad

    size = MAX_MEMBER_BYTES + 1
    raw = _craft(1, ["a"], ["jpg"], [0, 512 + pad(size)], [[512]], [[size]], 1 << 30)
    with pytest.raises(IndexDamage):
        SampleIndex.from_bytes(raw)


def test_hostile_conversion_plan_is_a_problem_not_a_crash(tmp_path):
    """An interrupted split's ``_shardkit/plan.json`` is read to say how far it got: a bad one is 'unreadable'."""
    import os

    split = tmp_path / "ds" / "val"
    (split / "_shardkit").mkdir(parents=True)
    (split / "val-000000.tar").write_bytes(tar_bytes([("a.cls", b"1")]))
    for bad in (b"[" * 100_000, b'{"num_planned": "x"}', b'{"num_planned": [1]}', b"\xff", b"[]"):
        (split / "_shardkit" / "plan.json").write_bytes(bad)
        msgs = [p.message for p in verify(str(tmp_path / "ds")).problems]
        assert len(msgs) == 1 and "incomplete conversion" in msgs[0] and "plan is unreadable" in msgs[0], (
            bad[:10],
            msgs,
        )
    assert os.path.exists(split / "val-000000.tar")


def test_metadata_with_a_name_utf8_cannot_hold_is_written_and_read_back():
    """A file name that is not valid UTF-8 (surrogate-escaped) must not abort writing its shard."""
    from shardkit.format.members import parse_meta
    from shardkit.format.writer import meta_bytes

    meta = {"path": "cls/a\udcff.jpg", "class": "cls"}
    assert parse_meta(meta_bytes(meta)) == meta
    assert meta_bytes({"path": "é"}) == '{"path":"é"}'.encode()  # valid names: bytes unchanged
    buf = io.BytesIO()
    w = write_tar([EncodedSample("0000", SAMPLES[0].jpeg, 0, meta)], buf)
    r = ShardReader(io.BytesIO(buf.getvalue()), "s", num_classes=3)
    s = r.read(0)
    assert s.error is None and s.meta == meta and w.index is not None


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def test_writer_is_byte_for_byte_webdatasets_tarwriter():
    """The writer's docstring claim: byte for byte what ``webdataset.TarWriter`` writes with these settings."""
    wds = pytest.importorskip("webdataset")
    from shardkit.format.writer import meta_bytes

    samples = SAMPLES + [
        EncodedSample("k-_9", b"\xff\xd8" + bytes(range(256)) * 3, 2, {"class": "é", "path": "a/b c.jpg"})
    ]
    ours = io.BytesIO()
    write_tar(samples, ours)
    theirs = io.BytesIO()
    with wds.TarWriter(theirs, user="shardkit", group="shardkit", mode=0o444, mtime=0, encoder=False) as tw:
        for s in samples:
            tw.write({"__key__": s.key, "cls": str(s.label).encode(), "jpg": s.jpeg, "json": meta_bytes(s.meta)})
    assert ours.getvalue() == theirs.getvalue()


# --- loader and verify on random awkward shards: the same samples skipped, for the same reasons ------------------

_J = [jpeg_bytes(n % 3, n, (24, 20)) for n in range(3)]
_NAMES = st.sampled_from(["a", "b", "d.x/a", "../u", "/abs", "__k", "c"])
_FIELDS = st.sampled_from(["cls", "jpg", "json", "txt", "v2.cls", ""])
_PAYLOAD = {
    "cls": [b"0", b"2", b"7", b"x"],
    "jpg": [_J[0], _J[1], b"notjpeg"],
    "json": [b'{"class":"x"}', b"[" * 100, b"{"],
    "txt": [b"t"],
    "v2.cls": [b"1"],
    "": [b"z"],
}


@pytest.mark.timeout(300)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(members=st.lists(st.tuples(_NAMES, _FIELDS, st.integers(0, 3)), min_size=1, max_size=12))
def test_fuzz_loader_and_verify_agree_on_awkward_shards(members, tmp_path_factory):
    pairs = [(f"{k}.{e}" if e else k, _PAYLOAD[e][v % len(_PAYLOAD[e])]) for k, e, v in members]
    data = tar_bytes(pairs)
    walked = _walk_samples(data)
    if not walked:
        return
    root = write_raw_dataset(str(tmp_path_factory.mktemp("fz") / "ds"), [(data, len(walked))], CLASSES)
    loader = shardkit.load(root, batch_size=4, num_workers=0, raw=True, shuffle=False, **SMALL)
    got = [s.key for b in loader for s in b]
    assert got == [s.key for s in walked if not s.error]
    problems = verify(root).problems
    bad = [(s.key, s.error) for s in walked if s.error]
    assert [(p.key, p.message) for p in problems if (p.key, p.message) in bad] == bad
    # everything else verify says is about samples the loader delivers (metadata, decode), never a skipped one
    assert all(p.key in got for p in problems if (p.key, p.message) not in bad), problems


def test_writer_refuses_a_key_no_reader_would_see():
    """``__x`` matched KEY_PATTERN, but the member rule reserves ``__`` names: the writer hit a bare assert
    (and with ``python -O`` would write a sample that no reader delivers)."""
    from shardkit.format import KEY_PATTERN

    for key in ("__x", "__", "k\n"):  # a trailing newline matched "$" and broke the index's newline-joined keys
        assert not KEY_PATTERN.match(key)
        with pytest.raises(ValueError, match="invalid sample key"):
            write_tar([EncodedSample(key, SAMPLES[0].jpeg, 0, {})], io.BytesIO())
    assert KEY_PATTERN.match("_x") and KEY_PATTERN.match("x__y")


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(key=st.text("ab./_", max_size=8), ext=st.text("c./_", max_size=5))
def test_index_key_check_per_key_equals_the_member_rule_per_member(key, ext):
    """The index checks one name per key (``<key>.x``) and '/' in fields instead of every ``<key>.<ext>``."""
    from shardkit.format import UnsafeName, split_member

    def ok(name, want):
        try:
            return split_member(name) == want
        except UnsafeName:
            return False

    assert ok(f"{key}.{ext}", (key, ext)) == (ok(f"{key}.x", (key, "x")) and "/" not in ext)


def test_oversized_label_and_metadata_members_are_bad_samples_read_by_neither_walk_nor_index():
    """A 1 MiB ``.cls`` or a 2 MiB ``.json`` is refused from its header's size (up to 256 MiB were read first)."""
    import hashlib

    from shardkit.format.indexio import index_from_walk

    members = [
        ("a.cls", b"0" + b" " * (1 << 20)),
        ("a.jpg", SAMPLES[0].jpeg),
        ("a.json", b"{}"),
        ("b.cls", b"1"),
        ("b.jpg", SAMPLES[1].jpeg),
        ("b.json", b"{}" + b" " * (2 << 20)),
        ("c.cls", b"2"),
        ("c.jpg", SAMPLES[2].jpeg),
        ("c.json", b"{}"),
    ]
    data = tar_bytes(members, fmt=__import__("tarfile").USTAR_FORMAT)
    r = ShardReader(io.BytesIO(data), "s", num_classes=3)
    walked = [r.read(i) for i in range(3)]
    assert r.bytes_read < 64 << 10  # neither big member was read
    assert [s.error for s in walked] == [
        "member a.cls has 1048577 bytes (limit 64)",
        "bad .json member: metadata of 2097154 bytes (limit 1048576)",
        None,
    ]
    idx = index_from_walk(io.BytesIO(data), "s", len(data), hashlib.sha256(data).hexdigest())
    assert idx is not None and idx.slice(data[: idx.byte_range(0, 3)[1]], 0, 3, url="s", num_classes=3) == walked


def test_pax_size_record_is_honoured_as_tar_and_webdataset_do():
    """A pax ``size`` record overrides the header's size field (how members over 8 GiB are written: the field is 0)."""
    import tarfile

    ti = tarfile.TarInfo("a.jpg")
    ti.pax_headers = {"size": str(len(SAMPLES[0].jpeg))}
    data = bytearray(tar_bytes([("a.cls", b"1"), (ti, SAMPLES[0].jpeg), ("b.cls", b"2"), ("b.jpg", SAMPLES[1].jpeg)]))
    at = data.index(b"a.jpg\0", 1024)  # the member header after the pax header
    data[at + 124 : at + 136] = b"%011o\0" % 0
    _fix_checksum(data, at)
    data = bytes(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        assert [(m.name, m.size) for m in tf.getmembers()] == [
            ("a.cls", 1),
            ("a.jpg", len(SAMPLES[0].jpeg)),
            ("b.cls", 1),
            ("b.jpg", len(SAMPLES[1].jpeg)),
        ]
    r = ShardReader(io.BytesIO(data), "s", num_classes=3)
    got = [r.read(0), r.read(1)]
    assert [(s.key, s.label, s.jpeg, s.error) for s in got] == [
        ("a", 1, SAMPLES[0].jpeg, None),
        ("b", 2, SAMPLES[1].jpeg, None),
    ]


def test_a_manifest_without_classes_loader_and_verify_agree(tmp_path):
    """The loader takes ``classes: []`` as "any label" (``len(classes) or None``); verify called every label
    out of range (and would index an empty class list)."""
    members = [
        ("a.cls", b"3"),
        ("a.jpg", SAMPLES[0].jpeg),
        ("a.json", b"{}"),
        ("b.cls", b"0"),
        ("b.jpg", SAMPLES[1].jpeg),
    ]
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes(members), 2)], [])
    got = [s.key for b in shardkit.load(root, batch_size=2, num_workers=0, raw=True, shuffle=False, **SMALL) for s in b]
    assert got == ["a", "b"]
    problems = verify(root).problems
    assert [(p.key, p.message) for p in problems] == [("b", "missing member .json")]
