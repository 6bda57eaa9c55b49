"""``convert --append`` against a plain reference: converting A and appending B reads as converting A and B at once.

Every image is a solid colour naming it (:func:`tests.support.data.write_source`), so what a reader gets is
compared as a multiset of (class name, image id), read with :mod:`tarfile` through the subset ``resolve()`` gives.
The mutant gate (``tests/mutants/append.py``) plants the bugs these tests must catch.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert, merge
from shardkit.errors import ConvertError
from shardkit.format.manifest import load_manifest
from tests.support.data import write_source
from tests.support.living_reader import as_read, files_state, multiset, stored
from tests.support.probes import kill_when
from tests.support.source_reference import image_id, mean_colour, write_image

OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=2, seed=3)
APPEND = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=3, seed=5, append=True)
CLASSES = ("ant", "bee", "cat", "dog")


def _items(spec: list[tuple[int, int]], start: int) -> list[tuple[str, str, int]]:
    """(class index, colour id) pairs -> items with file names unique across A and B (``start`` numbers them)."""
    return [(CLASSES[c], f"{start + n:03d}.png", i) for n, (c, i) in enumerate(spec)]


def _convert(src: str, dest: str, options: ConvertConfig = OPTS) -> None:
    convert(src, dest, options, workers=1, quiet=True)


_SPEC = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=7)


@settings(phases=[Phase.explicit, Phase.generate], max_examples=4, deadline=None)
@given(a=_SPEC, b=_SPEC)
@example(a=[(0, 1), (1, 2), (0, 3)], b=[(2, 4), (0, 5), (3, 6), (1, 7)])  # new classes, keys past A's
@example(a=[(1, 1), (1, 2)], b=[(0, 2), (0, 9)])  # an image of A again (other class folder): skipped once
@example(a=[(2, 1)], b=[(0, 8), (1, 9), (3, 10)])  # classes before A's in sorted order: A's indices stay
def test_convert_then_append_reads_as_converting_both(a, b):
    """convert(A) + append(B) == convert(A and the images of B not already in A): same (class, image) multiset;
    A's class indices, shard bytes and modification times unchanged; keys unique and past A's."""
    with tempfile.TemporaryDirectory() as tmp:
        _append_oracle(pathlib.Path(tmp), a, b)


def _append_oracle(tmp_path: pathlib.Path, a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    A, B = _items(a, 0), _items(b, 100)
    seen = {i for _, _, i in A}
    fresh = [x for x in B if x[2] not in seen]
    src_a, src_b, src_u = (str(tmp_path / n) for n in ("a", "b", "u"))
    write_source(src_a, A)
    write_source(src_b, B)
    write_source(src_u, A + fresh)
    dest, ref = str(tmp_path / "d"), str(tmp_path / "ref")
    _convert(src_a, dest)
    split = os.path.join(dest, "train")
    before, old = files_state(split), load_manifest(split)
    res = convert(src_b, dest, APPEND, workers=1, quiet=True)
    _convert(src_u, ref)
    got, want = as_read(split), as_read(os.path.join(ref, "train"))
    assert multiset(got) == multiset(want)
    after = files_state(split)
    assert {k: after[k] for k in before if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    m = load_manifest(split)
    assert m.classes[: len(old.classes)] == old.classes
    keys = [s["key"] for s in stored(split)]
    assert len(set(keys)) == len(keys)
    old_keys = [s["key"] for s in stored(split)][: old.num_samples]
    assert min((int(k) for k in keys[old.num_samples :]), default=10**9) > max(int(k) for k in old_keys)
    dups = len(B) - len(fresh)
    assert res.skipped_reasons.get("already_in_split", 0) == dups
    assert [g.duplicates for g in m.generations] == ([0, dups] if fresh else [])
    assert as_read(split, generation=0) == as_read(split)[: old.num_samples] if fresh else True


def test_append_of_nothing_new_leaves_the_split_and_reruns_are_no_ops(tmp_path):
    src = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2)], 0))
    dest = str(tmp_path / "d")
    _convert(src, dest)
    split = os.path.join(dest, "train")
    before = files_state(split)
    res = convert(src, dest, APPEND, workers=1, quiet=True)
    assert res.converted == 0 and res.skipped_reasons == {"already_in_split": 2}
    assert files_state(split) == before
    other = write_source(str(tmp_path / "b"), _items([(2, 5)], 10))
    convert(other, dest, APPEND, workers=1, quiet=True)  # not refused as an unfinished append
    assert len(load_manifest(split).generations) == 2
    convert(other, dest, APPEND, workers=1, quiet=True)  # the same command again: nothing new
    assert len(load_manifest(split).generations) == 2


def test_the_same_path_with_other_bytes_stays_twice(tmp_path):
    """Two weeks' ``cat/001.png``, different images: both are samples, told apart by generation and key."""
    a = write_source(str(tmp_path / "a"), [("cat", "001.png", 1)])
    b = write_source(str(tmp_path / "b"), [("cat", "001.png", 2)])
    dest = str(tmp_path / "d")
    _convert(a, dest)
    convert(b, dest, APPEND, workers=1, quiet=True)
    got = as_read(os.path.join(dest, "train"))
    assert sorted((s["path"], s["id"]) for s in got) == [("cat/001.png", 1), ("cat/001.png", 2)]
    assert len({s["key"] for s in got}) == 2


