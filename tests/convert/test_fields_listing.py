"""Differential oracle: multi-label sets, float targets and text from CSV/TSV/JSONL listings (the convert side).

Hypothesis writes a listing whose rows each name a distinct solid-colour image, with label cells full of stray,
doubled and trailing separators, quotes, unicode, empty cells and repeated classes, JSONL values of every type,
target cells that are numbers, blanks, words, ``nan``/``inf``/``1e999``, and captions that are empty, quoted,
multi-line or not valid Unicode. The reference (``tests/support/source_reference.py``, no shardkit parsing code)
decides per row "a sample with these class names, targets and text" or "skipped (reason)", or that the whole
listing is refused; the split is read back with plain ``tarfile`` + ``json``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.errors import ConvertError
from tests.support.source_reference import Refused, read_fields_split, reference_fields_listing, write_image

IMG = EncodeConfig(short_side=8)
N_IMAGES = 10
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    report_multiple_bugs=False,
)

NAMES = ["cat", "dog", " emu ", "a b", "é", "2.5", 'q"x', "名"]
INDICES = ["0", "0", "1", "2", " 3 ", "01", "+2", "-1"]
TARGETS = ["1", " 2.5 ", "-0.0", "1e3", "+.5", "1.", "0.1", "", "x", "nan", "inf", "-Infinity", "1e999", "1_0", "١"]
TEXTS = ["hello", "", "a, b", 'say "hi"', "名 ü", "two\nlines", " lead and trail ", "tab\there", ";"]
JSON_TARGETS = [1, -2.5, 0.1, 1e300, 10**400, True, None, "3.25", "nan", [1]]
JSON_TEXTS = [None, 5, "\ud800", ["x"]]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("fields_listing"))
    for i in range(N_IMAGES):
        write_image(os.path.join(root, f"f{i}.jpg"), i)
    return root


@st.composite
def listings(draw):
    """``(kind, rows, options)``: rows are dicts (column -> Python value) over distinct images."""
    kind = draw(st.sampled_from(["csv", "tsv", "jsonl"]))
    mode = draw(st.sampled_from(["multi", "multi", "multi", "none"]))
    sep = draw(st.sampled_from([";", "|", ",", " "])) if mode == "multi" else None
    if kind == "jsonl" and mode == "multi" and draw(st.booleans()):
        sep = None  # JSONL lists need no separator (--multi-label)
    pool = [x for x in draw(st.sampled_from([NAMES, INDICES])) if sep is None or sep not in x.strip()]
    ntargets = draw(st.sampled_from([0, 1, 1, 2]))
    text = draw(st.booleans()) or mode == "none"
    n = draw(st.integers(1, 7))
    paths = draw(st.lists(st.integers(0, N_IMAGES - 1), min_size=n, max_size=n, unique=True))
    rows = []
    for k, i in enumerate(paths):
        row: dict = {"path": f"f{i}.jpg"}
        if mode == "multi":
            items = draw(st.lists(st.sampled_from(pool), max_size=4))
            if kind == "jsonl" and (sep is None or draw(st.booleans())):
                value = list(items)
                if draw(st.integers(0, 5)) == 0:
                    value.append(draw(st.sampled_from([True, 2.5, -1, None, [1], {"a": 1}, 2, ""])))
                if draw(st.integers(0, 7)) == 0:
                    value = draw(st.sampled_from([None, 3, "cat", 1.5]))
                if k and draw(st.integers(0, 9)) == 0:
                    value = "__absent__"
            else:
                stray = draw(st.sampled_from(["", "lead", "trail", "double"]))
                cell = sep.join(items)  # type: ignore[union-attr]
                cell = {"": cell, "lead": sep + cell, "trail": cell + sep, "double": cell.replace(sep, sep * 2)}[stray]  # type: ignore[operator]
                value = cell
            if value != "__absent__":
                row["tags"] = value
        for c in ["a", "b"][:ntargets]:
            v = draw(st.sampled_from(TARGETS + (JSON_TARGETS if kind == "jsonl" else [])))
            if not (kind == "jsonl" and k and draw(st.integers(0, 12)) == 0):
                row[c] = v
        if text:
            t = draw(st.sampled_from(TEXTS + (JSON_TEXTS if kind == "jsonl" else [])))
            if not (kind == "jsonl" and k and draw(st.integers(0, 12)) == 0):
                row["caption"] = t
        rows.append(row)
    if kind == "jsonl":  # every column in at least one row: the first has them all
        rows[0] = {
            "path": rows[0]["path"],
            "tags": rows[0].get("tags", []),
            **{c: rows[0].get(c, 1) for c in ["a", "b"][:ntargets]},
            **({"caption": rows[0].get("caption", "x")} if text else {}),
            **{k: v for k, v in rows[0].items()},
        }
        if mode != "multi":
            rows[0].pop("tags", None)
    order = ["a", "b"][:ntargets] if draw(st.booleans()) else ["b", "a"][2 - ntargets :]  # either column order
    opts = {"mode": mode, "sep": sep, "targets": order, "text": "caption" if text else None}
    return kind, rows, opts


def _write(kind: str, rows: list[dict], opts: dict) -> str:
    if kind == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows)
    header = (
        ["path"]
        + (["tags"] if opts["mode"] == "multi" else [])
        + opts["targets"]
        + ([opts["text"]] if opts["text"] else [])
    )
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t" if kind == "tsv" else ",", lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([r.get(c, "") for c in header])
    return buf.getvalue()


def _scan(opts: dict) -> ScanConfig:
    return ScanConfig(
        label_col="tags",
        label_sep=opts["sep"],
        multi_label=opts["mode"] == "multi",
        labelled=opts["mode"] != "none",
        target_cols=tuple(opts["targets"]),
        text_col=opts["text"],
    )


STATS: Counter = Counter()


@SETTINGS
@given(data=listings())
@example(
    data=(
        "csv",
        [
            {"path": "f0.jpg", "tags": "cat;;dog;cat;", "a": "1.5"},
            {"path": "f1.jpg", "tags": "", "a": "nan"},
            {"path": "f2.jpg", "tags": " dog ", "a": " -2 "},
        ],
        {"mode": "multi", "sep": ";", "targets": ["a"], "text": None},
    )
)
@example(
    data=(
        "jsonl",
        [
            {"path": "f0.jpg", "tags": [0, "2", 2], "caption": "x"},
            {"path": "f1.jpg", "tags": [], "caption": ""},
            {"path": "f2.jpg", "tags": [1, True], "caption": "y"},
        ],
        {"mode": "multi", "sep": None, "targets": [], "text": "caption"},
    )
)
@example(
    data=(
        "csv",
        [{"path": "f0.jpg", "tags": "b;a", "a": "1", "b": "2"}, {"path": "f1.jpg", "tags": "a", "a": "3", "b": "4"}],
        {"mode": "multi", "sep": ";", "targets": ["b", "a"], "text": None},
    )
)
@example(
    data=(
        "csv",
        [{"path": "f0.jpg", "tags": "0;2", "caption": "x"}, {"path": "f1.jpg", "tags": "1", "caption": "y, z"}],
        {"mode": "multi", "sep": ";", "targets": [], "text": "caption"},
    )
)
def test_listing_fields_round_trip(images, data):
    kind, rows, opts = data
    text = _write(kind, rows, opts)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(images))
    try:
        listing = os.path.join(images, f"list-{os.path.basename(tmp)}.{kind}")
        with open(listing, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        try:
            exp = reference_fields_listing(
                kind, text, "tags" if opts["mode"] == "multi" else None, opts["sep"], opts["targets"], opts["text"]
            )
            if not exp.samples:
                raise Refused("no row")
        except Refused as why:
            STATS["refused " + str(why.args[0])] += 1
            with pytest.raises(ConvertError) as info:
                convert(
                    listing,
                    os.path.join(tmp, "out"),
                    ConvertConfig(image=IMG, source=_scan(opts)),
                    workers=1,
                    quiet=True,
                )
            assert "\n" not in str(info.value)
            assert str(why.args[0]).split()[0] in str(info.value) or "no row" in str(info.value), (why, info.value)
            return
        result = convert(
            listing, os.path.join(tmp, "out"), ConvertConfig(image=IMG, source=_scan(opts)), workers=1, quiet=True
        )
        (split,) = result.splits
        got = read_fields_split(split.url)
        m = got.manifest
        fields = (
            ["image"]
            + (["labels"] if opts["mode"] == "multi" else [])
            + (["target"] if opts["targets"] else [])
            + (["text"] if opts["text"] else [])
        )
        assert m["version"] == 3 and m["fields"] == fields and m["targets"] == opts["targets"]
        assert m["classes"] == exp.classes
        assert {s["path"]: s["reason"] for s in m["skipped"]} == exp.skipped
        members = (
            {"jpg", "json"}
            | ({"labels.json"} if opts["mode"] == "multi" else set())
            | ({"target.json"} if opts["targets"] else set())
            | ({"txt"} if opts["text"] else set())
        )
        assert set(got.samples) == set(exp.samples)
        for path, (names, target, txt) in exp.samples.items():
            s = got.samples[path]
            assert s["members"] == members, path
            assert s["image"] == int(path[1:].split(".")[0]), path
            assert s.get("labels") == names and s.get("target") == target and s.get("text") == txt, (path, s)
            STATS["samples"] += 1
        counts = Counter(c for names, _, _ in exp.samples.values() for c in names or ())
        assert m["class_counts"] == [counts[c] for c in exp.classes]
        STATS["skipped " + ",".join(sorted(set(exp.skipped.values())))] += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
