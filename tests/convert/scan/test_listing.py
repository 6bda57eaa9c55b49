"""Listings, label rule, path identity, class index bounds, dead URLs, empty splits, --val-fraction, symlinks.

Each test pins a rule a planted bug breaks (``tests/mutants/sources.py``).
"""

from __future__ import annotations

import csv
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.convert.scan.folders import scan, scan_regex
from shardkit.convert.scan.listing import scan_listing
from shardkit.convert.scan.source import (
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    label_value,
    read_labels,
)
from shardkit.convert.scan.valsplit import carve_val
from shardkit.errors import ConvertError
from tests.support.source_reference import read_split, reference_val_count, write_image

IMG = EncodeConfig(short_side=8)
OPTS = ScanConfig()


def _images(root: str, names: list[str]) -> str:
    for i, n in enumerate(names):
        write_image(os.path.join(root, n), i)
    return root


def _write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def _skips(src: ScannedSource) -> dict[str, list[tuple[str, str]]]:
    return {s.name: [(p, r.value) for p, r, _ in s.skipped] for s in src.splits}


def _files(src: ScannedSource) -> dict[str, list[tuple[str, str]]]:
    return {s.name: [(f.relpath, src.classes[f.label]) for f in s.files] for s in src.splits}


def _one_line_error(capsys, *argv: str) -> str:
    rc = main(["convert", *argv, "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err


# ------------------------------------------------------------------------------------------ A3: row shape


@pytest.mark.parametrize("sep", [",", "\t"])
def test_rows_with_more_or_fewer_fields_than_the_header_are_bad_row(tmp_path, sep):
    ext = "csv" if sep == "," else "tsv"
    _images(str(tmp_path), ["a.png", "b.png", "c.png", "d, e.png", "f.png"])
    rows = [
        ["path", "label"],
        ["a.png", "cat"],
        ["b.png", "golden", "retriever"],
        ["c.png"],
        ["d, e.png", "dog"],
        [],
        ["f.png", "dog", ""],
        ["g.png", "", ""],
    ]
    with open(tmp_path / f"l.{ext}", "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter=sep, lineterminator="\r\n").writerows(rows)
    src = scan_listing(str(tmp_path / f"l.{ext}"), OPTS)
    assert _files(src) == {"train": [("a.png", "cat"), ("d, e.png", "dog")]}
    name = f"l.{ext}"
    assert _skips(src) == {
        "train": [
            (f"{name}:3", "bad_row"),
            (f"{name}:4", "bad_row"),
            (f"{name}:7", "bad_row"),
            (f"{name}:8", "bad_row"),
        ]
    }
    assert "3 fields but the header has 2" in next(d for p, _, d in src.splits[0].skipped if p == f"{name}:3")


def test_a_header_naming_a_column_twice_is_a_one_line_error(tmp_path, capsys):
    _images(str(tmp_path), ["a.png"])
    listing = _write(str(tmp_path / "l.csv"), "path,label,label\na.png,cat,dog\n")
    err = _one_line_error(capsys, listing, str(tmp_path / "out"))
    assert "names column 'label' twice" in err and "l.csv" in err


def test_ragged_rows_are_converted_as_skips_and_counted(tmp_path):
    _images(str(tmp_path / "im"), ["a.png", "b.png"])
    listing = _write(str(tmp_path / "l.csv"), "path,label\na.png,cat\nb.png,golden,retriever\n")
    r = convert(
        listing,
        str(tmp_path / "out"),
        ConvertConfig(image=IMG, source=ScanConfig(root=str(tmp_path / "im"))),
        workers=1,
        quiet=True,
    )
    (split,) = r.splits
    assert split.converted == 1 and split.skipped_reasons == {"bad_row": 1}
    got = read_split(split.url)
    assert got.samples == {"a.png": ("cat", 0, 0)} and got.skipped == [("l.csv:3", "bad_row")]


# ------------------------------------------------------------------------------------------ A4: one label rule

_CASES = [
    (None, None, "no_label"),
    ("", None, "no_label"),
    ("   ", None, "no_label"),
    ([], None, "no_label"),
    (" cat ", "cat", None),
    ("2.5", "2.5", None),
    ("True", "True", None),
    (7, 7, None),
    (0, 0, None),
    (-3, None, "bad_label"),
    (True, None, "bad_label"),
    (False, None, "bad_label"),
    (2.5, None, "bad_label"),
    (2.0, None, "bad_label"),
    ([0, 1], None, "bad_label"),
    (["x"], None, "bad_label"),
    ({"a": 1}, None, "bad_label"),
    (b"x", None, "bad_label"),
]


@pytest.mark.parametrize("raw,value,reason", _CASES)
def test_label_value_is_the_one_label_rule(raw, value, reason):
    got, why = label_value(raw)
    assert (got, why.value if why else None) == (value, reason)


def test_jsonl_labels_that_are_lists_floats_or_bools_are_bad_label(tmp_path):
    _images(str(tmp_path), [f"{i}.png" for i in range(9)])
    labels = ["cat", True, 2.5, [0, 1], [], None, {"a": 1}, "  ", "dog"]
    listing = _write(
        str(tmp_path / "l.jsonl"),
        "".join(json.dumps({"path": f"{i}.png", "label": v}) + "\n" for i, v in enumerate(labels)),
    )
    src = scan_listing(listing, OPTS)
    assert _files(src) == {"train": [("0.png", "cat"), ("8.png", "dog")]}
    assert dict(_skips(src)["train"]) == {
        "1.png": "bad_label",
        "2.png": "bad_label",
        "3.png": "bad_label",
        "4.png": "no_label",
        "5.png": "no_label",
        "6.png": "bad_label",
        "7.png": "no_label",
    }


# ------------------------------------------------------------------------------------------ A5: one file, several paths


def test_one_file_listed_by_several_paths_is_one_sample(tmp_path):
    root = str(tmp_path / "imgs")
    _images(root, ["x.png", "sub/y.png", "z.png"])
    os.symlink("x.png", os.path.join(root, "link.png"))
    rows = [
        ("x.png", "cat"),  # line 2: the sample
        ("./x.png", "dog"),  # the same path text once normalised
        ("sub/../x.png", "dog"),
        ("../imgs/x.png", "dog"),  # climbs out and back in: the same path
        (os.path.join(root, "x.png"), "dog"),  # absolute: another path to the same file
        (f"{root}/./sub/../x.png", "dog"),
        ("link.png", "dog"),  # a symlink to it
        ("sub/y.png", "cat"),
        ("sub//y.png", "dog"),
        ("z.png", ""),  # no label: still claims the file
        (os.path.join(root, "z.png"), "dog"),
    ]
    listing = _write(str(tmp_path / "l.csv"), "path,label\n" + "".join(f"{p},{lab}\n" for p, lab in rows))
    src = scan_listing(listing, ScanConfig(root=root))
    assert _files(src) == {"train": [("sub/y.png", "cat"), ("x.png", "cat")]}
    details = {p: d for p, _, d in src.splits[0].skipped}
    assert details["x.png (l.csv:3)"] == "line 3: already listed on line 2"  # the same path text once normalised
    assert "written another way" in details[f"{os.path.join(root, 'x.png')} (l.csv:6)"]
    a = os.path.join(root, "x.png")
    assert sorted(_skips(src)["train"]) == sorted(
        [
            ("x.png (l.csv:3)", "duplicate_path"),
            ("x.png (l.csv:4)", "duplicate_path"),
            ("x.png (l.csv:5)", "duplicate_path"),
            (f"{a} (l.csv:6)", "duplicate_path"),  # the same path, absolute: no symlink involved
            (f"{a} (l.csv:7)", "duplicate_path"),
            ("link.png (l.csv:8)", "duplicate_file"),
            ("sub/y.png (l.csv:10)", "duplicate_path"),
            ("z.png", "no_label"),
            (f"{os.path.join(root, 'z.png')} (l.csv:12)", "duplicate_path"),
        ]
    )
    r = convert(
        listing,
        str(tmp_path / "out"),
        ConvertConfig(image=IMG, source=ScanConfig(root=root)),
        workers=1,
        quiet=True,
    )
    assert read_split(r.splits[0].url).samples == {"x.png": ("cat", 0, 0), "sub/y.png": ("cat", 1, 0)}


def test_remote_paths_to_one_object_are_one_sample(tmp_path):
    listing = _write(
        str(tmp_path / "l.csv"),
        "path,label\na.png,cat\ns3://b/data/./a.png,dog\nS3://b/data//a.png,dog\nhttp://h/x/../y.png,cat\nhttp://h/y.png,dog\n",
    )
    src = scan_listing(listing, ScanConfig(root="s3://b/data"))
    assert [f.relpath for f in src.splits[0].files] == ["a.png", "http://h/x/../y.png"]
    assert sorted(r for _, r in _skips(src)["train"]) == ["duplicate_path"] * 3  # no symlink in a URL


def test_a_relative_path_leaving_the_root_is_refused_in_one_line(tmp_path, capsys):
    root = _images(str(tmp_path / "imgs"), ["a.png"])
    write_image(str(tmp_path / "b.png"), 1)
    listing = _write(str(tmp_path / "imgs" / "l.csv"), "path,label\na.png,cat\n../b.png,dog\n")
    err = _one_line_error(capsys, listing, str(tmp_path / "out"))
    assert "line 3: path '../b.png' leads outside the root" in err and "--root" in err
    with pytest.raises(ConvertError, match="leads outside the root"):
        scan_listing(listing, ScanConfig(root=root))


# ------------------------------------------------------------------------------------------ A6 + 1-based: class indices


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "huge",
    ["5000000", "999999999", "1" * 100, "9" * 5000, 10**30],
    ids=["5e6", "999999999", "100digits", "5000digits", "int1e30"],
)
@pytest.mark.parametrize("kind", ["auto", "index"])
def test_a_huge_integer_label_is_refused_not_a_huge_class_list(huge, kind):
    values = [("line 2", "0"), ("line 3", "1"), ("line 4", huge)]
    with pytest.raises(
        ConvertError, match=r"line 4\) is a class index far above the 3 distinct labels.*--label-type name"
    ) as e:
        read_labels("l.csv", values, kind)
    assert len(str(e.value)) < 400 and "\n" not in str(e.value)
    classes, idx, _ = read_labels("l.csv", values, "name")
    assert idx == [classes.index("0"), classes.index("1"), classes.index(str(huge).strip())]


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 30_000), min_size=1, max_size=40))
def test_class_index_bound_is_max_1000_or_10x_distinct(labels):
    labels = sorted(labels | {0})
    values = [(f"row {i}", str(v)) for i, v in enumerate(labels)]
    if max(labels) < max(1000, 10 * len(labels)):
        classes, idx, _ = read_labels("x", values, "index")
        assert len(classes) == max(labels) + 1 and idx == labels
    else:
        with pytest.raises(ConvertError, match="--label-type name"):
            read_labels("x", values, "index")


