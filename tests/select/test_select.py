"""``shardkit.select`` against a plain filter over the per-sample rows, over generated living splits (two
generations, removals, relabels) and combinations of classes, include/exclude lists and where; what the
selection's manifest records; a parent changed underneath; a selection of a selection; the command line."""

from __future__ import annotations

import fnmatch
import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.cli import main
from shardkit.errors import ManifestError
from shardkit.format.manifest import load_manifest
from shardkit.format.snapshot import resolve
from shardkit.format.snapshot.pin import fingerprint, pin
from shardkit.selecting import SelectError, WhereError
from tests.support.living import CLASSES, write_living


def _num(v):
    return type(v) in (int, float)


#: where texts and a plain Python reading of each
WHERE = {
    "score > 3": lambda r: _num(r["meta"].get("score")) and r["meta"]["score"] > 3,
    "source == 'web' or width >= 12": lambda r: r["meta"].get("source") == "web" or r["width"] >= 12,
    "not class == 'cat' and path matches '*/img1*'": lambda r: (
        r["class"] != "cat" and fnmatch.fnmatchcase(r["path"], "*/img1*")
    ),
    "score in [1, 2, 3] and not (width < 10 or source == 'cam')": lambda r: (
        r["meta"].get("score") in (1, 2, 3) and not (r["width"] < 10 or r["meta"].get("source") == "cam")
    ),
    "source != 'cam'": lambda r: r["meta"].get("source") != "cam",
}


@st.composite
def cases(draw):
    n0 = draw(st.integers(1, 14))
    n1 = draw(st.integers(0, 6))
    n = n0 + n1
    removed = tuple(sorted(draw(st.sets(st.integers(0, n - 1), max_size=3)))) if n1 else ()
    relabeled = (
        tuple(draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(CLASSES)), max_size=3))) if n1 else ()
    )
    return {
        "n0": n0,
        "n1": n1,
        "removed": removed,
        "relabeled": tuple(dict(relabeled).items()),
        "seed": draw(st.integers(0, 5)),
        "generation": draw(st.sampled_from([None, 0])) if n1 else None,
        "classes": draw(st.none() | st.lists(st.sampled_from(CLASSES), min_size=1, max_size=2, unique=True)),
        "include": draw(st.none() | st.lists(st.integers(0, n - 1), max_size=6)),
        "exclude": draw(st.none() | st.lists(st.integers(0, n - 1), max_size=4)),
        "as_path": draw(st.lists(st.booleans(), min_size=10, max_size=10)),
        "where": draw(st.none() | st.sampled_from(sorted(WHERE))),
    }


def _entries(idx, rows, as_path):
    return [("./" + rows[i]["path"]) if as_path[j % len(as_path)] else rows[i]["key"] for j, i in enumerate(idx)]


def _reference(case, split) -> list[bool]:
    """The plain filter: one bool per stored sample of the generation selected from."""
    if case["generation"] == 0:
        rows, removed = split.stored_rows[: case["n0"]], set()
    else:
        rows, removed = split.rows, split.removed
    inc = None if case["include"] is None else {split.rows[i]["key"] for i in case["include"] if i < len(rows)}
    exc = set() if case["exclude"] is None else {split.rows[i]["key"] for i in case["exclude"] if i < len(rows)}
    return [
        r["key"] not in removed
        and (case["classes"] is None or r["class"] in case["classes"])
        and (inc is None or r["key"] in inc)
        and r["key"] not in exc
        and (case["where"] is None or bool(WHERE[case["where"]](r)))
        for r in rows
    ]


BASE = {"n0": 9, "n1": 4, "removed": (2,), "relabeled": ((3, "owl"), (10, "cat")), "seed": 0, "generation": None}
BASE_C = {"classes": None, "include": None, "exclude": None, "as_path": [False] * 10, "where": None}


