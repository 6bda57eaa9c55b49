"""The stored fields' members and rules: ``.labels.json``, ``.target.json``, ``.txt``, ``SampleRule``,
manifest version 3, the writer and ``verify`` on them, each against a deliberately simple reference written here."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tarfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError
from shardkit.format import EncodedSample, write_tar
from shardkit.format.fields import (
    fields_error,
    labels_bytes,
    parse_labels,
    parse_target,
    parse_text,
    target_bytes,
    text_bytes,
)
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from shardkit.format.sample import RawSample, SampleRule
from shardkit.ops.verify import verify
from tests.support.data import image_bytes

SET = settings(derandomize=True, deadline=None, max_examples=100, database=None)

json_scalars = st.one_of(
    st.integers(-3, 12), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False), st.text(max_size=3)
)
json_values = st.recursive(json_scalars, lambda v: st.lists(v, max_size=5), max_leaves=8)


def _ref_labels(data: bytes, c: int | None):
    v = json.loads(data.decode("utf-8"))
    assert isinstance(v, list)
    assert all(type(x) is int for x in v) and len(set(v)) == len(v)
    assert all(0 <= x and (c is None or x < c) and x < 2**63 for x in v)
    return tuple(sorted(v))


def _ref(fn, *args):
    try:
        return fn(*args)
    except (AssertionError, ValueError, UnicodeDecodeError):
        return "refused"


@SET
@given(value=json_values, c=st.sampled_from([None, 1, 5, 12]), spaced=st.booleans())
@example(value=[3, 3], c=None, spaced=False)
@example(value=[True], c=None, spaced=False)
@example(value=[0, 4], c=4, spaced=True)
def test_parse_labels_matches_the_reference(value, c, spaced):
    data = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":")).encode()
    got = _ref(parse_labels, data, c)
    assert got == _ref(_ref_labels, data, c)


@SET
@given(labels=st.sets(st.integers(0, 2**63 - 1), max_size=8))
def test_labels_member_round_trips_sorted_and_compact(labels):
    data = labels_bytes(tuple(labels))
    assert data == ("[" + ",".join(str(x) for x in sorted(labels)) + "]").encode()
    assert parse_labels(data) == tuple(sorted(labels)) and json.loads(data) == sorted(labels)


@pytest.mark.parametrize("bad", [(1, 1), (-1,), (True,), (1.0,)])
def test_labels_member_refuses_what_it_cannot_hold(bad):
    with pytest.raises(ValueError):
        labels_bytes(bad)


def _ref_target(data: bytes, d: int | None):
    v = json.loads(data.decode("utf-8"))
    assert isinstance(v, list) and all(type(x) in (int, float) for x in v)
    assert d is None or len(v) == d
    out = tuple(float(x) for x in v)
    assert all(x == x and abs(x) != float("inf") for x in out)
    return out


@SET
@given(value=json_values, d=st.sampled_from([None, 0, 1, 2]))
@example(value=[1, 2.5], d=2)
@example(value=[10**400], d=None)
@example(value=[1e308, -0.0], d=None)
def test_parse_target_matches_the_reference(value, d):
    try:
        data = json.dumps(value).encode()
    except (ValueError, OverflowError):
        return
    try:
        got = parse_target(data, d)
    except (ValueError, OverflowError):
        got = "refused"
    try:
        want = _ref_target(data, d)
    except (AssertionError, ValueError, OverflowError):
        want = "refused"
    assert got == want


@SET
@given(target=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=6))
def test_target_member_is_repr_exact_and_round_trips(target):
    data = target_bytes(tuple(target))
    assert data.decode() == "[" + ",".join(repr(float(x)) for x in target) + "]"
    back = parse_target(data, len(target))
    assert back == tuple(target) and all(math.copysign(1, a) == math.copysign(1, b) for a, b in zip(back, target))


@pytest.mark.parametrize("bad", [(float("nan"),), (float("inf"),), (True,), ("1",)])
def test_target_member_refuses_non_finite_and_non_numbers(bad):
    with pytest.raises(ValueError):
        target_bytes(bad)


@SET
@given(text=st.text(max_size=40))
@example(text="two\nlines \u00e9 \u540d")
def test_text_member_round_trips(text):
    assert parse_text(text_bytes(text)) == text and text_bytes(text) == text.encode("utf-8")


def test_text_member_refuses_what_utf8_cannot_hold():
    with pytest.raises(ValueError, match="Unicode"):
        text_bytes("\ud800")
    with pytest.raises(ValueError, match="UTF-8"):
        parse_text(b"\xff")


# ------------------------------------------------------------------------------------------------ SampleRule

FIELD_SETS = [
    ("image", "label"),
    ("image", "labels"),
    ("image", "labels", "target", "text"),
    ("image", "target"),
    ("image", "text"),
    ("image",),
]
MEMBER_VALUES = {
    "labels.json": [b"[0,2]", b"[]", b"[2,0]", b"[1,1]", b"[5]", b"[-1]", b"[true]", b"{}", b"x"],
    "target.json": [b"[1.5,2]", b"[1]", b"[]", b"[NaN,1]", b"[1e999,1]", b'["1",2]', b"[true,1]", b"nope"],
    "txt": [b"hi", b"", b"\xff", "\u540d".encode()],
}


def _ref_check(fields, members, label, jpeg, c, d):
    """``(error?, labels, target, text)`` by the docs: the declared fields' members must exist and follow their rule."""
    if jpeg is None:
        return True, None, None, None
    if "label" in fields and (label is None or (c is not None and not 0 <= label < c)):
        return True, None, None, None
    out = [False, None, None, None]
    for pos, (f, ext) in enumerate((("labels", "labels.json"), ("target", "target.json"), ("text", "txt")), 1):
        if f not in fields:
            continue
        if ext not in members:
            return True, None, None, None
        data = members[ext]
        try:
            if f == "labels":
                out[pos] = _ref_labels(data, c)
            elif f == "target":
                out[pos] = _ref_target(data, d)
            else:
                out[pos] = data.decode("utf-8")
        except (AssertionError, ValueError):
            return True, None, None, None
    return tuple(out)