def test_one_based_labels_are_refused_under_auto(tmp_path, capsys):
    _images(str(tmp_path), ["a.png", "b.png", "c.png"])
    listing = _write(str(tmp_path / "l.csv"), "path,label\na.png,1\nb.png,2\nc.png,3\n")
    err = _one_line_error(capsys, listing, str(tmp_path / "out"))
    assert (
        "integer labels start at '1' (line 2), not 0" in err
        and "--label-type index" in err
        and "--label-type name" in err
    )
    assert scan_listing(listing, ScanConfig(label_type="index")).classes == ["0", "1", "2", "3"]  # knowingly
    assert scan_listing(listing, ScanConfig(label_type="name")).classes == ["1", "2", "3"]
    with pytest.raises(
        ConvertError, match=r"start at 5 \(sample 0\), not 0: as class indices, classes '0', '1', '2', \.\.\."
    ):
        read_labels("t", [("sample 0", 5), ("sample 1", 6)], "auto")


# ------------------------------------------------------------------------------------------ a dead URL


class _Handler(http.server.SimpleHTTPRequestHandler):
    hits: dict[str, int] = {}

    def log_message(self, *args):  # noqa: D401 - quiet
        pass

    def do_GET(self):  # noqa: N802
        _Handler.hits[self.path] = _Handler.hits.get(self.path, 0) + 1
        if "dead" in self.path:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture()