@settings(
    phases=[Phase.explicit, Phase.generate],
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases())
@example({**BASE, **BASE_C, "classes": ["owl"]})  # relabels count: sample 3 is an owl now
@example({**BASE, **BASE_C, "include": [2, 5], "as_path": [True] * 10})  # a removed sample is never selected
@example({**BASE, **BASE_C, "exclude": [5, 6]})
@example({**BASE, **BASE_C, "include": [1, 5, 6], "exclude": [5]})  # exclude wins over include
@example({**BASE, **BASE_C, "where": "source != 'cam'"})
@example({**BASE, **BASE_C, "classes": ["cat", "dog"], "where": "score > 3"})
@example({**BASE, **BASE_C, "generation": 0, "classes": ["owl"]})  # generation 0: stored classes, nothing removed
@example({**BASE, **BASE_C, "n1": 0, "removed": (), "relabeled": (), "include": [0, 8]})
@example({**BASE, **BASE_C, "include": [0], "classes": ["dog"]})  # nothing selected: refused
def test_select_keeps_what_a_plain_filter_keeps(case):
    with tempfile.TemporaryDirectory() as tmp:
        split = write_living(
            os.path.join(tmp, "train"), case["n0"], n1=case["n1"], removed=case["removed"],
            relabeled=case["relabeled"], seed=case["seed"],
        )  # fmt: skip
        want = _reference(case, split)
        rows = split.rows
        n_gen = len(want)
        inc = (
            None
            if case["include"] is None
            else _entries([i for i in case["include"] if i < n_gen], rows, case["as_path"])
        )
        exc = (
            None
            if case["exclude"] is None
            else _entries([i for i in case["exclude"] if i < n_gen], rows, case["as_path"])
        )
        out = os.path.join(tmp, "sel")
        known = {k for r in (split.stored_rows[: case["n0"]] if case["generation"] == 0 else rows) for k in r["meta"]}
        if case["where"] is not None and {f for f in ("score", "source") if f in case["where"]} - known:
            with pytest.raises(WhereError, match="no field"):  # a field no row has: a typo, refused
                shardkit.select(split.url, out=out, where=case["where"], generation=case["generation"])
            return
        if not any(want):  # nothing to write: refused in one line, and no folder appears
            with pytest.raises(SelectError, match="select no sample"):
                shardkit.select(
                    split.url, out=out, classes=case["classes"], include=inc, exclude=exc, where=case["where"],
                    generation=case["generation"],
                )  # fmt: skip
            assert not os.path.exists(out)
            return
        done = shardkit.select(
            split.url, out=out, classes=case["classes"], include=inc, exclude=exc, where=case["where"],
            generation=case["generation"],
        )  # fmt: skip
        snap = resolve(out)
        assert snap.subset.mask(snap.manifest.shard_sizes).tolist() == want
        sel = snap.selection
        assert sel is not None and sel.samples == sum(want) == done.selection.samples
        gen = 1 if case["n1"] and case["generation"] is None else 0
        assert sel.generation == gen == snap.generation
        assert sel.parent == os.path.abspath(split.url)
        assert sel.parent_fingerprint == fingerprint(pin(load_manifest(split.url), gen))
        assert done.total == n_gen - (len(split.removed) if gen == 1 else 0)
        counted = {c: 0 for c in CLASSES}
        for r, w in zip(rows, want):
            counted[
                r["class"] if gen == 1 else next(x for x in split.stored_rows if x["key"] == r["key"])["class"]
            ] += w
        assert done.per_class == counted
        if case["where"] is not None:
            assert sel.criteria["where"] == case["where"]
        # a selection of the selection: the same filter within it, written over the root split
        inner = os.path.join(tmp, "inner")
        within = [w and (rows[i]["width"] >= 11) for i, w in enumerate(want)]
        if not any(within):
            with pytest.raises(SelectError, match="select no sample"):
                shardkit.select(out, out=inner, where="width >= 11")
            return
        shardkit.select(out, out=inner, where="width >= 11")
        both = resolve(inner)
        assert both.subset.mask(both.manifest.shard_sizes).tolist() == within
        assert both.selection is not None and both.selection.parent == sel.parent
        assert both.selection.generation == gen and both.selection.criteria["within"]["url"] == out


