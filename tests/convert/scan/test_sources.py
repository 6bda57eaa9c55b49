"""Sources other than class folders: CSV/TSV/JSONL listings, --label-regex, --val-fraction.

Each round trip: every row or file accounted (a sample, or skipped with its reason), labels right, keys unique,
the same bytes whatever workers and tasks.
"""

from __future__ import annotations

import csv
import json
import os
import shutil

import pytest
from PIL import Image

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert, merge
from shardkit.demo.sampledata import make_image, make_imagefolder
from shardkit.errors import ConvertError
from shardkit.format.manifest import load_manifest
from tests.support.data import image_bytes, split_samples, tree_digests
from tests.support.data import write_tar_file as _tar
from tests.support.probes import convert_killed_mid_run, convert_to_the_end

IMG = EncodeConfig(short_side=16)


def _shards(dest: str) -> dict[str, str]:
    return {k: v for k, v in tree_digests(dest).items() if k.endswith(".tar")}


def _write_csv(path: str, header: list[str], rows: list[list], delimiter: str = ",") -> str:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["convert", *argv, "--quiet", *([] if "--workers" in argv else ["--workers", "1"])])
    out, err = capsys.readouterr()
    return rc, out, err


def test_imagefolder_and_equivalent_csv_convert_to_identicalsplit_samples(tmp_path):
    src = make_imagefolder(str(tmp_path / "src"), num_classes=3, per_class=4, seed=2)
    rows = [[f"{c}/{f}", c] for c in sorted(os.listdir(src)) for f in sorted(os.listdir(os.path.join(src, c)))]
    listing = _write_csv(str(tmp_path / "train.csv"), ["path", "label"], rows)
    opts = ConvertConfig(image=IMG, shard_size=5, seed=1)
    convert(src, str(tmp_path / "a"), opts, workers=1, quiet=True)
    r = convert(
        listing,
        str(tmp_path / "b"),
        ConvertConfig(image=IMG, shard_size=5, seed=1, source=ScanConfig(root=src)),
        workers=1,
        quiet=True,
    )
    assert r.notes == ["labels read as class names (--label-type name): 3 classes"]
    assert split_samples(str(tmp_path / "a" / "train")) == split_samples(str(tmp_path / "b" / "train"))
    assert _shards(str(tmp_path / "a" / "train")) == _shards(str(tmp_path / "b" / "train"))  # even the shard bytes
    assert load_manifest(str(tmp_path / "a" / "train")).classes == load_manifest(str(tmp_path / "b" / "train")).classes


