"""Guards for the shard format, each checked against an independent, deliberately simple reference.

The reference reader here is ``tarfile`` plus a few lines of the member rule written out plainly
(not shardkit's ``split_member``); the mutant gate (``tests/mutants/format.py``) plants the bugs
these tests must catch.
"""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardkit.format import EncodedSample, ShardReader, TarDamage, write_tar
from shardkit.format.members import _depth

NUM_CLASSES = 3


# ----------------------------------------------------------------------------- the reference reader


def _reference(data: bytes, num_classes: int) -> list[tuple]:
    """``(key, usable, jpeg, label)`` per sample, read with tarfile and the member rule written out plainly."""
    groups: list[dict] = []
    seen: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf:
            if not m.isreg():
                continue
            folder, _, base = m.name.rpartition("/")
            if "." not in base or base.startswith(("__", ".")):
                continue
            key = (folder + "/" if folder else "") + base.split(".", 1)[0]
            ext = base.split(".", 1)[1]
            cur = groups[-1] if groups else None
            if cur is None or cur["key"] != key or ext in cur["fields"]:
                cur = {"key": key, "fields": {}, "dup": key in seen}
                seen.add(key)
                groups.append(cur)
            cur["fields"][ext] = tf.extractfile(m).read()
    out = []
    for g in groups:
        f = g["fields"]
        cls, jpg, meta = f.get("cls"), f.get("jpg"), f.get("json")
        label = int(cls) if cls is not None and cls.isdigit() else None
        meta_ok = True
        if meta is not None:
            try:
                meta_ok = isinstance(json.loads(meta), dict)
            except ValueError:
                meta_ok = False
        usable = not g["dup"] and jpg is not None and label is not None and label < num_classes and meta_ok
        out.append((g["key"], usable, jpg if usable else None, label if usable else None))
    return out


def _walk(data: bytes, num_classes: int) -> list[tuple]:
    r = ShardReader(io.BytesIO(data), "s.tar", num_classes=num_classes)
    out = []
    for _ in range(10_000):
        s = r.read(r.index)
        if s is None:
            return out
        ok = s.error is None
        out.append((s.key, ok, s.jpeg if ok else None, s.label if ok else None))
    raise AssertionError("the walk did not end")


_KEYS = st.sampled_from(["a", "b", "c", "d/e", "x.v1/f"])
_FIELD = st.one_of(
    st.tuples(st.just("cls"), st.sampled_from([b"0", b"2", b"3", b"x", b""])),
    st.tuples(st.just("jpg"), st.binary(min_size=1, max_size=700)),
    st.tuples(st.just("json"), st.sampled_from([b"{}", b'{"class": "c"}', b"[1]", b"{bad"])),
    st.tuples(st.just("txt"), st.binary(max_size=30)),
)
_KIND = st.sampled_from([tarfile.REGTYPE] * 6 + [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE])


def _tar(members: list[tuple[str, bytes, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, kind in members:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            if kind == tarfile.REGTYPE:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                ti.linkname = "elsewhere.jpg" if kind != tarfile.DIRTYPE else ""
                tf.addfile(ti)
    return buf.getvalue()


_R, _S = tarfile.REGTYPE, tarfile.SYMTYPE


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_KEYS, _FIELD, _KIND), max_size=14))
@example([("a", ("cls", b"x"), _R), ("a", ("jpg", b"j"), _R)])  # unreadable label
@example(
    [("a", ("cls", b""), _R), ("a", ("jpg", b"j"), _R), ("b", ("cls", b"3"), _R), ("b", ("jpg", b"j"), _R)]
)  # empty, out of range
@example([("a", ("cls", b"0"), _R), ("a", ("jpg", b"j"), _S), ("a", ("jpg", b"k"), _R)])  # a link is no member
@example(
    [("a", ("cls", b"0"), _R), ("a", ("jpg", b"j"), _R), ("a", ("jpg", b"k"), _R), ("a", ("cls", b"2"), _R)]
)  # repeated field
@example(
    [
        ("b", ("cls", b"0"), _R),
        ("b", ("jpg", b"j"), _R),
        ("c", ("cls", b"0"), _R),
        ("b", ("jpg", b"z"), _R),
        ("b", ("cls", b"1"), _R),
    ]
)  # a key seen before, not adjacent
def test_walk_equals_a_tarfile_reference(members):
    """Any member order, repeated fields, repeated keys, links and bad labels: every sample the walk
    yields is the reference's, usable exactly when the reference says so, with its bytes and label."""
    data = _tar([(f"{key}.{ext}", body, kind) for key, (ext, body), kind in members])
    assert _walk(data, NUM_CLASSES) == _reference(data, NUM_CLASSES)