def http_images(tmp_path):
    root = _images(str(tmp_path / "www"), ["a.png", "b.png", "dead.png"])
    handler = lambda *a, **k: _Handler(*a, directory=root, **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    _Handler.hits = {}
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        t.join(timeout=5)


@pytest.mark.timeout(60)
def test_a_dead_url_is_skipped_as_unreadable_and_a_rerun_finishes(tmp_path, http_images, monkeypatch):
    pytest.importorskip("aiohttp")
    monkeypatch.setattr(Reader, "backoff_s", 0.0, raising=False)
    base = http_images
    listing = _write(
        str(tmp_path / "l.csv"),
        f"path,label\n{base}/a.png,cat\n{base}/dead.png,dog\n{base}/b.png,dog\n{base}/gone.png,cat\n",
    )
    opts = ConvertConfig(image=IMG)
    for _attempt in range(2):  # a rerun gives the same answer (and resumes)
        r = convert(listing, str(tmp_path / "out"), opts, workers=1, quiet=True)
        (split,) = r.splits
        assert split.skipped_reasons == {"unreadable": 1, "missing_file": 1}
        got = read_split(split.url)
        assert got.samples == {f"{base}/a.png": ("cat", 0, 0), f"{base}/b.png": ("dog", 1, 1)}
        assert dict(got.skipped) == {f"{base}/dead.png": "unreadable", f"{base}/gone.png": "missing_file"}
    assert _Handler.hits["/dead.png"] == 3  # tried 3 times, in one run only (the rerun resumed)


# ------------------------------------------------------------------------------------------ B: empty splits


def test_a_split_whose_every_row_is_bad_is_returned_with_its_skips(tmp_path):
    _images(str(tmp_path), ["a.png", "b.png"])
    rows = "path,label,part\na.png,cat,train\nb.png,dog,train\nc.png,,val\n,dog,val\nd.png,cat,val,x\n"
    listing = _write(str(tmp_path / "l.csv"), rows)
    src = scan_listing(listing, ScanConfig(split_col="part"))
    assert [s.name for s in src.splits] == ["train", "val"]
    val = src.splits[1]
    assert val.files == [] and val.class_names == []
    assert [(p, r.value) for p, r, _ in val.skipped] == [("c.png", "no_label"), ("l.csv:5", "missing_file")]
    assert [(p, r.value) for p, r, _ in src.splits[0].skipped] == [("l.csv:6", "bad_row")]  # its split is unknown
    assert _files(src)["train"] == [("a.png", "cat"), ("b.png", "dog")]
    only_bad = _write(str(tmp_path / "bad.csv"), "path,label,part\nc.png,,val\n,dog,test\n")
    with pytest.raises(ConvertError, match="no row with a usable path and label"):
        scan_listing(only_bad, ScanConfig(split_col="part"))


def _source(counts: dict[str, int]) -> ScannedSource:
    classes = sorted(counts)
    files = [SourceFile(f"{c}/{i:03d}.jpg", classes.index(c), 1) for c in classes for i in range(counts[c])]
    return ScannedSource(
        root="mem", classes=classes, splits=[SplitSource("train", "mem", files)], nested=False, reader=Reader("")
    )


def test_val_fraction_rounding_to_zero_gives_an_empty_val_split():
    src = _source({"a": 1, "b": 1})
    carve_val(src, 0.2, seed=0)
    assert [s.name for s in src.splits] == ["train", "val"] and src.splits[1].files == [] and src.nested
    src = _source({"a": 1, "b": 1})
    carve_val(src, 0.5, seed=0)  # 0.5 x 1 rounds half up: every item is val, train is empty but there
    assert [(s.name, len(s.files)) for s in src.splits] == [("train", 0), ("val", 2)]


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 40), min_size=1, max_size=5),
    st.sampled_from([0.5, 0.25, 0.1, 0.15, 0.3, 0.35, 0.05, 0.45, 0.125, 0.7, 0.95]),
)
def test_val_fraction_takes_f_times_n_rounded_half_up_per_class(counts, fraction):
    src = _source(counts)
    carve_val(src, fraction, seed=3)
    train, val = src.splits
    for label, c in enumerate(src.classes):
        assert sum(f.label == label for f in val.files) == reference_val_count(fraction, counts[c])
    assert sorted(f.relpath for f in train.files + val.files) == sorted(
        f.relpath for f in _source(counts).splits[0].files
    )