def _odd_listing_data(tmp_path) -> tuple[str, list[list], dict[str, str]]:
    """Images for a listing with odd rows; returns (root, rows [path, label, split, photographer], {path: skip reason})."""
    root = str(tmp_path / "imgs")
    os.makedirs(os.path.join(root, "sub"))
    for i in range(8):
        Image.fromarray(make_image(i % 2, i, (30, 24))).save(os.path.join(root, f"{i}.jpg"), quality=90)
    Image.fromarray(make_image(1, 9, (30, 24))).convert("CMYK").save(os.path.join(root, "sub", "cmyk.jpg"), quality=90)
    Image.fromarray(make_image(0, 10, (30, 24))).save(os.path.join(root, "sub", "名前 ü.png"))
    with open(os.path.join(root, "broken.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    absolute = os.path.join(str(tmp_path), "elsewhere.jpg")
    Image.fromarray(make_image(1, 11, (30, 24))).save(absolute, quality=90)
    rows = [[f"{i}.jpg", ["cat", "dog"][i % 2], "train" if i < 6 else "val", f"p{i}"] for i in range(8)]
    rows += [
        ["sub/cmyk.jpg", "dog", "train", "q"],
        ["sub/名前 ü.png", "cat", "val", ""],
        [absolute, "dog", "train", "abs"],
        ["missing.jpg", "cat", "train", "x"],
        ["3.jpg", "dog", "train", "again"],  # listed twice
        ["./sub/../0.jpg", "cat", "train", "again, other spelling"],
        ["7.jpg", "", "val", ""],  # hmm: 7.jpg already listed: duplicate wins over no label
        ["nolabel.jpg", "", "train", ""],
        ["", "cat", "train", "no path"],
        ["broken.jpg", "cat", "train", ""],
    ]
    # line numbers of rows 12, 13, 14, 16 are filled in per listing kind (a CSV has a header line)
    skips = {
        "missing.jpg": "missing_file",
        "3.jpg (list:{12})": "duplicate_path",
        "0.jpg (list:{13})": "duplicate_path",
        "7.jpg (list:{14})": "duplicate_path",
        "nolabel.jpg": "no_label",
        "list:{16}": "missing_file",
        "broken.jpg": "not_an_image",
    }
    return root, rows, skips


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl"])
def test_listing_with_odd_rows_every_row_accounted(tmp_path, kind):
    root, rows, skips = _odd_listing_data(tmp_path)
    header = ["path", "label", "part", "photographer"]
    listing = str(tmp_path / f"list.{kind}")
    if kind == "jsonl":
        with open(listing, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(dict(zip(header, r)), ensure_ascii=False) + "\n")
    else:
        _write_csv(listing, header, rows, "\t" if kind == "tsv" else ",")
    first = 1 if kind == "jsonl" else 2
    skips = {k.replace("list:", f"list.{kind}:").format(*range(first, first + len(rows))): v for k, v in skips.items()}
    opts = ConvertConfig(image=IMG, shard_size=3, seed=4, source=ScanConfig(split_col="part", root=root))
    dest = str(tmp_path / "out")
    r = convert(listing, dest, opts, workers=1, quiet=True)
    assert r.complete and sorted(s.split for s in r.splits) == ["train", "val"]
    samples = {s: split_samples(os.path.join(dest, s)) for s in ("train", "val")}
    got = {
        g["json"]["path"]: (s, g["json"]["class"], g["json"]["photographer"])
        for s in samples
        for g in samples[s].values()
    }
    expected = {}
    for p, label, part, who in rows:
        rel = os.path.normpath(p) if p and not p.startswith("/") else p
        if p and label and rel not in expected and rel not in skips and p not in skips:
            expected[rel] = (part, label, who)
    assert got == expected
    skipped = {s.path: s.reason for split in ("train", "val") for s in load_manifest(os.path.join(dest, split)).skipped}
    assert skipped == skips
    assert len(got) + len(skipped) == len(rows)  # every row accounted
    strict = ConvertConfig(image=IMG, shard_size=3, seed=4, source=opts.source, strict=True)
    with pytest.raises(ConvertError, match=r"--strict"):
        convert(listing, str(tmp_path / "strict"), strict, workers=1, quiet=True)
    for s in samples.values():
        for _key, g in s.items():
            assert g["cls"] == ["cat", "dog"].index(g["json"]["class"])
    # the same bytes with two workers, and with two tasks + merge
    r2 = convert(listing, str(tmp_path / "w2"), opts, workers=2, quiet=True)
    assert r2.complete and tree_digests(dest) == tree_digests(str(tmp_path / "w2"))
    for i in (1, 0):
        convert(listing, str(tmp_path / "t2"), opts, workers=1, quiet=True, num_tasks=2, task_index=i)
    merge(str(tmp_path / "t2"))
    assert tree_digests(dest) == tree_digests(str(tmp_path / "t2"))


def test_listing_index_labels_and_bad_labels(tmp_path, capsys):
    root = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=3)
    files = [f"{c}/{f}" for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c)))]
    listing = _write_csv(str(tmp_path / "l.csv"), ["file", "y"], [[f, i % 3] for i, f in enumerate(files)])
    dest = str(tmp_path / "out")
    rc, out, err = _cli(
        capsys, listing, dest, "--path-col", "file", "--label-col", "y", "--root", root, "--shard-size", "4"
    )
    assert rc == 0, err
    assert "labels read as class indices (--label-type index): 3 classes" in out
    m = load_manifest(os.path.join(dest, "train"))
    assert m.classes == ["0", "1", "2"] and m.class_counts == [2, 2, 2]
    assert all(
        g["cls"] == files.index(g["json"]["path"]) % 3 for g in split_samples(os.path.join(dest, "train")).values()
    )
    # mixed names and indices: refused in one line, naming both
    mixed = _write_csv(str(tmp_path / "mixed.csv"), ["path", "label"], [[files[0], "3"], [files[1], "cat"]])
    rc, _, err = _cli(capsys, mixed, str(tmp_path / "m"), "--root", root)
    assert rc == 2 and "mixed labels: 'cat' (line 3) is a class name and '3' (line 2) a class index" in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = _cli(capsys, mixed, str(tmp_path / "m"), "--root", root, "--label-type", "index")
    assert rc == 0, err
    assert [(s.path, s.reason) for s in load_manifest(str(tmp_path / "m" / "train")).skipped] == [
        (files[1], "bad_label")
    ]
    rc, _, err = _cli(capsys, mixed, str(tmp_path / "n"), "--root", root, "--label-type", "name")
    assert rc == 0 and load_manifest(str(tmp_path / "n" / "train")).classes == ["3", "cat"]