def test_an_unknown_split_is_created_as_its_generation_zero_and_keys_stay_per_split(tmp_path):
    a = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2)], 0))
    b = write_source(str(tmp_path / "b"), _items([(0, 3)], 10))
    dest = str(tmp_path / "d")
    _convert(a, dest)
    convert(b, dest, ConvertConfig(image=EncodeConfig(short_side=16), split="val", append=True), workers=1, quiet=True)
    assert load_manifest(os.path.join(dest, "val")).generations == []
    assert load_manifest(os.path.join(dest, "train")).generations == []


def test_multi_task_append_with_prefixes_merges_like_one_task(tmp_path):
    a = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2), (0, 3)], 0))
    b = write_source(str(tmp_path / "b"), _items([(2, 4), (0, 5), (3, 6), (1, 7), (1, 8)], 10))
    opts = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=2, prefixes=3)
    one, many = str(tmp_path / "one"), str(tmp_path / "many")
    for d in (one, many):
        _convert(a, d, opts)
    app = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=1, prefixes=3, append=True)
    convert(b, one, app, workers=1, quiet=True)
    for t in range(2):
        convert(b, many, app, workers=1, quiet=True, num_tasks=2, task_index=t)
    assert len(load_manifest(os.path.join(many, "train")).generations) == 0  # not merged yet
    merge(many)
    merge(many)  # a second merge changes nothing
    m1, m2 = load_manifest(os.path.join(one, "train")), load_manifest(os.path.join(many, "train"))
    assert [s.sha256 for s in m1.shards] == [s.sha256 for s in m2.shards]
    assert len(m2.generations) == 2 and all("/" in s.name for s in m2.shards)
    assert multiset(as_read(os.path.join(many, "train"))) == multiset(as_read(os.path.join(one, "train")))


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["convert", *argv, "--quiet", "--workers", "1"])
    out, err = capsys.readouterr()
    return rc, err.strip()


def test_user_mistakes_are_one_line_refusals(tmp_path, capsys):
    a = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2)], 0))
    b = write_source(str(tmp_path / "b"), _items([(2, 3)], 10))
    dest = str(tmp_path / "d")
    assert _cli(capsys, a, dest, "--short-side", "16")[0] == 0
    rc, err = _cli(capsys, b, dest, "--append", "--short-side", "24")
    assert rc != 0 and "--short-side is 16 in this split but 24 was given" in err and "\n" not in err
    rc, err = _cli(capsys, b, dest, "--append", "--quality", "80")
    assert rc != 0 and "--quality is 90 in this split but 80 was given" in err
    rc, err = _cli(capsys, b, dest, "--append", "--no-label")
    assert rc != 0 and "fields image but the split stores image, label" in err and "\n" not in err
    sel = tmp_path / "sel"
    sel.mkdir()
    (sel / "manifest.json").write_text(json.dumps({"format": "shardkit-selection", "version": 1}))
    rc, err = _cli(capsys, b, str(sel), "--append")
    assert rc != 0 and "is a selection" in err and "\n" not in err
    rc, err = _cli(capsys, b, str(tmp_path / "nothing"), "--append")
    assert rc != 0 and "no converted split to append to" in err
    assert _cli(capsys, b, dest, "--append")[0] == 0  # options not given: the split's own
    assert load_manifest(os.path.join(dest, "train")).generations[1].options["short_side"] == 16
    rc, err = _cli(capsys, a, dest, "--short-side", "16")  # a plain convert would drop generation 1
    assert rc != 0 and "would drop the appended ones" in err