def test_label_bound_is_exclusive():
    """Labels are in ``[0, num_classes)``: ``num_classes`` itself is out of range, ``num_classes - 1`` is not."""
    data = _tar(
        [
            (f"{k}.{e}", b, tarfile.REGTYPE)
            for k, lab in (("a", b"2"), ("b", b"3"))
            for e, b in (("cls", lab), ("jpg", b"j"))
        ]
    )
    assert [(k, ok, lab) for k, ok, _, lab in _walk(data, 3)] == [("a", True, 2), ("b", False, None)]
    assert [(k, ok) for k, ok, _, _ in _walk(data, 4)] == [("a", True), ("b", True)]


# ----------------------------------------------------------------------------- a cut shard


def _cut_case(jpeg_sizes: list[int]) -> tuple:
    samples = [EncodedSample(f"k{i}", bytes([i + 1]) * n, i % NUM_CLASSES, {"i": i}) for i, n in enumerate(jpeg_sizes)]
    full = io.BytesIO()
    write_tar(samples, full)
    shard = full.getvalue()
    with tarfile.open(fileobj=io.BytesIO(shard)) as tf:
        members = tf.getmembers()
    # where each sample's members lie: (data start, data end) per field
    spans: dict[str, dict[str, tuple[int, int]]] = {}
    for m in members:
        key, ext = m.name.split(".", 1)
        spans.setdefault(key, {})[ext] = (m.offset_data, m.offset_data + m.size)
    eof = max(m.offset_data + m.size + (-m.size) % 512 for m in members)
    return samples, shard, spans, eof


def _check_cut(samples, shard, spans, eof, cut: int) -> None:
    r = ShardReader(io.BytesIO(shard[:cut]), "s.tar", num_classes=NUM_CLASSES)
    good, damaged = [], False
    for _ in range(20):
        try:
            s = r.read(r.index)
        except TarDamage:
            damaged = True
            break
        if s is None:
            break
        if s.error is None:
            good.append((s.key, s.jpeg, s.label))

    def complete(f: dict) -> bool:
        # image and label read in full; the optional .json read in full, or its header not reached
        # (the damage is then found after the sample, which is delivered without its metadata)
        return f["cls"][1] <= cut and f["jpg"][1] <= cut and (f["json"][1] <= cut or cut < f["json"][0])

    expect = [(s.key, s.jpeg, s.label) for s in samples if complete(spans[s.key])]
    assert good == expect, cut
    assert damaged == (cut < eof + 512), cut


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 1500), min_size=1, max_size=4), st.data())
def test_walk_of_a_cut_shard_is_the_prefix_then_damage(jpeg_sizes, data):
    """A shard cut at any byte: exactly the samples whose image and label lie before the cut are delivered (with
    their own bytes; a cut inside a ``.json`` member's data loses the sample), then :class:`TarDamage`;
    never a sample with a short image."""
    case = _cut_case(jpeg_sizes)
    boundaries = sorted(e for f in case[2].values() for _, e in f.values())
    cut = data.draw(
        st.one_of(
            st.integers(0, len(case[1]) - 1),
            st.sampled_from(boundaries),
            st.sampled_from(boundaries).map(lambda b: b - 1),
        )
    )
    _check_cut(*case, cut)


def test_walk_of_every_cut_of_a_small_shard():
    """The same for a three-sample shard cut around every header and member end, and every 97th byte (deterministic)."""
    case = _cut_case([700, 3, 1025])
    cuts = set(range(0, len(case[1]), 97))
    for f in case[2].values():
        for start, end in f.values():
            cuts |= {start - 512, start - 511, start - 1, start, start + 1, end - 1, end, end + 1}
    for cut in sorted(c for c in cuts if 0 <= c < len(case[1])):
        _check_cut(*case, cut)


# ----------------------------------------------------------------------------- the writer


def test_writer_bytes_do_not_depend_on_metadata_insertion_order():
    """Metadata is canonical JSON: the same dict built in another order gives the same shard bytes."""
    a, b = io.BytesIO(), io.BytesIO()
    wa = write_tar([EncodedSample("k", b"jpeg", 1, {"path": "c/x.jpg", "class": "c", "width": 3, "height": 2})], a)
    wb = write_tar([EncodedSample("k", b"jpeg", 1, {"height": 2, "width": 3, "class": "c", "path": "c/x.jpg"})], b)
    assert a.getvalue() == b.getvalue() and wa.sha256 == wb.sha256


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(max_size=2000), st.integers(0, 10**6)), min_size=1, max_size=8))
@example([(b"x" * 5, 3), (b"", 0)])
def test_writer_index_slices_equal_a_tarfile_reference(rows):
    """The index the writer records hands out exactly the bytes and labels tarfile reads back."""
    samples = [EncodedSample(f"k{i:03d}", jpeg, label, {"i": i}) for i, (jpeg, label) in enumerate(rows)]
    buf = io.BytesIO()
    w = write_tar(samples, buf)
    data = buf.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        ref = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
    assert w.index is not None
    lo, hi = w.index.byte_range(0, len(samples))
    got = w.index.slice(data[lo:hi], 0, len(samples), url="s.tar")
    assert [(s.key, s.jpeg, s.label, s.error) for s in got] == [
        (s.key, ref[f"{s.key}.jpg"], int(ref[f"{s.key}.cls"]), None) for s in samples
    ]