def test_a_changed_parent_is_refused_in_one_line(tmp_path):
    split = write_living(str(tmp_path / "train"), 8)
    shardkit.select(split.url, out=str(tmp_path / "sel"), classes=["cat"])
    write_living(str(tmp_path / "train"), 8, seed=3)  # reconverted: other bytes, same names
    for call in (
        lambda: resolve(str(tmp_path / "sel")),
        lambda: shardkit.select(str(tmp_path / "sel"), out=str(tmp_path / "s2")),
    ):
        with pytest.raises(ManifestError, match="changed since the selection was taken") as e:
            call()
        assert "\n" not in str(e.value)


def test_lists_unknown_entries_refused_naming_the_line_or_counted(tmp_path, capsys):
    split = write_living(str(tmp_path / "train"), 8)
    listed = tmp_path / "keep.txt"
    listed.write_text(f"# keep these\n{split.rows[0]['key']}\n\n./{split.rows[1]['path']}\nnope.jpg\n")
    with pytest.raises(SelectError, match=r"keep\.txt:5: 'nope\.jpg' is neither a sample key nor a source path"):
        shardkit.select(split.url, out=str(tmp_path / "s"), include=str(listed))
    done = shardkit.select(split.url, out=str(tmp_path / "s"), include=str(listed), unknown="count")
    assert done.selection.samples == 2 and done.unknown == 1 and "1 list entries named no sample" in done.summary()
    assert done.selection.criteria["include"]["entries"] == 3
    assert main(["select", split.url, "--out", str(tmp_path / "s"), "--include", str(listed)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "keep.txt:5" in err


def test_the_command_line_prints_one_summary_and_refuses_mistakes_in_one_line(tmp_path, capsys):
    split = write_living(str(tmp_path / "train"), 10, n1=3, removed=(0,))
    out = str(tmp_path / "sel")
    assert main(["select", split.url, "--classes", "cat,dog", "--where", "score >= 2", "--out", out]) == 0
    line = capsys.readouterr().out.strip()
    want = [
        r["key"] not in split.removed
        and r["class"] in ("cat", "dog")
        and _num(r["meta"].get("score"))
        and r["meta"]["score"] >= 2
        for r in split.rows
    ]
    assert "\n" not in line and line.startswith(f"selected {sum(want)} of 12 samples")
    for c in CLASSES:  # the classes with samples in, each with its count
        n = sum(w and r["class"] == c for w, r in zip(want, split.rows))
        assert (f"{c} {n}" in line) if n else (f" {c} " not in line)
    m = json.loads(open(os.path.join(out, "manifest.json")).read())
    assert m["format"] == "shardkit-selection" and m["criteria"]["classes"] == ["cat", "dog"]
    bad = [
        ["--classes", "cat,emu"],
        ["--where", "score >>"],
        ["--where", "scroe > 1"],
        ["--generation", "5"],
    ]
    for extra in bad:
        assert main(["select", split.url, "--out", str(tmp_path / "x"), *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err, err
    # the split's own folder is never overwritten by a selection
    assert main(["select", split.url, "--out", split.url]) == 2
    assert "not a selection" in capsys.readouterr().err
    assert load_manifest(split.url).num_samples == 13


def test_select_reads_no_shard(tmp_path):
    split = write_living(str(tmp_path / "train"), 9, n1=2, removed=(1,))
    shards = [n for n in os.listdir(split.url) if n.endswith(".tar")]
    for name in shards:  # moved away: a read of one fails
        os.rename(os.path.join(split.url, name), os.path.join(split.url, name + ".away"))
    done = shardkit.select(split.url, out=str(tmp_path / "sel"), where="score > 0")
    for name in shards:
        os.rename(os.path.join(split.url, name + ".away"), os.path.join(split.url, name))
    assert done.selection.samples == sum(
        r["key"] not in split.removed and _num(r["meta"].get("score")) and r["meta"]["score"] > 0 for r in split.rows
    )
    mask = np.unpackbits(np.frombuffer((tmp_path / "sel" / "selection.bits").read_bytes(), np.uint8), bitorder="little")
    assert int(mask.sum()) == done.selection.samples
