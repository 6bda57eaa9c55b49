"""``shardkit info`` and ``shardkit verify`` on a split with generations and corrections, and on a selection.

The counts ``info`` shows after corrections are checked against the samples a reader gets (read with
:mod:`tarfile` through ``resolve()``'s subset); ``verify`` must name each damaged or stray generation file.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.convert.corrections import correct
from shardkit.format.manifest import load_manifest
from shardkit.format.snapshot.selection import write_selection
from shardkit.ops.upgrade import UpgradeError, add_checksums
from shardkit.ops.verify import verify
from shardkit.ops.verify_generations import generations_info
from tests.support.data import write_source
from tests.support.living_reader import as_read

OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=2, seed=1)


@pytest.fixture
def living(tmp_path) -> str:
    """A split of three generations: a conversion, an append (a new class, a duplicate), corrections."""
    dest = str(tmp_path / "d")
    a = [("ant", "1.png", 1), ("bee", "2.png", 2), ("ant", "3.png", 3)]
    b = [("cat", "4.png", 4), ("ant", "5.png", 5), ("bee", "6.png", 2)]
    convert(write_source(str(tmp_path / "a"), a), dest, OPTS, workers=1, quiet=True)
    app = ConvertConfig(image=EncodeConfig(short_side=16), append=True)
    convert(write_source(str(tmp_path / "b"), b), dest, app, workers=1, quiet=True)
    (tmp_path / "rm").write_text("ant/1.png\n")
    (tmp_path / "rl").write_text("00000003,eel\n00000001,cat\n")
    correct(dest, remove=str(tmp_path / "rm"), relabel=str(tmp_path / "rl"))
    return os.path.join(dest, "train")


def test_info_counts_after_corrections_are_what_a_reader_gets(living, capsys):
    m = load_manifest(living)
    g = generations_info(m)
    read = as_read(living)
    assert g.samples == len(read)
    assert g.class_counts == [sum(s["class"] == c for s in read) for c in m.classes]
    rows = [
        (r.number, r.shards, r.samples, r.classes_added, r.duplicates, r.removed, r.relabeled) for r in g.generations
    ]
    assert rows == [(0, 2, 3, ["ant", "bee"], 0, 0, 0), (1, 1, 2, ["cat"], 1, 0, 0), (2, 0, 0, ["eel"], 0, 1, 2)]
    assert main(["info", living]) == 0
    out = capsys.readouterr().out
    assert "generations: 3" in out and "1 duplicates skipped" in out and "removed 1, relabeled 2" in out
    assert f"after corrections: {len(read)} samples" in out
    assert main(["info", living, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)[0]
    assert d["samples_after_corrections"] == len(read) and len(d["generations"]) == 3


def test_verify_checks_every_generation_file(living):
    assert verify(living, quick=True).ok
    m = load_manifest(living)
    names = [m.generations[1].tables["keys"]["name"], m.generations[0].tables["samples"]["name"]]
    names.append(m.generations[2].corrections.name)  # type: ignore[union-attr]
    for name in names:
        path = os.path.join(living, name)
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[:-1] + bytes([data[-1] ^ 1]))
        report = verify(living, quick=True)
        assert not report.ok and any(name in str(p) for p in report.problems), (name, report.problems)
        with open(path, "wb") as f:
            f.write(data)
    assert verify(living).ok


def test_verify_warns_of_generation_files_no_generation_names(living):
    stray = os.path.join(living, "train-g000007.corrections.json")
    open(stray, "w").write("{}")
    report = verify(living, quick=True)
    assert report.ok and any("train-g000007.corrections.json" in str(w) for w in report.warnings)
    assert not verify(living, quick=True, strict=True).ok


def test_info_and_verify_on_a_selection_read_the_parent_shards_it_reads(living, tmp_path, capsys):
    m = load_manifest(living)
    mask = np.zeros(m.num_samples, bool)
    mask[-1] = True  # a sample of generation 1's shard only
    sel = str(tmp_path / "sel")
    write_selection(living, mask, sel)
    assert main(["info", sel]) == 0
    out = capsys.readouterr().out
    assert "reading 1 of its 3 shards" in out
    report = verify(sel)
    assert report.ok and report.shards == 1
    first = os.path.join(living, m.shards[0].name)
    os.remove(first)  # a shard the selection does not read
    assert verify(sel).ok
    with open(os.path.join(living, m.shards[2].name), "r+b") as f:
        f.seek(600)
        b = f.read(1)
        f.seek(600)
        f.write(bytes([b[0] ^ 0xFF]))
    assert not verify(sel, quick=True).ok


def test_index_keeps_a_split_with_generations(living):
    """``shardkit index`` on an appended, corrected split leaves it as it is (its tables are per generation)."""
    before = open(os.path.join(living, "manifest.json"), "rb").read()
    add_checksums(living)
    assert open(os.path.join(living, "manifest.json"), "rb").read() == before
    assert verify(living, quick=True).ok
    m = load_manifest(living)
    path = os.path.join(living, m.generations[1].tables["keys"]["name"])
    os.remove(path)
    with pytest.raises(UpgradeError, match="a split with generations keeps a table per generation"):
        add_checksums(living)
    assert open(os.path.join(living, "manifest.json"), "rb").read() == before