@SET
@given(
    fields=st.sampled_from(FIELD_SETS),
    members=st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in MEMBER_VALUES.items()}),
    label=st.sampled_from([None, 0, 2, 7]),
    image=st.booleans(),
    c=st.sampled_from([None, 3]),
    d=st.sampled_from([None, 2]),
)
def test_sample_rule_matches_the_reference(fields, members, label, image, c, d):
    s = RawSample("k", 0, "u", 0, jpeg=b"jpg" if image else None, label=label, unparsed=dict(members))
    SampleRule(fields, c, d).check(s)
    err, labels, target, text = _ref_check(fields, members, label, s.jpeg, c, d)
    assert (s.error is not None) == err, (s.error, fields, members)
    if not err:
        assert (s.labels, s.target, s.text) == (labels, target, text)


# ------------------------------------------------------------------------------------------------ manifest


def _ref_fields_ok(fields, nc, nt):
    return (
        set(fields) <= {"image", "label", "labels", "target", "text"}
        and len(set(fields)) == len(fields)
        and "image" in fields
        and not ("label" in fields and "labels" in fields)
        and ("target" in fields) == (nt > 0)
        and (nc == 0 or "label" in fields or "labels" in fields)
    )


@SET
@given(
    fields=st.lists(st.sampled_from(["image", "label", "labels", "target", "text", "caption"]), max_size=5),
    nc=st.integers(0, 3),
    nt=st.integers(0, 2),
)
def test_manifest_v3_fields_round_trip_or_are_refused(fields, nc, nt):
    m = Manifest(
        "train",
        [f"c{i}" for i in range(nc)],
        [ShardInfo("train-000000.tar", 1, 10, "0" * 64)],
        fields=list(fields),
        targets=[f"t{i}" for i in range(nt)],
    )
    assert (fields_error(fields, nc, nt) is None) == _ref_fields_ok(fields, nc, nt)
    if not _ref_fields_ok(fields, nc, nt):
        with pytest.raises(ManifestError):
            Manifest.from_json(m.to_json())
        return
    back = Manifest.from_json(m.to_json())
    assert back.version == 3 and back.fields == list(fields) and back.targets == m.targets
    assert json.loads(m.to_json())["fields"] == list(fields)


@pytest.mark.parametrize("version", [1, 2])
def test_manifests_before_v3_read_as_image_and_label(version):
    d = {
        "format": "shardkit-manifest",
        "version": version,
        "split": "train",
        "classes": ["a"],
        "fields": ["image", "text"],
        "shards": [{"name": "train-000000.tar", "samples": 1, "bytes": 10, "sha256": "0" * 64}],
    }
    m = Manifest.from_json(json.dumps(d))
    assert (
        m.fields == ["image", "label"]
        and m.targets == []
        and SampleRule.of(m) == SampleRule(("image", "label"), 1, None)
    )


# ------------------------------------------------------------------------------------------------ writer and verify


def _jpeg(rgb=(200, 30, 30)) -> bytes:
    from PIL import Image

    return image_bytes(Image.new("RGB", (8, 6), rgb))


SAMPLES = [
    EncodedSample("k0", _jpeg(), None, {"path": "a"}, labels=(2, 0), target=(0.1, -2.0), text="a cat"),
    EncodedSample("k1", _jpeg(), None, {"path": "b"}, labels=(), target=(1e300, 5e-324), text="two\nlines \u540d"),
    EncodedSample("k2", _jpeg(), None, {"path": "c"}, labels=(1,), target=(-0.0, 3.0), text=" "),
]