def test_an_unfinished_append_of_other_sources_is_refused_then_discarded_with_overwrite(tmp_path):
    a = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2)], 0))
    b = write_source(str(tmp_path / "b"), _items([(2, 3), (2, 4), (2, 5), (2, 6)], 10))
    c = write_source(str(tmp_path / "c"), _items([(3, 7)], 20))
    dest = str(tmp_path / "d")
    _convert(a, dest)
    split = os.path.join(dest, "train")
    convert(b, dest, APPEND, workers=1, quiet=True)
    shutil.copy(os.path.join(split, "manifest.json"), tmp_path / "m2")
    # back to generation 0's manifest: generation 1's files are an unfinished append now
    m = load_manifest(split)
    first = m.generations[0]
    gen0 = type(m)(**{**m.__dict__, "shards": m.shards[: first.shards], "classes": m.classes[: first.classes],
                      "class_counts": first.class_counts, "generations": [], "tables": first.tables,
                      "skipped": []})  # fmt: skip
    with open(os.path.join(split, "manifest.json"), "w") as f:
        f.write(gen0.to_json())
    with pytest.raises(ConvertError, match="an unfinished append .* rerun that command to finish it"):
        convert(c, dest, APPEND, workers=1, quiet=True)
    convert(c, dest, APPEND, workers=1, quiet=True, overwrite=True)
    names = os.listdir(split)
    assert not [n for n in names if n.startswith("train-g000001-") and n.endswith(".tar")][1:]
    assert multiset(as_read(split)) == multiset(
        [{"class": "ant", "id": 1}, {"class": "bee", "id": 2}, {"class": "dog", "id": 7}]
    )


def _killed_append(tmp_path: pathlib.Path, when: str, delay: float) -> None:
    a = write_source(str(tmp_path / "a"), _items([(0, 1), (1, 2), (0, 3)], 0))
    b = write_source(str(tmp_path / "b"), _items([(n % 4, 4 + n) for n in range(12)], 10))
    clean, dest = str(tmp_path / "clean"), str(tmp_path / "d")
    for d in (clean, dest):
        _convert(a, d)
    split = os.path.join(dest, "train")
    before = multiset(as_read(split))
    argv = ["convert", b, dest, "--append", "--shard-size", "1", "--workers", "1", "--quiet"]
    convert(b, clean, ConvertConfig(image=EncodeConfig(short_side=16), shard_size=1, append=True), workers=1,
            quiet=True)  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardkit", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    start = time.monotonic()
    marks = {
        "shard": lambda: os.path.exists(os.path.join(split, "train-g000001-000003.tar")),
        "tables": lambda: os.path.exists(os.path.join(split, "train-g000001.keys")),
        "time": lambda: time.monotonic() - start > delay,
    }
    kill_when(proc, marks[when], 60)
    got = multiset(as_read(split))  # loadable, and either the previous generation or the finished one
    assert got == before or got == multiset(as_read(os.path.join(clean, "train")))
    assert main(argv) == 0
    want, m = load_manifest(os.path.join(clean, "train")), load_manifest(split)
    assert [s.sha256 for s in m.shards] == [s.sha256 for s in want.shards]
    assert multiset(as_read(split)) == multiset(as_read(os.path.join(clean, "train")))
    assert len(m.generations) == 2


@pytest.mark.slow
@pytest.mark.parametrize("when,delay", [("shard", 0), ("tables", 0), ("time", random.Random(7).uniform(2, 6))])
def test_a_killed_append_leaves_the_previous_generation_and_a_rerun_finishes_it(tmp_path, when, delay):
    """SIGKILL at a shard of the new generation, at its tables (before the manifest) or at a random time: the split
    reads as before (or as finished), and the same command again finishes it with a clean append's shards."""
    _killed_append(tmp_path, when, delay)


