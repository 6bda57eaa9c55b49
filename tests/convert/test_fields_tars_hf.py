"""Differential oracles: multi-label sets and text from existing tars, multi-label sets, targets and text from
Hugging Face datasets (built with ``datasets`` itself) (the convert side).

Hypothesis builds the source; a reference written here from the documented rules (plain ``json``, no shardkit
parsing code) decides per sample "these class names, targets, text" or "skipped (reason)"; the converted split is
read back with plain ``tarfile`` + ``json`` (``tests/support/source_reference.py``). With ``--copy`` the ``.txt``
(and the JPEG) must be the source's bytes.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.errors import ConvertError
from tests.support.data import HF_NAMES, hf_fields_dataset, solid_colour
from tests.support.source_reference import read_fields_split, reference_text

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    report_multiple_bugs=False,
)
STATS: Counter = Counter()


# ------------------------------------------------------------------------------------------------ tars

_FLOATISH = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+|inf|infinity|nan)$", re.IGNORECASE)
NAME_ITEMS = ['"cat"', '"dog"', '" emu "', '"null"', '""', '"2.5"', '"true"', "null", "[1]", "1.5", "true"]
INDEX_ITEMS = ["0", "1", "2", '"0"', '" 2 "', "-1", '"-1"', "null", '""', "true"]
SCALARS = ["cat", " dog ", "0", "2", "", "null", "  ", "true", "2.5", "{}", "[oops"]


def _ref_tar_item(v):
    """One item of a multi-label tar value: a class name / index, ``""`` (dropped) or ``None`` (bad_label)."""
    if isinstance(v, bool) or isinstance(v, (float, list, dict)):
        return None
    if v is None:
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    t = v.strip()
    if t in ("", "null"):
        return ""
    if t.lower() in ("true", "false") or _FLOATISH.match(t) or t == "{}":  # a bool, number or JSON object
        return None
    if re.fullmatch(r"[+-]?\d+", t):
        return int(t) if not t.startswith("-") else None
    return t


def _ref_tar_label(raw: bytes | None):
    """The class items of a label member (``None``: absent -> no_label; ``"bad"``: bad_label)."""
    if raw is None:
        return None
    t = raw.decode("utf-8").strip()
    if t.startswith("["):
        try:
            v = json.loads(t)
        except ValueError:
            return "bad"
        parts = v if isinstance(v, list) else [v]
    elif t in ("", "null"):
        parts = []
    else:
        parts = [t]
    out = []
    for p in parts:
        item = _ref_tar_item(p)
        if item is None:
            return "bad"
        if item != "" and item not in out:
            out.append(item)
    return out


@st.composite
def tar_sources(draw):
    family = draw(st.sampled_from(["names", "indices"]))
    items = NAME_ITEMS if family == "names" else INDEX_ITEMS
    labelled = draw(st.sampled_from([True, True, False]))
    copy = draw(st.booleans())
    n = draw(st.integers(1, 7))
    samples = []
    for i in range(n):
        kind = draw(st.sampled_from(["list", "list", "list", "scalar", "absent"]))
        if kind == "list":
            label = (
                "["
                + ", ".join(draw(st.lists(st.sampled_from(items[:5] if draw(st.booleans()) else items), max_size=4)))
                + "]"
            ).encode()
        elif kind == "scalar":
            label = draw(st.sampled_from([s for s in SCALARS if (family == "names") != s.strip().isdigit()])).encode()
        else:
            label = None
        text = draw(st.sampled_from([b"hello", b"", b"\xff\xfe", "名 ü".encode(), b"line\n", b" a, b ", None]))
        samples.append((i, label, text))
    return samples, labelled, copy


def _write_tar(path: str, samples) -> None:
    with tarfile.open(path, "w") as tf:
        for i, label, text in samples:
            for ext, data in (("jpg", solid_colour(i, (12, 10))), ("cls", label), ("txt", text)):
                if data is not None:
                    ti = tarfile.TarInfo(f"s{i}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))


def _reference_tars(samples, labelled: bool):
    """``(samples {path: (class items or None, text, txt bytes)}, skipped {path: reason}, classes)``, or raises ``ValueError`` (refused)."""
    out, skipped = {}, {}
    for i, label, text in samples:
        path = f"in.tar/s{i}"
        items = _ref_tar_label(label) if labelled else []
        if labelled and items is None:
            skipped[path] = "no_label"
            continue
        if items == "bad":
            skipped[path] = "bad_label"
            continue
        txt, why = reference_text(text)
        if why:
            skipped[path] = why
            continue
        out[path] = (items, txt, text)
    every = [i for items, _, _ in out.values() for i in items]
    ints = [isinstance(i, int) for i in every]
    if any(ints) and not all(ints):
        raise ValueError("mixed")
    if not out:
        raise ValueError("no sample")
    if every and all(ints):
        if min(every) > 0:
            raise ValueError("not 0")
        classes = [str(k) for k in range(max(every) + 1)]
    else:
        classes = sorted(set(every))
    return (
        {p: (frozenset(str(i) for i in items) if labelled else None, txt, raw) for p, (items, txt, raw) in out.items()},
        skipped,
        classes,
    )


@SETTINGS
@given(data=tar_sources())
@example(
    data=(
        [
            (0, b"[0, 2]", b"a cat"),
            (1, b"1", b"dog\n"),
            (2, b"[]", b"x"),
            (3, b"[true]", b"x"),
            (4, None, b"y"),
            (5, b"null", None),
            (6, b'["2", 2, "02"]', b"\xff"),
        ],
        True,
        True,
    )
)
@example(
    data=([(0, b'["cat", "dog", "cat"]', b"t"), (1, b"dog", b"u"), (2, b'[" emu ", ""]', "名".encode())], True, False)
)
@example(data=([(0, None, b"only text"), (1, b"[0]", b"more")], False, True))
@example(data=([(0, b"[null, 1]", b"x"), (1, b"[0]", b"y")], True, False))
def test_tar_fields_round_trip(tmp_path, data):
    samples, labelled, copy = data
    tmp = tempfile.mkdtemp(dir=tmp_path)
    try:
        src = os.path.join(tmp, "in.tar")
        _write_tar(src, samples)
        scan = ScanConfig(multi_label=labelled, labelled=labelled, text_key="txt")
        options = ConvertConfig(image=EncodeConfig(short_side=8, copy=copy), source=scan)
        try:
            expected, skipped, classes = _reference_tars(samples, labelled)
        except ValueError as why:
            STATS[f"tars refused {why}"] += 1
            with pytest.raises(ConvertError) as info:
                convert(src, os.path.join(tmp, "out"), options, workers=1, quiet=True)
            assert "\n" not in str(info.value)
            return
        (split,) = convert(src, os.path.join(tmp, "out"), options, workers=1, quiet=True).splits
        got = read_fields_split(split.url)
        m = got.manifest
        assert m["fields"] == (["image", "labels", "text"] if labelled else ["image", "text"])
        assert m["classes"] == (classes if labelled else [])
        assert {s["path"]: s["reason"] for s in m["skipped"]} == skipped
        assert set(got.samples) == set(expected)
        source_jpeg = {f"in.tar/s{i}": solid_colour(i, (12, 10)) for i, _, _ in samples}
        for path, (names, txt, raw) in expected.items():
            s = got.samples[path]
            assert s["members"] == ({"jpg", "json", "labels.json", "txt"} if labelled else {"jpg", "json", "txt"})
            assert s.get("labels") == names and s["text"] == txt and s["txt_bytes"] == raw, (path, s)
            assert s["image"] == int(path.rsplit("s", 1)[1])
            if copy:  # --copy: the JPEG and the .txt exactly as they were
                assert got.samples[path]["meta"]["width"] == 12
            STATS["tar samples"] += 1
        if copy:
            with tarfile.open(os.path.join(split.url, m["shards"][0]["name"])) as tf:
                jpgs = {tf.extractfile(x).read() for x in tf.getmembers() if x.name.endswith(".jpg")}
            assert jpgs == {source_jpeg[p] for p in expected}
        counts = Counter(c for names, _, _ in expected.values() for c in names or ())
        assert m["class_counts"] == [counts[c] for c in m["classes"]]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ Hugging Face


@st.composite
def hf_rows(draw):
    n = draw(st.integers(1, 7))
    rows = []
    for i in range(n):
        bad = draw(st.sampled_from(["", "", "", "tags", "y", "z", "text"]))  # at most one bad field per row
        tags = draw(
            st.sampled_from(
                [None, [-1], [2, -1]] if bad == "tags" else [[], [0], [1], [0, 2], [2, 0, 2], [1, 1], [0, 1, 2]]
            )
        )
        y = draw(st.sampled_from([None, float("nan"), float("inf")] if bad == "y" else [1.5, -0.0, 1e300, 0.1]))
        z = None if bad == "z" else draw(st.sampled_from([3, -7]))
        text = draw(st.sampled_from(["", None] if bad == "text" else ["x", "名 ü", "two\nlines"]))
        rows.append((i, tags, y, z, text))
    two = draw(st.booleans())
    return rows, two


def _reference_hf(rows, width: int):
    out, skipped = {}, {}
    for i, tags, y, z, text in rows:
        path = f"row-{i:0{width}d}"
        if tags is None:
            skipped[path] = "no_label"
        elif any(t < 0 for t in tags):
            skipped[path] = "bad_label"
        elif y is None or z is None or not math.isfinite(y):
            skipped[path] = "bad_target"
        elif text in (None, ""):
            skipped[path] = "no_text"
        else:
            out[path] = (frozenset(HF_NAMES[t] for t in tags), (float(y), float(z)), text, i)
    return out, skipped


@SETTINGS
@given(data=hf_rows())
@example(
    data=(
        [
            (0, [0, 2], 1.5, 3, "x"),
            (1, [], 0.1, -7, "y"),
            (2, [-1], 1.5, 3, "z"),
            (3, [1], float("nan"), 3, "w"),
            (4, [1, 1], 1.5, 3, ""),
        ],
        False,
    )
)
def test_hf_fields_round_trip(tmp_path, data):
    import datasets

    rows, two = data
    half = len(rows) // 2
    parts = {"train": rows[: half or len(rows)], "test": rows[half:]} if two and half else {"train": rows}
    ds = (
        datasets.DatasetDict({k: hf_fields_dataset(v) for k, v in parts.items()})
        if len(parts) > 1
        else hf_fields_dataset(rows)
    )
    scan = ScanConfig(label_col="tags", target_cols=("y", "z"), text_col="caption")
    expected = {}
    for name, part in parts.items():
        width = max(8, len(str(max(range(len(part))))))
        renumbered = [(k, *r[1:]) for k, r in enumerate(part)]
        exp, skipped = _reference_hf(renumbered, width)
        ids = {f"row-{k:0{width}d}": r[0] for k, r in enumerate(part)}
        expected[name] = ({p: (*v[:3], ids[p]) for p, v in exp.items()}, skipped)
    out = os.path.join(tempfile.mkdtemp(dir=tmp_path), "out")
    if not any(e for e, _ in expected.values()):
        with pytest.raises(ConvertError):
            convert(ds, out, ConvertConfig(image=EncodeConfig(short_side=8), source=scan), workers=1, quiet=True)
        STATS["hf refused"] += 1
        return
    result = convert(ds, out, ConvertConfig(image=EncodeConfig(short_side=8), source=scan), workers=1, quiet=True)
    assert sorted(s.split for s in result.splits) == sorted(parts)
    for s in result.splits:
        exp, skipped = expected[s.split]
        if not s.written:
            assert not exp and {f.path: f.reason for f in s.skipped_files} == skipped
            continue
        got = read_fields_split(s.url)
        m = got.manifest
        assert m["fields"] == ["image", "labels", "target", "text"] and m["targets"] == ["y", "z"]
        assert m["classes"] == HF_NAMES
        assert {k["path"]: k["reason"] for k in m["skipped"]} == skipped
        assert set(got.samples) == set(exp)
        for path, (names, target, text, i) in exp.items():
            g = got.samples[path]
            assert g["labels"] == names and g["target"] == target and g["text"] == text, (path, g)
            assert (
                g["image"] == i and g["meta"]["note"] == f"n{i}" and "caption" not in g["meta"] and "y" not in g["meta"]
            )
            STATS["hf samples"] += 1
        counts = Counter(c for names, *_ in exp.values() for c in names)
        assert m["class_counts"] == [counts[c] for c in HF_NAMES]
