"""A Hugging Face dataset as SRC: label feature types, empty splits, one class space, per-split skips.

Datasets are built with ``datasets`` itself in memory; most checks are on the scanned :class:`ScannedSource`
(:func:`shardkit.convert.scan.hf.scan_hf`), the per-split skips also through a conversion read back with plain ``tarfile``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
from PIL import Image

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.errors import ConvertError

datasets = pytest.importorskip("datasets")
from shardkit.convert.scan.hf import scan_hf  # noqa: E402

IMG = EncodeConfig(short_side=16)


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (i * 40 % 256, 100, 200)).save(buf, "PNG")
    return buf.getvalue()


def _ds(labels: list, label_feature, images: list | None = None):
    images = images if images is not None else [_png(i) for i in range(len(labels))]
    feats = datasets.Features({"image": datasets.Image(), "label": label_feature})
    return datasets.Dataset.from_dict(
        {"image": [{"bytes": b, "path": None} if b else None for b in images], "label": labels}, features=feats
    )


def _table(source) -> dict[str, dict[str, object]]:
    """``{split: {row identity: class name or skip reason}}``."""
    out = {}
    for s in source.splits:
        got: dict[str, object] = {f.relpath: source.classes[f.label] for f in s.files}
        for p, r, _ in s.skipped:
            assert p not in got, f"{p} both a sample and skipped"
            got[p] = r.value
        out[s.name] = got
    return out


def _row(i: int) -> str:
    return f"row-{i:08d}"


@pytest.mark.parametrize(
    "feature, values",
    [
        (datasets.Value("float32"), [0.0, 1.5, 2.0]),
        (datasets.Value("float64"), [0.0, 1.0, 2.5]),
        (datasets.Value("bool"), [True, False, True]),
        (datasets.List(datasets.Value("int64")), [[0, 1], [], [1]]),
        (datasets.List(datasets.Value("string")), [["a"], ["b"], []]),
    ],
)
def test_label_column_of_floats_bools_or_lists_is_refused_in_one_line(feature, values):
    with pytest.raises(ConvertError) as e:
        scan_hf(_ds(values, feature), ScanConfig())
    msg = str(e.value)
    assert "\n" not in msg and "'label'" in msg and repr(feature) in msg and "not a class label" in msg


def test_empty_list_labels_are_no_label_and_odd_string_labels_bad_label():
    dd = datasets.DatasetDict(
        {
            "train": _ds([0, 1, 0], datasets.ClassLabel(names=["a", "b"])),
            "extra": _ds(
                [[], None, []], datasets.List(datasets.Value("int64"))
            ),  # only empty lists: no labels, not refused
            "other": _ds(["a", "[0, 1]", "2.5", "True", "[]", "", None, "b"], datasets.Value("string")),
        }
    )
    t = _table(scan_hf(dd, ScanConfig()))
    assert t["extra"] == {_row(i): "no_label" for i in range(3)}
    assert t["other"] == {
        _row(0): "a",
        _row(1): "bad_label",
        _row(2): "bad_label",
        _row(3): "bad_label",
        _row(4): "no_label",
        _row(5): "no_label",
        _row(6): "no_label",
        _row(7): "b",
    }


def test_a_split_whose_every_label_is_minus_one_is_returned_with_no_files_and_its_skips():
    dd = datasets.DatasetDict(
        {
            "train": _ds([0, 1, 1], datasets.ClassLabel(names=["x", "y"])),
            "test": _ds([-1, -1], datasets.ClassLabel(names=["x", "y"])),
        }
    )
    source = scan_hf(dd, ScanConfig())
    assert [s.name for s in source.splits] == ["test", "train"]
    test = source.splits[0]
    assert test.files == [] and [(p, r.value) for p, r, _ in test.skipped] == [
        (_row(0), "no_label"),
        (_row(1), "no_label"),
    ]
    assert _table(source)["train"] == {_row(0): "x", _row(1): "y", _row(2): "y"}
    # int labels: a split of missing labels likewise
    dd = datasets.DatasetDict(
        {"train": _ds([0, 1], datasets.Value("int64")), "test": _ds([None, None], datasets.Value("int64"))}
    )
    assert _table(scan_hf(dd, ScanConfig())) == {
        "train": {_row(0): "0", _row(1): "1"},
        "test": {_row(0): "no_label", _row(1): "no_label"},
    }
    # no split with any file: one line
    with pytest.raises(ConvertError, match="no split has a sample to convert") as e:
        scan_hf(datasets.DatasetDict({"test": _ds([-1, -1], datasets.ClassLabel(names=["x"]))}), ScanConfig())
    assert "\n" not in str(e.value)


def test_classlabel_and_string_splits_share_one_class_space():
    """The same class name gets the same index in every split; names only in the string split come after the ClassLabel's."""
    dd = datasets.DatasetDict(
        {
            "train": _ds([0, 1, 2], datasets.ClassLabel(names=["zebra", "ant", "moth"])),
            "validation": _ds(["ant", "zebra", "bee", None], datasets.Value("string")),
        }
    )
    source = scan_hf(dd, ScanConfig())
    assert source.classes == ["zebra", "ant", "moth", "bee"]
    assert _table(source) == {
        "train": {_row(0): "zebra", _row(1): "ant", _row(2): "moth"},
        "validation": {_row(0): "ant", _row(1): "zebra", _row(2): "bee", _row(3): "no_label"},
    }