_CARVE = """
import json, sys
from shardkit.convert.scan.source import Reader, ScannedSource, SourceFile, SplitSource
from shardkit.convert.scan.valsplit import carve_val
counts = {"cat": 7, "dog": 5, "x y": 3, "ü": 9}
classes = sorted(counts)
files = [SourceFile(f"{c}/{i}.jpg", classes.index(c), 1) for c in classes for i in range(counts[c])]
src = ScannedSource("mem", classes, [SplitSource("train", "mem", list(reversed(files)))], False, Reader(""))
carve_val(src, 0.5, seed=11)
print(json.dumps(sorted(f.relpath for f in src.splits[1].files)))
"""


@pytest.mark.timeout(60)
def test_val_fraction_picks_the_same_items_in_every_process():
    from tests.support.repo import ROOT as root

    picks = []
    for hashseed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=root)
        out = subprocess.run(
            [sys.executable, "-c", _CARVE], capture_output=True, text=True, env=env, timeout=50, check=True
        )
        picks.append(json.loads(out.stdout.splitlines()[-1]))
    assert picks[0] == picks[1] == picks[2]
    per_class = {c: sum(p.startswith(c + "/") for p in picks[0]) for c in ("cat", "dog", "x y", "ü")}
    assert per_class == {"cat": 4, "dog": 3, "x y": 2, "ü": 5}  # 3.5, 2.5, 1.5, 4.5 rounded half up