def test_bad_listings_are_one_line_errors(tmp_path, capsys):
    listing = _write_csv(str(tmp_path / "l.csv"), ["filename", "category", "width"], [["a.jpg", "x", 3]])
    rc, _, err = _cli(capsys, listing, str(tmp_path / "o"))
    assert rc == 2 and "no column 'path' (--path-col); its columns are: filename, category, width" in err
    rc, _, err = _cli(capsys, listing, str(tmp_path / "o"), "--path-col", "filename", "--label-col", "category")
    assert rc == 2 and "column 'width' would overwrite" in err
    rc, _, err = _cli(
        capsys, listing, str(tmp_path / "o"), "--path-col", "filename", "--label-col", "category", "--split-col", "s"
    )
    assert rc == 2 and "no column 's' (--split-col)" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"path": "a.jpg", "label": "x"}\n{oops\n')
    rc, _, err = _cli(capsys, str(bad), str(tmp_path / "o"))
    assert rc == 2 and "line 2 is not valid JSON" in err
    bad.write_text('{"path": "a.jpg", "label": "x", "deep": ' + "[" * 100000 + "]" * 100000 + "}\n")
    rc, _, err = _cli(capsys, str(bad), str(tmp_path / "o"))
    assert rc == 2 and "line 1 is not valid JSON (RecursionError" in err
    bad.write_text('{"path": "a.jpg", "label": ["x"]}\n{"path": "b.jpg", "label": ""}\n')
    rc, _, err = _cli(capsys, str(bad), str(tmp_path / "o"))
    assert rc == 2 and "no row with a usable path and label (e.g. line 1: ['x'] is not a class name or index)" in err
    for opt in (["--label-regex", "(a)"], ["--image-key", "png"], ["--layout", "splits"]):
        rc, _, err = _cli(capsys, listing, str(tmp_path / "o"), *opt)
        assert rc == 2 and f"{opt[0]} does not apply to this SRC (a listing file)" in err
    rc, _, err = _cli(capsys, str(tmp_path), str(tmp_path / "o"), "--split-col", "s")
    assert rc == 2 and "--split-col does not apply to this SRC (a folder)" in err
    rc, _, err = _cli(capsys, str(tmp_path / "nope.csv"), str(tmp_path / "o"))
    assert rc == 2 and "nope.csv" in err and "not found" in err
    for e in (err,):
        assert len(e.strip().splitlines()) == 1


def test_label_regex_on_a_flat_folder(tmp_path, capsys):
    src = str(tmp_path / "train")
    os.makedirs(os.path.join(src, "more"))
    names = [f"cat.{i}.jpg" for i in range(4)] + [f"dog.{i}.jpg" for i in range(3)] + ["more/dog.9.jpg", "bird.1.jpg"]
    for i, n in enumerate(names):
        Image.fromarray(make_image(i % 3, i, (24, 20))).save(os.path.join(src, n), quality=90)
    (tmp_path / "train" / "notes.txt").write_text("hi")
    dest = str(tmp_path / "out")
    rc, out, err = _cli(capsys, src, dest, "--label-regex", r"(?:^|/)(cat|dog)\.", "--shard-size", "4")
    assert rc == 0, err
    assert "2 classes from --label-regex: cat, dog" in out
    m = load_manifest(os.path.join(dest, "train"))
    assert m.classes == ["cat", "dog"] and m.class_counts == [4, 4]
    assert {s.path: s.reason for s in m.skipped} == {"bird.1.jpg": "no_label", "notes.txt": "not_an_image"}
    for g in split_samples(os.path.join(dest, "train")).values():
        assert g["json"]["class"] == g["json"]["path"].split("/")[-1].split(".")[0] == m.classes[g["cls"]]
    rc, _, err = _cli(capsys, src, str(tmp_path / "x"), "--label-regex", r"^cat|dog\.")
    assert rc == 2 and "has no capture group" in err
    rc, _, err = _cli(capsys, src, str(tmp_path / "x"), "--label-regex", r"^(horse)\.")
    assert rc == 2 and "no image path matches" in err


def test_val_fraction_is_stratified_exact_and_deterministic(tmp_path):
    src = str(tmp_path / "src")
    for c, n in (("a", 10), ("b", 5), ("c", 1)):
        os.makedirs(os.path.join(src, c))
        for i in range(n):
            Image.fromarray(make_image(ord(c), i, (20, 16))).save(os.path.join(src, c, f"{i}.jpg"), quality=90)
    opts = ConvertConfig(image=IMG, shard_size=4, seed=5, val_fraction=0.3)
    r = convert(src, str(tmp_path / "o1"), opts, workers=1, quiet=True)
    assert sorted(s.split for s in r.splits) == ["train", "val"]
    val = load_manifest(str(tmp_path / "o1" / "val"))
    train = load_manifest(str(tmp_path / "o1" / "train"))
    assert val.class_counts == [3, 2, 0] and train.class_counts == [7, 3, 1]  # round(0.3 * n) per class
    paths = [g["json"]["path"] for d in ("train", "val") for g in split_samples(str(tmp_path / "o1" / d)).values()]
    assert sorted(paths) == sorted(f"{c}/{i}.jpg" for c, n in (("a", 10), ("b", 5), ("c", 1)) for i in range(n))
    convert(src, str(tmp_path / "o2"), opts, workers=2, quiet=True)
    assert tree_digests(str(tmp_path / "o1")) == tree_digests(str(tmp_path / "o2"))
    other = convert(
        src,
        str(tmp_path / "o3"),
        ConvertConfig(image=IMG, shard_size=4, seed=6, val_fraction=0.3),
        workers=1,
        quiet=True,
    )
    assert other.complete
    assert {g["json"]["path"] for g in split_samples(str(tmp_path / "o3" / "val")).values()} != {
        g["json"]["path"] for g in split_samples(str(tmp_path / "o1" / "val")).values()
    }
    splits = make_imagefolder(str(tmp_path / "sp"), num_classes=2, per_class=2, splits={"train": 2, "val": 1})
    with pytest.raises(ConvertError, match="--val-fraction needs a source with one split"):
        convert(splits, str(tmp_path / "o4"), opts, workers=1, quiet=True)


def test_listing_and_images_on_s3(tmp_path, s3):
    import s3fs

    so, bucket = s3
    fs = s3fs.S3FileSystem(**so)
    src = make_imagefolder(str(tmp_path / "src"), num_classes=2, per_class=3, seed=3)
    rows = [[f"{c}/{f}", c] for c in sorted(os.listdir(src)) for f in sorted(os.listdir(os.path.join(src, c)))]
    rows.append(["a0/missing.jpg", "a0"])
    listing = _write_csv(str(tmp_path / "list.csv"), ["path", "label"], rows)
    fs.put(src, f"{bucket}/data", recursive=True)
    fs.put(listing, f"{bucket}/data/list.csv")
    opts = ConvertConfig(image=IMG, shard_size=4, seed=1)
    dest = str(tmp_path / "out")
    r = convert(f"s3://{bucket}/data/list.csv", dest, opts, workers=1, quiet=True, storage_options=so)
    assert r.converted == 6
    m = load_manifest(os.path.join(dest, "train"))
    assert [(s.path, s.reason) for s in m.skipped] == [("a0/missing.jpg", "missing_file")]
    local = str(tmp_path / "local")
    shutil.copy(listing, os.path.join(src, "..", "list2.csv"))
    convert(
        os.path.join(src, "..", "list2.csv"),
        local,
        ConvertConfig(image=IMG, shard_size=4, seed=1, source=ScanConfig(root=src)),
        workers=1,
        quiet=True,
    )
    assert split_samples(os.path.join(dest, "train")) == split_samples(os.path.join(local, "train"))


def _jpeg(label: int, seed: int, fmt: str = "JPEG") -> bytes:
    return image_bytes(make_image(label, seed, (40, 30)), fmt, **({"quality": 90} if fmt == "JPEG" else {}))


def _make_tars(folder: str) -> tuple[str, dict[str, tuple[int, bytes]], dict[str, str]]:
    """Two foreign tars; returns (brace pattern, {identity: (label, image bytes)}, {identity: skip reason})."""
    os.makedirs(folder)
    good: dict[str, tuple[int, bytes]] = {}
    members = [[], []]
    for t in range(2):
        for i in range(5):
            key = f"s{t}{i:03d}"
            img = _jpeg(i % 2, 10 * t + i)
            members[t] += [
                (f"{key}.jpg", img),
                (f"{key}.cls", str(i % 2).encode()),
                (f"{key}.json", json.dumps({"caption": f"c{key}"}).encode()),
            ]
            good[f"part-{t}.tar/{key}"] = (i % 2, img)
    png = _jpeg(1, 99, "PNG")
    members[0] += [
        ("x/png1.png", png),
        ("x/png1.cls", b"1"),
        ("x/png1.seg.png", b"mask"),
    ]  # a key with a folder; seg.png is not png
    good["part-0.tar/x/png1"] = (1, png)
    members[1] += [
        ("noimg.cls", b"0"),
        ("noimg.txt", b"hi"),
        ("nolabel.jpg", _jpeg(0, 7)),
        ("badlabel.jpg", _jpeg(0, 8)),
        ("badlabel.cls", b"-1"),
        ("s1000.jpg", _jpeg(0, 9)),
        ("s1000.cls", b"0"),  # s1000 again, not adjacent
        ("deep.jpg", _jpeg(0, 10)),
        ("deep.cls", b"0"),
        ("deep.json", b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("broken.jpg", _jpeg(0, 11)),
        ("broken.cls", b"0"),
        ("broken.json", b'{"a": '),
    ]
    skips = {
        "part-1.tar/noimg": "missing_file",
        "part-1.tar/nolabel": "no_label",
        "part-1.tar/badlabel": "bad_label",
        "part-1.tar/s1000 (again)": "duplicate_path",
        "part-1.tar/deep": "bad_metadata",
        "part-1.tar/broken": "bad_metadata",
    }
    for t in range(2):
        _tar(os.path.join(folder, f"part-{t}.tar"), members[t])
    return os.path.join(folder, "part-{0..1}.tar"), good, skips


def test_webdataset_tars_resharded_every_sample_accounted(tmp_path, capsys):
    pattern, good, skips = _make_tars(str(tmp_path / "in"))
    opts = ConvertConfig(image=IMG, shard_size=4, seed=3)
    dest = str(tmp_path / "out")
    r = convert(pattern, dest, opts, workers=1, quiet=True)
    assert r.notes == ["2 tars; labels read as class indices (--label-type index): 2 classes"]
    m = load_manifest(os.path.join(dest, "train"))
    assert {s.path: s.reason for s in m.skipped} == skips
    samples = split_samples(os.path.join(dest, "train"))
    assert {g["json"]["path"]: g["cls"] for g in samples.values()} == {k: v[0] for k, v in good.items()}
    assert all(
        g["json"]["caption"] == "c" + g["json"]["path"].split("/")[-1]
        for g in samples.values()
        if "png" not in g["json"]["path"]
    )
    convert(pattern, str(tmp_path / "w2"), opts, workers=2, quiet=True)
    assert tree_digests(dest) == tree_digests(str(tmp_path / "w2"))
    for i in (1, 0):
        convert(pattern, str(tmp_path / "t2"), opts, workers=1, quiet=True, num_tasks=2, task_index=i)
    merge(str(tmp_path / "t2"))
    assert tree_digests(dest) == tree_digests(str(tmp_path / "t2"))
    # re-sharding tars into a DEST below them is fine; into the folder that holds them is refused (--overwrite would delete them)
    assert convert(pattern, str(tmp_path / "in" / "resharded"), opts, workers=1, quiet=True).complete
    with pytest.raises(ConvertError, match="SRC is inside DEST"):
        convert(pattern, str(tmp_path / "in"), opts, workers=1, quiet=True, overwrite=True)
    assert sorted(f for f in os.listdir(tmp_path / "in") if f.endswith(".tar")) == ["part-0.tar", "part-1.tar"]
    # --copy keeps JPEG bytes as they are; the PNG is converted
    copy = ConvertConfig(image=EncodeConfig(short_side=16, copy=True), shard_size=4, seed=3)
    convert(pattern, str(tmp_path / "copy"), copy, workers=1, quiet=True)
    for g in split_samples(str(tmp_path / "copy" / "train")).values():
        src = good[g["json"]["path"]][1]
        assert (g["jpg"] == src) == (not g["json"]["path"].endswith("png1"))
        assert Image.open(__import__("io").BytesIO(g["jpg"])).format == "JPEG"
    # labels from a .json field, as names
    _tar(
        str(tmp_path / "named.tar"),
        [
            ("a.jpg", _jpeg(0, 1)),
            ("a.json", b'{"animal": "dog", "k": 1}'),
            ("b.jpg", _jpeg(1, 2)),
            ("b.json", b'{"animal": "cat"}'),
            ("c.jpg", _jpeg(1, 3)),
        ],
    )
    r = convert(
        str(tmp_path / "named.tar"),
        str(tmp_path / "named"),
        ConvertConfig(image=IMG, shard_size=4, source=ScanConfig(label_json_field="animal")),
        workers=1,
        quiet=True,
    )
    m = load_manifest(str(tmp_path / "named" / "train"))
    assert m.classes == ["cat", "dog"] and [(s.path, s.reason) for s in m.skipped] == [("named.tar/c", "no_label")]
    assert {
        g["json"]["path"]: (g["cls"], g["json"].get("k"))
        for g in split_samples(str(tmp_path / "named" / "train")).values()
    } == {"named.tar/a": (1, 1), "named.tar/b": (0, None)}
    rc, _, err = _cli(capsys, str(tmp_path / "in" / "nothing-{0..3}.tar"), str(tmp_path / "x"))
    assert rc == 2 and "matches no tar" in err and len(err.strip().splitlines()) == 1


def test_webdataset_tars_on_s3(tmp_path, s3):
    import s3fs

    so, bucket = s3
    pattern, good, skips = _make_tars(str(tmp_path / "in"))
    s3fs.S3FileSystem(**so).put(str(tmp_path / "in"), f"{bucket}/in", recursive=True)
    opts = ConvertConfig(image=IMG, shard_size=4, seed=3)
    convert(pattern, str(tmp_path / "local"), opts, workers=1, quiet=True)
    convert(
        f"s3://{bucket}/in/part-{{0..1}}.tar", str(tmp_path / "remote"), opts, workers=1, quiet=True, storage_options=so
    )
    assert _shards(str(tmp_path / "local" / "train")) == _shards(str(tmp_path / "remote" / "train"))


def _hf_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    images = [_jpeg(i % 3, i) for i in range(7)] + [_jpeg(0, 50, "PNG"), None]
    labels = [i % 3 for i in range(7)] + [-1, 1]  # -1: no label in a ClassLabel; the last row has no image
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=["zebra", "ant", "moth"]),
            "caption": datasets.Value("string"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": b, "path": None} if b else None for b in images],
            "label": labels,
            "caption": [f"c{i}" for i in range(9)],
        },
        features=features,
    )
    return datasets, ds, images


