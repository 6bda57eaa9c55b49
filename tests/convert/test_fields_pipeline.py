"""The conversion pipeline with fields beside the label: tasks, overflow shards and merge keep every
field byte for byte; resume, val carving, the CLI flags, ``info`` and the one-line refusals."""

from __future__ import annotations

import csv
import glob
import json
import os

import pytest

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert, merge
from shardkit.errors import ConvertError
from shardkit.ops.verify import verify
from tests.support.data import tree_digests
from tests.support.source_reference import read_fields_split, reference_fields_listing, write_image

IMG = EncodeConfig(short_side=8)
ROWS = [
    ["f0.jpg", "cat;dog", "1", "0.5", "a cat and a dog"],
    ["f1.jpg", "", "2", "-1e-3", "nothing"],
    ["f2.jpg", "dog; dog ;", "3", "2", 'say "hi", twice'],
    ["f3.jpg", "emu", "nan", "1", "skipped: bad target"],
    ["f4.jpg", "cat", "4", "5", ""],
    ["f5.jpg", "emu;cat", "5.25", "6", "\u540d \u00fc\nsecond line " + "\u540d" * 10000],  # 30 kB: overflows its shard
    ["f6.jpg", "bird", "6", "x", "skipped too"],
    ["f7.jpg", "dog", "7", "8", "last"],
]
SCAN = ScanConfig(label_col="tags", label_sep=";", target_cols=("a", "b"), text_col="caption")


@pytest.fixture
def listing(tmp_path) -> str:
    for i in range(len(ROWS)):
        write_image(str(tmp_path / "src" / f"f{i}.jpg"), i, size=(40, 30))
    path = str(tmp_path / "src" / "list.csv")
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["path", "tags", "a", "b", "caption"])
        w.writerows(ROWS)
    return path


def _expected(listing: str):
    with open(listing, encoding="utf-8") as f:
        return reference_fields_listing("csv", f.read(), "tags", ";", ["a", "b"], "caption")


def _check(split_url: str, listing: str) -> None:
    exp = _expected(listing)
    got = read_fields_split(split_url)
    assert got.manifest["fields"] == ["image", "labels", "target", "text"] and got.manifest["targets"] == ["a", "b"]
    assert got.manifest["classes"] == exp.classes == ["cat", "dog", "emu"]
    assert {p: (s["labels"], s["target"], s["text"]) for p, s in got.samples.items()} == exp.samples
    assert {s["path"]: s["reason"] for s in got.manifest["skipped"]} == exp.skipped
    assert got.manifest["class_counts"] == [2, 3, 1]  # f0, f5 | f0, f2, f7 | f5
    assert verify(split_url).ok


def test_tasks_overflow_and_merge_keep_every_field_byte_for_byte(tmp_path, listing):
    cap = ConvertConfig(image=IMG, source=SCAN, shuffle=False, shard_size=2, shard_bytes=40_000)
    one = convert(listing, str(tmp_path / "one"), cap, workers=1, quiet=True)
    _check(one.splits[0].url, listing)
    assert glob.glob(os.path.join(one.splits[0].url, "_shardkit", "*.overflow"))  # the long caption overflows its shard
    for task in range(3):
        convert(listing, str(tmp_path / "many"), cap, workers=1, num_tasks=3, task_index=task, quiet=True)
    (m,) = merge(str(tmp_path / "many"))
    assert m.fields == ["image", "labels", "target", "text"]
    a, b = tree_digests(str(tmp_path / "one")), tree_digests(str(tmp_path / "many"))
    assert {k: v for k, v in a.items() if k.endswith(".tar")} == {k: v for k, v in b.items() if k.endswith(".tar")}
    _check(m.base_url, listing)


def test_merge_refuses_a_task_that_stored_other_fields(tmp_path, listing):
    for task in range(2):
        convert(
            listing,
            str(tmp_path / "d"),
            ConvertConfig(image=IMG, source=SCAN, shard_size=2),
            workers=1,
            num_tasks=2,
            task_index=task,
            quiet=True,
        )
    record = sorted(glob.glob(str(tmp_path / "d" / "train" / "_shardkit" / "train-*.json")))[1]
    with open(record) as f:
        d = json.load(f)
    d["fields"] = ["image", "labels", "target"]
    with open(record, "w") as f:
        json.dump(d, f)
    with pytest.raises(ConvertError, match="stores fields") as info:
        merge(str(tmp_path / "d"))
    assert "\n" not in str(info.value)