@pytest.mark.parametrize(
    "other, names",
    [
        (datasets.Value("int64"), None),
        (datasets.ClassLabel(names=["b", "a"]), None),
        (datasets.Value("string"), ["0", "1"]),  # digit strings next to a ClassLabel: indices or names? refused
    ],
)
def test_classlabel_split_with_an_incompatible_split_is_refused_naming_both(other, names):
    values = names or ([0, 1] if not isinstance(other, datasets.ClassLabel) else [0, 1])
    dd = datasets.DatasetDict({"train": _ds([0, 1], datasets.ClassLabel(names=["a", "b"])), "test": _ds(values, other)})
    with pytest.raises(ConvertError) as e:
        scan_hf(dd, ScanConfig())
    msg = str(e.value)
    assert "\n" not in msg and "'train'" in msg and "'test'" in msg


def _split_skips(url: str) -> dict[str, str]:
    with open(os.path.join(url, "manifest.json")) as f:
        return {s["path"]: s["reason"] for s in json.load(f)["skipped"]}


def _split_keys(url: str) -> set[str]:
    with open(os.path.join(url, "manifest.json")) as f:
        shards = [s["name"] for s in json.load(f)["shards"]]
    paths = set()
    for name in shards:
        with tarfile.open(os.path.join(url, name)) as tf:
            for m in tf.getmembers():
                if m.name.endswith(".json"):
                    paths.add(json.loads(tf.extractfile(m).read())["path"])
    return paths


def test_each_split_of_a_datasetdict_keeps_its_own_skips(tmp_path):
    cl = datasets.ClassLabel(names=["a", "b"])
    dd = datasets.DatasetDict(
        {
            "train": _ds([0, -1, 1, 0, None], cl, images=[_png(0), _png(1), None, b"not an image", _png(4)]),
            "validation": _ds([1, 0, -1], cl, images=[_png(5), None, _png(7)]),
        }
    )
    r = convert(dd, str(tmp_path / "out"), ConvertConfig(image=IMG, shard_size=2), workers=1, quiet=True)
    urls = {s.split: s.url for s in r.splits}
    assert _split_skips(urls["train"]) == {
        _row(1): "no_label",
        _row(2): "missing_file",
        _row(3): "not_an_image",
        _row(4): "no_label",
    }
    assert _split_skips(urls["validation"]) == {_row(1): "missing_file", _row(2): "no_label"}
    assert {s.split: s.skipped for s in r.splits} == {"train": 4, "validation": 2}
    assert _split_keys(urls["train"]) == {_row(0)} and _split_keys(urls["validation"]) == {_row(0)}