def test_hugging_face_dataset_saved_on_disk_and_as_object(tmp_path, capsys, monkeypatch):
    datasets, ds, images = _hf_dataset(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))  # parquet reads cache there
    path = str(tmp_path / "hfds")
    ds.save_to_disk(path)
    dest = str(tmp_path / "out")
    rc, out, err = _cli(capsys, f"hf:{path}", dest, "--shard-size", "3", "--short-side", "16", "--workers", "2")
    assert rc == 0, err
    assert "3 classes from the ClassLabel feature 'label'" in out
    m = load_manifest(os.path.join(dest, "train"))
    assert m.classes == ["zebra", "ant", "moth"] and m.class_counts == [3, 2, 2]  # ClassLabel order, not sorted
    assert [(s.path, s.reason) for s in m.skipped] == [("row-00000007", "no_label"), ("row-00000008", "missing_file")]
    samples = split_samples(os.path.join(dest, "train"))
    assert {g["json"]["path"]: (g["cls"], g["json"]["caption"]) for g in samples.values()} == {
        f"row-{i:08d}": (i % 3, f"c{i}") for i in range(7)
    }
    # the object API and a DatasetDict (two splits), same samples for the same rows
    convert(ds, str(tmp_path / "obj"), ConvertConfig(image=IMG, shard_size=3), workers=1, quiet=True)
    assert split_samples(str(tmp_path / "obj" / "train")) == samples
    dd = datasets.DatasetDict({"train": ds.select(range(5)), "validation": ds.select(range(5, 9))})
    r = convert(dd, str(tmp_path / "dd"), ConvertConfig(image=IMG, shard_size=3), workers=1, quiet=True)
    assert sorted(s.split for s in r.splits) == ["train", "validation"]
    assert load_manifest(str(tmp_path / "dd" / "validation")).num_samples == 2
    rc, _, err = _cli(capsys, f"hf:{path}", str(tmp_path / "x"), "--image-col", "img")
    assert rc == 2 and "no column 'img' (--image-col); its columns are: image, label, caption" in err
    ds.to_parquet(str(tmp_path / "d.parquet"))
    rc, _, err = _cli(
        capsys, f"hf:{tmp_path / 'd.parquet'}", str(tmp_path / "pq"), "--shard-size", "3", "--short-side", "16"
    )
    assert rc == 0, err
    assert split_samples(str(tmp_path / "pq" / "train")) == samples
    # a local dataset repository (data files named by split), as a hub snapshot looks
    os.makedirs(tmp_path / "repo" / "data")
    ds.to_parquet(str(tmp_path / "repo" / "data" / "train-00000-of-00001.parquet"))
    ds.select(range(3)).to_parquet(str(tmp_path / "repo" / "data" / "test-00000-of-00001.parquet"))
    rc, _, err = _cli(
        capsys, f"hf:{tmp_path / 'repo'}", str(tmp_path / "repo-out"), "--shard-size", "3", "--short-side", "16"
    )
    assert rc == 0, err
    assert split_samples(str(tmp_path / "repo-out" / "train")) == samples
    assert load_manifest(str(tmp_path / "repo-out" / "test")).num_samples == 3


