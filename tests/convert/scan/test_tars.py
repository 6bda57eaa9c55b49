"""Existing WebDataset tars as SRC: the one member rule, the label rule, shardkit's own shards.

Each test builds its tars in tmp_path and checks the scanned :class:`ScannedSource` (which sample holds which image
bytes and which class name, what is skipped and why) or the converted shards read back with plain ``tarfile``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.convert.scan.tars import scan_tars
from shardkit.demo.sampledata import make_imagefolder
from shardkit.errors import ConvertError
from tests.support.data import write_tar_file as _tar

IMG = EncodeConfig(short_side=16)


def _solid(rgb: tuple[int, int, int], fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (12, 10), rgb).save(buf, fmt)
    return buf.getvalue()


RED, BLUE, GREEN = _solid((250, 0, 0)), _solid((0, 0, 250)), _solid((0, 250, 0))


def _scan(path: str, **kw):
    """``({identity: (class name, image bytes)}, {identity: reason}, classes)`` of the tars at ``path``."""
    src = scan_tars(path, ScanConfig(**kw))
    (split,) = src.splits
    files = {}
    for f in split.files:
        offset, size, url = f.ref[len("tar:") :].split(":", 2)
        with open(url, "rb") as fh:
            fh.seek(int(offset))
            files[f.relpath] = (src.classes[f.label], fh.read(int(size)))
    return files, {p: r.value for p, r, _ in split.skipped}, src.classes


def test_adjacent_repeated_field_starts_a_new_sample_and_is_accounted(tmp_path):
    """x.jpg(red) x.cls(0) x.jpg(blue): the red image with label 0; the blue one skipped as duplicate_path, never labelled 0."""
    path = _tar(
        str(tmp_path / "t.tar"), [("x.jpg", RED), ("x.cls", b"0"), ("x.jpg", BLUE), ("y.jpg", GREEN), ("y.cls", b"1")]
    )
    files, skipped, classes = _scan(path)
    assert files == {"t.tar/x": ("0", RED), "t.tar/y": ("1", GREEN)}
    assert skipped == {"t.tar/x (again)": "duplicate_path"}
    # a repeated label member starts a new sample too: the second x has no image and is accounted
    path = _tar(
        str(tmp_path / "u.tar"), [("x.cls", b"0"), ("x.jpg", RED), ("x.cls", b"1"), ("x.jpg", BLUE), ("x.jpg", GREEN)]
    )
    files, skipped, _ = _scan(path)
    assert files == {"u.tar/x": ("0", RED)}
    assert skipped == {"u.tar/x (again)": "duplicate_path", "u.tar/x (again 2)": "duplicate_path"}


def test_non_adjacent_repeat_and_case_repeat_are_accounted(tmp_path):
    path = _tar(
        str(tmp_path / "t.tar"),
        [
            ("a.jpg", RED),
            ("a.cls", b"0"),
            ("b.jpg", GREEN),
            ("b.cls", b"1"),
            ("a.jpg", BLUE),
            ("a.cls", b"1"),
            ("c.JPG", GREEN),
            ("c.jpg", RED),
            ("c.cls", b"1"),
        ],
    )
    files, skipped, _ = _scan(path)
    assert files == {"t.tar/a": ("0", RED), "t.tar/b": ("1", GREEN)}
    # c.JPG and c.jpg are the same field (extensions compare case-insensitively): the second starts a new sample
    assert skipped == {"t.tar/a (again)": "duplicate_path", "t.tar/c": "no_label", "t.tar/c (again)": "duplicate_path"}


def test_members_outside_the_member_rule(tmp_path):
    """No dot / ``__`` names belong to no sample (ignored, counted in a note); an unsafe name makes its sample bad_name."""
    path = _tar(
        str(tmp_path / "t.tar"),
        [
            ("README", b"hi"),
            ("__key__.txt", b"k"),
            ("a.jpg", RED),
            ("a.cls", b"0"),
            ("../evil.jpg", BLUE),
            ("../evil.cls", b"0"),
        ],
    )
    src = scan_tars(path, ScanConfig())
    assert [f.relpath for f in src.splits[0].files] == ["t.tar/a"]
    assert [(p, r.value) for p, r, _ in src.splits[0].skipped] == [("t.tar/../evil", "bad_name")]
    assert any("2 tar members belong to no sample" in n for n in src.notes)


@pytest.mark.parametrize("value", [b"[0,1]", b"2.5", b"true", b"False", b"1e3", b"NaN", b'{"a": 1}', b"-1"])
def test_cls_holding_a_list_float_or_bool_is_bad_label(tmp_path, value):
    path = _tar(
        str(tmp_path / "t.tar"),
        [("a.jpg", RED), ("a.cls", b"0"), ("b.jpg", BLUE), ("b.cls", value), ("c.jpg", GREEN), ("c.cls", b"[]")],
    )
    files, skipped, classes = _scan(path)
    assert files == {"t.tar/a": ("0", RED)} and classes == ["0"]
    assert skipped == {"t.tar/b": "bad_label", "t.tar/c": "no_label"}


def test_minus_one_among_class_names_is_one_bad_label_not_a_mix_of_names_and_indices(tmp_path):
    path = _tar(str(tmp_path / "t.tar"), [("a.jpg", RED), ("a.cls", b"cat"), ("b.jpg", BLUE), ("b.cls", b"-1")])
    files, skipped, classes = _scan(path)
    assert files == {"t.tar/a": ("cat", RED)} and classes == ["cat"] and skipped == {"t.tar/b": "bad_label"}


@pytest.mark.parametrize("value", [[0, 1], 2.5, True, False, {"a": 1}, "2.5", "true"])
def test_label_json_field_holding_a_list_float_or_bool_is_bad_label(tmp_path, value):
    path = _tar(
        str(tmp_path / "t.tar"),
        [
            ("a.jpg", RED),
            ("a.json", b'{"animal": "dog"}'),
            ("b.jpg", BLUE),
            ("b.json", json.dumps({"animal": value}).encode()),
            ("c.jpg", GREEN),
            ("c.json", b'{"animal": []}'),
        ],
    )
    files, skipped, classes = _scan(path, label_json_field="animal")
    assert files == {"t.tar/a": ("dog", RED)} and classes == ["dog"]
    assert skipped == {"t.tar/b": "bad_label", "t.tar/c": "no_label"}


def test_label_json_field_may_be_a_reserved_field(tmp_path):
    """--label-json-field class reads the "class" field (reserved fields are dropped only from the kept metadata)."""
    path = _tar(
        str(tmp_path / "t.tar"),
        [
            ("a.jpg", RED),
            ("a.json", b'{"class": "dog", "path": "p", "k": 1}'),
            ("b.jpg", BLUE),
            ("b.json", b'{"class": "cat"}'),
        ],
    )
    src = scan_tars(path, ScanConfig(label_json_field="class"))
    assert src.classes == ["cat", "dog"]
    assert {f.relpath: (src.classes[f.label], f.meta) for f in src.splits[0].files} == {
        "t.tar/a": ("dog", {"k": 1}),
        "t.tar/b": ("cat", None),
    }


def _read_split(url: str) -> dict[str, tuple[str, int, dict, bytes]]:
    """``{key: (class name from manifest, .cls, .json, .jpg)}`` of a converted split, read with plain tarfile."""
    with open(os.path.join(url, "manifest.json")) as f:
        m = json.load(f)
    out = {}
    for s in m["shards"]:
        with tarfile.open(os.path.join(url, s["name"])) as tf:
            got: dict[str, dict[str, bytes]] = {}
            for mem in tf.getmembers():
                key, ext = mem.name.split(".", 1)
                got.setdefault(key, {})[ext] = tf.extractfile(mem).read()
        for key, g in got.items():
            out[f"{s['name']}/{key}"] = (m["classes"][int(g["cls"])], int(g["cls"]), json.loads(g["json"]), g["jpg"])
    return out


def _mean(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), dtype=np.float64).mean(axis=(0, 1))


@pytest.mark.parametrize("copy", [True, False])
def test_reconverting_shardkit_shards_keeps_class_names_order_labels_and_pixels(tmp_path, copy):
    """convert -> convert(its tars) -> the same classes in the same order, the same labels, the same pixels (--copy: bytes)."""
    src = make_imagefolder(str(tmp_path / "src"), num_classes=3, per_class=3, seed=4)
    os.rename(
        os.path.join(src, sorted(os.listdir(src))[0]), os.path.join(src, "zz_last")
    )  # class order != any sort of indices
    first = convert(src, str(tmp_path / "a"), ConvertConfig(image=IMG, shard_size=4), workers=1, quiet=True)
    (a,) = [s.url for s in first.splits]
    shards = sorted(f for f in os.listdir(a) if f.endswith(".tar"))
    pattern = os.path.join(a, f"train-{{000000..{len(shards) - 1:06d}}}.tar") if shards[0].startswith("train") else None
    pattern = pattern or os.path.join(a, "{" + ",".join(shards) + "}")
    opts = ConvertConfig(image=EncodeConfig(short_side=16, copy=copy), shard_size=5)
    second = convert(pattern, str(tmp_path / "b"), opts, workers=1, quiet=True)
    (b,) = [s.url for s in second.splits]
    before, after = _read_split(a), _read_split(b)
    with open(os.path.join(a, "manifest.json")) as f1, open(os.path.join(b, "manifest.json")) as f2:
        assert json.load(f1)["classes"] == json.load(f2)["classes"]
    by_origin = {v[2]["path"]: v for v in after.values()}
    assert sorted(by_origin) == sorted(before)
    for ident, (name, idx, _meta, jpg) in before.items():
        name2, idx2, meta2, jpg2 = by_origin[ident]
        assert (name2, idx2, meta2["class"]) == (name, idx, name)
        if copy:
            assert jpg2 == jpg
        else:
            assert np.abs(_mean(jpg2) - _mean(jpg)).max() < 8
    # without the manifest, the .json "class" names (ordered by their .cls index) still give the classes
    os.remove(os.path.join(a, "manifest.json"))
    third = convert(pattern, str(tmp_path / "c"), opts, workers=1, quiet=True)
    (c,) = [s.url for s in third.splits]
    with open(os.path.join(b, "manifest.json")) as f1, open(os.path.join(c, "manifest.json")) as f2:
        assert json.load(f1)["classes"] == json.load(f2)["classes"]
    assert {k: v[:2] for k, v in _read_split(c).items()} == {k: v[:2] for k, v in after.items()}


def test_class_field_names_keep_their_cls_order_without_a_manifest(tmp_path):
    """Shards of a ClassLabel dataset (classes not sorted): the .json "class" names ordered by .cls, not by name."""
    path = _tar(
        str(tmp_path / "t.tar"),
        [
            ("000000.jpg", RED),
            ("000000.cls", b"1"),
            ("000000.json", b'{"class": "ant"}'),
            ("000001.jpg", BLUE),
            ("000001.cls", b"0"),
            ("000001.json", b'{"class": "zebra"}'),
            ("000002.jpg", GREEN),
            ("000002.cls", b"2"),
            ("000002.json", b'{"class": "moth"}'),
        ],
    )
    src = scan_tars(path, ScanConfig())
    assert src.classes == ["zebra", "ant", "moth"]
    assert {f.relpath: f.label for f in src.splits[0].files} == {
        "t.tar/000000": 1,
        "t.tar/000001": 0,
        "t.tar/000002": 2,
    }
    # a "class" field that does not match .cls one to one is not used: .cls read as today
    path = _tar(
        str(tmp_path / "u.tar"),
        [
            ("a.jpg", RED),
            ("a.cls", b"0"),
            ("a.json", b'{"class": "ant"}'),
            ("b.jpg", BLUE),
            ("b.cls", b"0"),
            ("b.json", b'{"class": "zebra"}'),
        ],
    )
    assert scan_tars(path, ScanConfig()).classes == ["0"]


def test_shardkit_manifest_with_an_index_beyond_its_classes_is_bad_label(tmp_path):
    from shardkit.format.manifest import Manifest, ShardInfo, save_manifest

    d = tmp_path / "ds"
    d.mkdir()
    path = _tar(
        str(d / "train-000000.tar"),
        [
            ("000000.jpg", RED),
            ("000000.cls", b"1"),
            ("000000.json", b'{"class": "b"}'),
            ("000001.jpg", BLUE),
            ("000001.cls", b"2"),
            ("000001.json", b'{"class": "c"}'),
        ],
    )
    save_manifest(
        Manifest("train", ["a", "b"], [ShardInfo("train-000000.tar", 2, os.path.getsize(path), "0" * 64)]), str(d)
    )
    files, skipped, classes = _scan(path)
    assert classes == ["a", "b"] and files == {"train-000000.tar/000000": ("b", RED)}
    assert skipped == {"train-000000.tar/000001": "bad_label"}


def test_no_usable_sample_is_one_line_error(tmp_path):
    path = _tar(str(tmp_path / "t.tar"), [("a.jpg", RED), ("a.cls", b"2.5")])
    with pytest.raises(ConvertError, match="no sample with both an image") as e:
        scan_tars(path, ScanConfig())
    assert "\n" not in str(e.value)