def test_a_split_new_src_has_nothing_for_is_left_as_it_is(tmp_path):
    """NEW_SRC's ``val`` holds no image: the append touches only ``train``; ``val`` keeps every file (even with
    --overwrite, which discards only an unfinished append)."""
    src = tmp_path / "a"
    write_source(str(src / "train"), _items([(0, 1), (1, 2)], 0))
    write_source(str(src / "val"), _items([(0, 3)], 10))
    new = tmp_path / "b"
    write_source(str(new / "train"), _items([(2, 4)], 20))
    (new / "val" / "ant").mkdir(parents=True)
    (new / "val" / "ant" / "notes.txt").write_text("not an image")
    dest = str(tmp_path / "d")
    _convert(str(src), dest)
    before = files_state(os.path.join(dest, "val"))
    convert(str(new), dest, APPEND, workers=1, quiet=True, overwrite=True)
    assert files_state(os.path.join(dest, "val")) == before
    assert len(load_manifest(os.path.join(dest, "train")).generations) == 2


def _labelled(split_dir: str) -> Counter:
    """``(class names, colour id)`` of every stored sample of a multi-label split, read with tarfile."""
    m = load_manifest(split_dir)
    out: Counter = Counter()
    for i in range(len(m.shards)):
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(m.shard_url(i)) as tf:
            for mem in tf.getmembers():
                key, ext = mem.name.split(".", 1)
                groups.setdefault(key, {})[ext] = tf.extractfile(mem).read()  # type: ignore[union-attr]
        for g in groups.values():
            names = frozenset(m.classes[c] for c in json.loads(g["labels.json"]))
            out[(names, image_id(mean_colour(g["jpg"])))] += 1
    return out


def _listing(root: pathlib.Path, rows: list[tuple[str, int]]) -> str:
    lines = ["path,label"]
    for n, (labels, i) in enumerate(rows):
        write_image(str(root / f"{n:03d}.png"), i)
        lines.append(f"{n:03d}.png,{labels}")
    (root / "list.csv").write_text("\n".join(lines) + "\n")
    return str(root / "list.csv")


def test_multi_label_sets_are_renumbered_into_the_merged_classes(tmp_path):
    """A listing's label sets: B's classes (some new, sorting before A's) merge by name; every sample keeps its
    set of class names, as converting both at once gives."""
    a = [("dog;eel", 1), ("eel", 2), ("dog", 3)]
    b = [("ant;eel", 4), ("bee", 5), ("ant;bee;dog", 6)]
    sep = ScanConfig(label_sep=";")
    opts = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=2, source=sep)
    dest, ref = str(tmp_path / "d"), str(tmp_path / "ref")
    convert(_listing(tmp_path / "a", a), dest, opts, workers=1, quiet=True)
    convert(_listing(tmp_path / "b", b), dest, replace(opts, append=True), workers=1, quiet=True)
    convert(_listing(tmp_path / "u", a + b), ref, opts, workers=1, quiet=True)
    m = load_manifest(os.path.join(dest, "train"))
    assert m.classes[:2] == ["dog", "eel"]
    assert _labelled(os.path.join(dest, "train")) == _labelled(os.path.join(ref, "train"))


def test_a_detection_append_needs_the_splits_classes_in_order(tmp_path, capsys):
    """Boxes hold indices into the class list, which an append does not renumber: a NEW_SRC with the split's
    classes is appended (the class list unchanged); one with a class renamed is refused in one line naming the
    split, and DEST is left as it was."""
    from shardkit.demo.sources import write_source as write_scenes

    a, same, other = (str(tmp_path / n) for n in ("a", "same", "other"))
    for seed, root in enumerate((a, same, other)):
        write_scenes(root, "coco", images=5, seed=seed)
    ann = os.path.join(other, "annotations.json")
    with open(ann) as f:
        coco = json.load(f)
    coco["categories"][0]["name"] = "crimson"
    with open(ann, "w") as f:
        json.dump(coco, f)
    dest = str(tmp_path / "d")
    assert _cli(capsys, f"coco:{a}/annotations.json", dest)[0] == 0
    classes = load_manifest(os.path.join(dest, "train")).classes
    assert _cli(capsys, f"coco:{same}/annotations.json", dest, "--append")[0] == 0
    m = load_manifest(os.path.join(dest, "train"))
    assert m.classes == classes and len(m.generations) == 2
    before = files_state(os.path.join(dest, "train"))
    rc, err = _cli(capsys, f"coco:{other}/annotations.json", dest, "--append")
    assert rc != 0 and "split train" in err and "boxes or masks hold class indices" in err and "\n" not in err
    assert files_state(os.path.join(dest, "train")) == before