# ------------------------------------------------------------------------------------------ B: symlinks


def _aliases(src: str, inside: str) -> None:
    """Eight folders ``z{i}_real`` each with an alias ``a{i}_alias`` that sorts before it, below ``src/inside``."""
    for i in range(8):
        write_image(os.path.join(src, inside, f"z{i}_real", "x.png"), i)
        os.symlink(f"z{i}_real", os.path.join(src, inside, f"a{i}_alias"))


def test_the_real_path_wins_when_the_alias_sorts_first_inside_a_class(tmp_path):
    src = str(tmp_path / "src")
    _aliases(src, "cls")
    write_image(os.path.join(src, "other", "y.png"), 9)
    expect = [f"cls/z{i}_real/x.png" for i in range(8)] + ["other/y.png"]
    assert [f.relpath for f in scan(src).splits[0].files] == expect
    assert [f.relpath for f in scan_regex(src, r"^(cls|other)/").splits[0].files] == expect


def test_the_real_path_wins_for_an_aliased_class_folder(tmp_path):
    src = str(tmp_path / "src")
    write_image(os.path.join(src, "z_real", "x.png"), 1)
    write_image(os.path.join(src, "z_real", "sub", "y.png"), 2)
    os.symlink("z_real", os.path.join(src, "a_alias"))
    s = scan(src)
    assert s.classes == ["a_alias", "z_real"]
    assert _files(s) == {"train": [("z_real/sub/y.png", "z_real"), ("z_real/x.png", "z_real")]}
    assert _skips(s) == {"train": [("a_alias/sub/y.png", "duplicate_file"), ("a_alias/x.png", "duplicate_file")]}
    r = scan_regex(src, r"^([a-z_]+)/")
    assert _files(r) == {"train": [("z_real/sub/y.png", "z_real"), ("z_real/x.png", "z_real")]}