def test_resume_keeps_finished_shards_and_other_fields_are_another_conversion(tmp_path, listing):
    dest = str(tmp_path / "d")
    convert(listing, dest, ConvertConfig(image=IMG, source=SCAN, shard_size=2), workers=1, quiet=True)
    again = convert(listing, dest, ConvertConfig(image=IMG, source=SCAN, shard_size=2), workers=1, quiet=True)
    assert again.splits[0].shards_resumed == again.splits[0].manifest.shards.__len__() and again.converted == 0
    other = ScanConfig(label_col="tags", label_sep=";", target_cols=("a", "b"))
    with pytest.raises(ConvertError, match="already holds a different conversion") as info:
        convert(listing, dest, ConvertConfig(image=IMG, source=other, shard_size=2), workers=1, quiet=True)
    assert "text" in str(info.value)


def test_val_carving_keeps_the_fields(tmp_path, listing):
    r = convert(
        listing, str(tmp_path / "d"), ConvertConfig(image=IMG, source=SCAN, val_fraction=0.5), workers=1, quiet=True
    )
    exp = _expected(listing)
    seen = {}
    for s in r.splits:
        got = read_fields_split(s.url)
        assert got.manifest["fields"] == ["image", "labels", "target", "text"]
        seen.update({p: (g["labels"], g["target"], g["text"]) for p, g in got.samples.items()})
    assert seen == exp.samples and sorted(s.split for s in r.splits) == ["train", "val"]


def test_cli_flags_and_info_print_the_fields(tmp_path, listing, capsys):
    dest = str(tmp_path / "d")
    rc = main(
        [
            "convert",
            listing,
            dest,
            "--label-col",
            "tags",
            "--label-sep",
            ";",
            "--target-col",
            "a,b",
            "--text-col",
            "caption",
            "--quiet",
            "--workers",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "fields: image, labels, target, text" in out and "3 bad_target" not in out
    _check(os.path.join(dest, "train"), listing)
    assert main(["info", dest]) == 0
    assert "fields: image, labels, target, text (targets: a, b)" in capsys.readouterr().out
    assert main(["info", dest, "--json"]) == 0
    (d,) = json.loads(capsys.readouterr().out)
    assert d["fields"] == ["image", "labels", "target", "text"] and d["targets"] == ["a", "b"]


def test_a_single_label_conversion_writes_manifest_v3_with_image_and_label(tmp_path, listing):
    r = convert(
        listing,
        str(tmp_path / "d"),
        ConvertConfig(image=IMG, source=ScanConfig(label_col="caption")),
        workers=1,
        quiet=True,
    )
    m = r.splits[0].manifest
    assert m.version == 3 and m.fields == ["image", "label"] and m.targets == []
    got = read_fields_split(r.splits[0].url)
    assert all(
        s["members"] == {"cls", "jpg", "json"} and s["meta"]["class"] == s["label"] for s in got.samples.values()
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text-key", "txt"], "--text-key does not apply"),
        (["--label-col", "tags", "--target-col", "a,zz"], "no column 'zz' (--target-col)"),
        (["--label-col", "tags", "--text-col", "nope"], "no column 'nope' (--text-col)"),
        (["--label-sep", ";", "--no-label"], "exclude each other"),
        (["--label-col", "a", "--target-col", "a"], "different columns"),
        (["--label-sep", ""], "--label-sep must not be empty"),
    ],
)
def test_dataset_level_mistakes_are_one_line(tmp_path, listing, capsys, argv, message):
    rc = main(["convert", listing, str(tmp_path / "d"), "--quiet", "--workers", "1", *argv])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1, err


def test_hugging_face_refusals_are_one_line(tmp_path):
    import datasets

    from tests.support.data import hf_fields_dataset

    ds = hf_fields_dataset([(0, [0], 1.0, 1, "x")])
    for scan, message in [
        (ScanConfig(label_col="tags", label_sep=";"), "--label-sep does not apply"),
        (ScanConfig(label_col="tags", target_cols=("caption",)), "not a number"),
        (ScanConfig(label_col="tags", text_col="z"), "not a string"),
    ]:
        with pytest.raises(ConvertError, match=message) as info:
            convert(ds, str(tmp_path / "d"), ConvertConfig(image=IMG, source=scan), workers=1, quiet=True)
        assert "\n" not in str(info.value)
    single = (
        ds.cast_column("tags", datasets.Sequence(datasets.Value("int64")))
        .map(lambda r: {"t": r["tags"][0]})
        .cast_column("t", datasets.ClassLabel(names=["a", "b", "c"]))
    )
    dd = datasets.DatasetDict({"train": ds, "test": single.rename_column("tags", "old").rename_column("t", "tags")})
    with pytest.raises(ConvertError, match="multi-label") as info:
        convert(
            dd,
            str(tmp_path / "e"),
            ConvertConfig(image=IMG, source=ScanConfig(label_col="tags")),
            workers=1,
            quiet=True,
        )
    assert "\n" not in str(info.value)