def test_info_and_verify_accept_every_source_kind(tmp_path):
    from shardkit.ops.verify import info, verify

    pattern, _, _ = _make_tars(str(tmp_path / "in"))
    convert(
        pattern,
        str(tmp_path / "copy"),
        ConvertConfig(image=EncodeConfig(short_side=16, copy=True), shard_size=4),
        workers=1,
        quiet=True,
    )
    root, rows, _ = _odd_listing_data(tmp_path)
    listing = _write_csv(str(tmp_path / "l.csv"), ["path", "label", "part", "photographer"], rows)
    convert(
        listing,
        str(tmp_path / "list"),
        ConvertConfig(image=IMG, shard_size=4, source=ScanConfig(root=root, split_col="part")),
        workers=1,
        quiet=True,
    )
    for d, splits in (("copy", 1), ("list", 2)):
        report = verify(str(tmp_path / d), quiet=True)
        assert report.ok, report.problems
        assert len(info(str(tmp_path / d))) == splits


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["listing", "tars"])
def test_conversion_of_a_listing_or_tars_killed_then_rerun_is_byte_identical(tmp_path, kind):
    import numpy as np

    root = str(tmp_path / "imgs")
    os.makedirs(root)
    base = np.asarray(make_image(1, 0, (480, 360)))
    rows, members = [], []
    for i in range(80):
        Image.fromarray(np.clip(base.astype(np.int16) + i % 7, 0, 255).astype(np.uint8)).save(
            f"{root}/{i:03d}.jpg", quality=90
        )
        rows.append([f"{i:03d}.jpg", f"c{i % 3}", f"note {i}"])
        members += [(f"{i:03d}.jpg", open(f"{root}/{i:03d}.jpg", "rb").read()), (f"{i:03d}.cls", str(i % 3).encode())]
    if kind == "listing":
        src = _write_csv(str(tmp_path / "l.csv"), ["path", "label", "note"], rows)
        args, source = ["--root", root], ScanConfig(root=root)
    else:
        _tar(str(tmp_path / "a.tar"), members[:80])
        _tar(str(tmp_path / "b.tar"), members[80:])
        src, args, source = str(tmp_path / "{a,b}.tar"), [], ScanConfig()
    args += ["--short-side", "128", "--shard-size", "6", "--workers", "1", "--quiet"]
    clean = str(tmp_path / "clean")
    convert(
        src,
        clean,
        ConvertConfig(image=EncodeConfig(short_side=128), shard_size=6, source=source),
        workers=1,
        quiet=True,
    )
    dest = str(tmp_path / "dest")
    convert_killed_mid_run(src, dest, args)
    done = convert_to_the_end(src, dest, args)
    assert "kept" in done.stdout
    assert tree_digests(dest) == tree_digests(clean)


def test_extra_fields_too_large_or_deep_for_a_sample_json():
    from shardkit.convert.scan.source import MAX_EXTRA_DEPTH, extra_problem

    nested: dict = {}
    cur = nested
    for _ in range(MAX_EXTRA_DEPTH - 1):
        cur["x"] = {}
        cur = cur["x"]
    assert extra_problem(nested) is None
    cur["x"] = [1]
    assert "deeper than" in extra_problem(nested)
    assert "bytes of JSON" in extra_problem({"caption": "x" * (300 << 10)})
    assert "not JSON values" in extra_problem({"when": object()})