def _dataset(folder: str, samples, fields, targets, classes) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train-000000.tar"), "wb") as f:
        w = write_tar(samples, f)
    counts = [sum(c in (s.labels or ()) for s in samples) for c in range(len(classes))]
    m = Manifest(
        "train",
        classes,
        [ShardInfo("train-000000.tar", w.samples, w.bytes, w.sha256)],
        class_counts=counts,
        fields=fields,
        targets=targets,
    )
    save_manifest(m, folder)
    return folder


def test_writer_members_read_back_with_tarfile_and_webdataset(tmp_path):
    import webdataset

    url = _dataset(str(tmp_path / "ds"), SAMPLES, ["image", "labels", "target", "text"], ["x", "y"], ["a", "b", "c"])
    tar = os.path.join(url, "train-000000.tar")
    with tarfile.open(tar) as tf:
        names = tf.getnames()
        assert names[:5] == ["k0.jpg", "k0.json", "k0.labels.json", "k0.target.json", "k0.txt"]  # fixed member order
        assert tf.extractfile("k0.labels.json").read() == b"[0,2]"
        assert tf.extractfile("k1.target.json").read() == b"[1e+300,5e-324]"
    got = {s["__key__"]: s for s in webdataset.WebDataset(tar, shardshuffle=False).decode()}
    for s in SAMPLES:
        g = got[s.key]
        assert g["labels.json"] == sorted(s.labels) and tuple(g["target.json"]) == s.target and g["txt"] == s.text
        assert "cls" not in g
    assert verify(url).ok and load_manifest(url).class_counts == [1, 1, 1]


def test_single_label_samples_are_written_as_before(tmp_path):
    s = EncodedSample("k", b"jpeg", 3, {"path": "p"})
    buf = io.BytesIO()
    write_tar([s], buf)
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tf:
        assert tf.getnames() == ["k.cls", "k.jpg", "k.json"]
    assert hashlib.sha256(buf.getvalue()).hexdigest() == write_tar([s], io.BytesIO()).sha256


def _replace_member(tar: str, name: str, data: bytes) -> None:
    """Rewrite ``tar`` with member ``name`` holding ``data`` (a damaged or hand-edited dataset)."""
    with tarfile.open(tar) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as tf:
        for m, d in members:
            d = data if m.name == name else d
            m.size = len(d)
            tf.addfile(m, io.BytesIO(d))


def _refresh(url: str) -> None:
    """Point the manifest at the shard's new size and checksum (so only the sample itself is wrong)."""
    m = load_manifest(url)
    tar = m.shard_url(0)
    data = open(tar, "rb").read()
    m.shards = [ShardInfo(m.shards[0].name, m.shards[0].samples, len(data), hashlib.sha256(data).hexdigest())]
    m.sample_index = ""
    save_manifest(m, url)


@pytest.mark.parametrize(
    "member, data, message",
    [
        ("k1.labels.json", b"[1,1]", "repeat"),
        ("k1.labels.json", b"[7]", "outside"),
        ("k1.labels.json", b"cat", "not JSON"),
        ("k0.target.json", b"[1]", "values"),
        ("k0.target.json", b"[NaN,1]", "non-finite"),
        ("k2.txt", b"\xff", "UTF-8"),
    ],
)
def test_verify_reports_a_bad_member_of_a_declared_field(tmp_path, member, data, message):
    url = _dataset(str(tmp_path / "ds"), SAMPLES, ["image", "labels", "target", "text"], ["x", "y"], ["a", "b", "c"])
    _replace_member(os.path.join(url, "train-000000.tar"), member, data)
    _refresh(url)
    report = verify(url)
    bad = [p for p in report.problems if p.key]
    assert len(bad) == 1 and bad[0].key == member.split(".")[0] and message in bad[0].message, report.problems


def test_verify_counts_labels_per_class_and_a_missing_member(tmp_path):
    url = _dataset(str(tmp_path / "ds"), SAMPLES, ["image", "labels", "target", "text"], ["x", "y"], ["a", "b", "c"])
    m = load_manifest(url)
    m.class_counts = [1, 2, 1]
    save_manifest(m, url)
    assert any("class counts" in p.message for p in verify(url).problems)
    url2 = _dataset(
        str(tmp_path / "ds2"),
        [EncodedSample("k", _jpeg(), None, {"path": "a"}, labels=(0,))],
        ["image", "labels", "text"],
        [],
        ["a"],
    )
    problems = [p.message for p in verify(url2).problems]
    assert problems[0] == "missing field 'txt'" and len(problems) == 2  # and the class counts then differ