# ----------------------------------------------------------------------------- JSON depth


def _ref_depth(v) -> int:
    if isinstance(v, dict):
        return 1 + max((_ref_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_ref_depth(x) for x in v), default=0)
    return 0


_TRICKY = st.text(alphabet='[]{}"\\ ab', max_size=8)
_JSON = st.recursive(
    st.one_of(st.integers(), _TRICKY, st.none()),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(_TRICKY, kids, max_size=3)),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_JSON)
@example(['"['])  # an escaped quote, then a bracket inside the string
def test_json_depth_equals_a_reference_parser(value):
    """The bracket count ignores brackets and escaped quotes inside strings: it equals the parsed value's nesting."""
    assert _depth(json.dumps(value).encode()) == _ref_depth(value)


# ----------------------------------------------------------------------------- numeric header fields


def _with_size_field(data: bytes, member: str, field: bytes) -> bytes:
    """``data`` with ``member``'s 12-byte size field replaced by ``field`` and its checksum recomputed."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        at = next(m.offset for m in tf.getmembers() if m.name == member)
    b = bytearray(data)
    b[at + 124 : at + 136] = field
    b[at + 148 : at + 156] = b" " * 8
    b[at + 148 : at + 155] = b"%06o\0" % sum(b[at : at + 512])
    return bytes(b)


@pytest.mark.parametrize("field", [b"-0000000001\0", b"+0000000001\0", b"0o000000001\0", b"00000_00001\0"])
def test_signed_or_prefixed_size_fields_are_damage(field):
    """A size field that is not plain octal digits (``int(s, 8)`` would take a sign, ``0o`` or ``_``) is damage at
    that header, even with a valid checksum: never a sample holding the rest of the shard, or a cut image."""
    data = _tar(
        [
            ("a.cls", b"1", tarfile.REGTYPE),
            ("a.jpg", bytes(range(256)) * 4, tarfile.REGTYPE),
            ("b.cls", b"2", tarfile.REGTYPE),
            ("b.jpg", b"j", tarfile.REGTYPE),
        ]
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        at = next(m.offset for m in tf.getmembers() if m.name == "a.jpg")
    r = ShardReader(io.BytesIO(_with_size_field(data, "a.jpg", field)), "s.tar", num_classes=NUM_CLASSES)
    usable = []
    with pytest.raises(TarDamage, match=rf"s.tar: damaged tar at byte {at}: malformed header"):
        for _ in range(10):
            s = r.read(r.index)
            if s is None:
                break
            if s.error is None:
                usable.append(s.key)
    assert usable == []


# ----------------------------------------------------------------------------- verify


def test_verify_reports_a_key_repeated_in_another_shard(tmp_path):
    """Two shards of one split holding the same key: each shard is fine alone, the split is not (keys are unique
    per split), and ``verify`` says which key in which shard."""
    from shardkit.ops.verify import verify
    from tests.support.data import jpeg_bytes, tar_bytes, write_raw_dataset

    j = jpeg_bytes(0, 0, (24, 20))
    shard = tar_bytes([("a.cls", b"0"), ("a.jpg", j), ("a.json", b'{"class": "x"}')])
    other = tar_bytes([("b.cls", b"0"), ("b.jpg", j), ("b.json", b'{"class": "x"}')])
    root = write_raw_dataset(str(tmp_path / "ds"), [(shard, 1), (other, 1), (shard, 1)], ["x"])
    assert [(p.key, p.message) for p in verify(root).problems] == [("a", "key appears more than once in the split")]


def test_member_name_and_json_limits_are_inclusive():
    """The limits are sizes that are still accepted: a name of exactly ``MAX_NAME`` characters and a ``.json`` of exactly
    ``MAX_JSON_BYTES`` bytes pass, one more is damage (found by a mutmut run over ``format/members.py``)."""
    from shardkit.format.members import MAX_JSON_BYTES, MAX_NAME, UnsafeName, parse_meta, split_member

    stem = "d/" + "a" * (MAX_NAME - len("d/") - len(".jpg"))
    assert split_member(stem + ".jpg") == (stem, "jpg") and len(stem + ".jpg") == MAX_NAME
    with pytest.raises(UnsafeName):
        split_member("a" + stem + ".jpg")
    pad = MAX_JSON_BYTES - len(b'{"k": ""}')
    data = b'{"k": "' + b"x" * pad + b'"}'
    assert len(data) == MAX_JSON_BYTES and parse_meta(data) == {"k": "x" * pad}
    with pytest.raises(ValueError, match="metadata of"):
        parse_meta(data[:-2] + b'x"}')
