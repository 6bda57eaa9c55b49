"""First contact, as a new user meets shardkit: where a conversion lands, what a root of splits says,
old (flat) datasets, the progress bar, the `__main__` guard, `bench` on tiny data, `sample-data`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shardkit
from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert, merge
from shardkit.demo.sampledata import make_imagefolder
from shardkit.errors import ShardkitError
from shardkit.format.manifest import load_manifest
from tests.support.data import split_samples, tree_digests, write_dataset
from tests.support.repo import ROOT

OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=4, seed=1)


def _src(path, per_class: int = 3, **kw) -> str:
    return make_imagefolder(str(path), num_classes=2, per_class=per_class, **kw)


def _listing(root: str) -> dict[str, list[str]]:
    """``{folder relative to root: sorted file names}`` of every folder holding files (the reference layout view)."""
    out = {}
    for d, _, files in os.walk(root):
        files = sorted(f for f in files if not f.startswith("."))
        if files:
            out[os.path.relpath(d, root)] = files
    return out


# --- one layout rule: every conversion writes DEST/<split>/ ------------------------------------------------------


def test_every_source_kind_lands_in_dest_split(tmp_path):
    """Plain ImageFolder, --val-fraction, split folders: each split in DEST/<split>/, nothing directly in DEST."""
    plain = _src(tmp_path / "plain", per_class=5)
    splits = _src(tmp_path / "splits", splits={"train": 3, "val": 2})
    for name, src, opts, want in (
        ("a", plain, OPTS, ["train"]),
        ("b", plain, ConvertConfig(image=OPTS.image, shard_size=4, seed=1, val_fraction=0.4), ["train", "val"]),
        ("c", splits, OPTS, ["train", "val"]),
        ("d", plain, ConvertConfig(image=OPTS.image, shard_size=4, seed=1, split="all"), ["all"]),
    ):
        dest = str(tmp_path / name)
        r = convert(src, dest, opts, workers=1, quiet=True)
        assert sorted(s.split for s in r.splits) == want
        assert [s.url for s in sorted(r.splits, key=lambda s: s.split)] == [os.path.join(dest, w) for w in want]
        # DEST itself holds only split folders (and no manifest, shard or journal)
        assert sorted(d for d in os.listdir(dest) if not d.startswith(".")) == want
        for w in want:
            assert load_manifest(os.path.join(dest, w)).split == w


def test_adding_a_val_split_does_not_move_the_train_data(tmp_path):
    """With and without --val-fraction the training data is DEST/train (the path a training script names)."""
    src = _src(tmp_path / "src", per_class=5)
    a = convert(src, str(tmp_path / "a"), OPTS, workers=1, quiet=True)
    b = convert(
        src,
        str(tmp_path / "b"),
        ConvertConfig(image=OPTS.image, shard_size=4, seed=1, val_fraction=0.4),
        workers=1,
        quiet=True,
    )
    assert {s.split: os.path.relpath(s.url, tmp_path / "a") for s in a.splits} == {"train": "train"}
    assert {s.split: os.path.relpath(s.url, tmp_path / "b") for s in b.splits} == {"train": "train", "val": "val"}
    train_a, train_b, val_b = (
        split_samples(str(tmp_path / d / s)) for d, s in (("a", "train"), ("b", "train"), ("b", "val"))
    )
    paths = lambda ss: sorted(g["json"]["path"] for g in ss.values())  # noqa: E731
    assert sorted(paths(train_b) + paths(val_b)) == paths(train_a) and len(val_b) == 4


def test_multi_task_conversion_of_a_plain_folder_merges_into_dest_train(tmp_path):
    src = _src(tmp_path / "src", per_class=6)
    single = str(tmp_path / "single")
    convert(src, single, OPTS, workers=1, quiet=True)
    multi = str(tmp_path / "multi")
    for i in (1, 0):
        r = convert(src, multi, OPTS, workers=1, quiet=True, num_tasks=2, task_index=i)
        assert not r.complete and [s.url for s in r.splits] == [os.path.join(multi, "train")]
    assert [m.url for m in merge(multi)] == [os.path.join(multi, "train", "manifest.json")]
    assert tree_digests(single) == tree_digests(multi)


def test_old_flat_dataset_still_loads_verifies_and_merges(tmp_path, capsys):
    """A dataset of older shardkit (manifest.json directly in DEST) keeps working with load, info, verify, bench, merge."""
    old = write_dataset(str(tmp_path / "old"), num_samples=12, shard_size=5)
    loader = shardkit.load(old.url, batch_size=4, size=16, num_workers=0, shuffle=False, preset="eval", with_keys=True)
    assert sorted(k for _, _, keys in loader for k in keys) == sorted(old.keys)
    assert main(["info", old.url]) == 0 and "split train: 12 samples" in capsys.readouterr().out
    assert main(["verify", old.url, "--quiet"]) == 0
    capsys.readouterr()
    assert load_manifest(old.url).num_samples == 12


def test_an_old_flat_multi_task_conversion_still_merges(tmp_path):
    """Tasks of an older shardkit wrote their shards and journal directly in DEST: `merge DEST` finishes it there."""
    import shutil

    src = _src(tmp_path / "src", per_class=6)
    dest = str(tmp_path / "flat")
    for i in (0, 1):
        convert(src, dest, OPTS, workers=1, quiet=True, num_tasks=2, task_index=i)
    for name in os.listdir(os.path.join(dest, "train")):  # the flat layout of older shardkit
        shutil.move(os.path.join(dest, "train", name), os.path.join(dest, name))
    os.rmdir(os.path.join(dest, "train"))
    (m,) = merge(dest)
    assert m.url == os.path.join(dest, "manifest.json") and m.num_samples == 12
    single = convert(src, str(tmp_path / "single"), OPTS, workers=1, quiet=True).splits[0].manifest
    assert [s.sha256 for s in m.shards] == [s.sha256 for s in single.shards]
    assert main(["verify", dest, "--quiet"]) == 0


def test_converting_into_an_old_flat_dataset_is_refused_or_replaced_with_overwrite(tmp_path, capsys):
    old = write_dataset(str(tmp_path / "old"), num_samples=12, shard_size=5)
    before = tree_digests(old.url)
    src = _src(tmp_path / "src")
    rc = main(["convert", src, old.url, "--quiet", "--workers", "1", "--short-side", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and "old flat layout" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1, err
    assert tree_digests(old.url) == before  # nothing written
    r = convert(src, old.url, OPTS, workers=1, quiet=True, overwrite=True)
    assert r.complete and r.splits[0].url == os.path.join(old.url, "train")
    assert sorted(os.listdir(old.url)) == ["train"]  # the old manifest and shards are gone; the new split is in train/
    assert load_manifest(os.path.join(old.url, "train")).num_samples == 6


# --- a root of splits names its splits -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_splits(tmp_path_factory):
    src = _src(tmp_path_factory.mktemp("src") / "if", per_class=4)
    dest = str(tmp_path_factory.mktemp("out") / "ds")
    convert(src, dest, ConvertConfig(image=OPTS.image, shard_size=4, seed=1, val_fraction=0.25), workers=1, quiet=True)
    return dest


def test_load_of_a_root_of_splits_names_the_splits(two_splits):
    os.makedirs(os.path.join(two_splits, "docs"), exist_ok=True)  # a folder that is not a split is not named
    with open(os.path.join(two_splits, "docs", "README.txt"), "w") as f:
        f.write("about this dataset")
    with pytest.raises(ShardkitError) as e:
        shardkit.load(two_splits, batch_size=2, num_workers=0)
    msg = str(e.value)
    assert f"{two_splits} holds splits train, val, not one split" in msg and os.path.join(two_splits, "train") in msg
    assert "\n" not in msg
    with pytest.raises(ShardkitError, match="holds splits train, val"):
        load_manifest(two_splits)


def test_bench_and_info_of_a_root_of_splits(two_splits, capsys):
    rc = main(["bench", two_splits, "--workers", "0", "--batches", "1", "--batch-size", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds splits train, val" in err and os.path.join(two_splits, "train") in err
    assert len(err.strip().splitlines()) == 1, err
    assert main(["info", two_splits]) == 0
    out = capsys.readouterr().out
    assert "split train:" in out and "split val:" in out


# --- the Python API in a script without `if __name__ == "__main__":` (A9) ------------------------------------------

_SCRIPT = """\
import sys
from shardkit.convert import convert

def go():
    r = convert(sys.argv[1], sys.argv[2], workers=2, quiet=True)
    print("converted", r.converted)

{call}
"""


def _run_script(tmp_path, call: str) -> "tuple[Path, subprocess.CompletedProcess[str]]":
    """:data:`_SCRIPT` ending in ``call``, run on a small image folder into ``tmp_path``/out: the script's path and
    the finished process."""
    src = _src(tmp_path / "src", per_class=2)
    script = tmp_path / "convert_it.py"
    script.write_text(_SCRIPT.format(call=call))
    p = subprocess.run(
        [sys.executable, str(script), src, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return script, p


@pytest.mark.timeout(180)
@pytest.mark.parametrize("call", ["go()", "if True:\n    go()"], ids=["top-level", "under-another-if"])
def test_script_without_main_guard_gets_one_line_saying_what_to_do(tmp_path, call):
    script, p = _run_script(tmp_path, call)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last and str(script) in last and "workers=1" in last, p.stderr
    assert "worker process died" not in p.stderr and p.stderr.count("Traceback") <= 1, p.stderr
    assert not os.path.exists(tmp_path / "out")  # refused before anything was written


@pytest.mark.timeout(180)
def test_script_with_main_guard_converts_with_a_pool(tmp_path):
    _, p = _run_script(tmp_path, 'if __name__ == "__main__":\n    go()')
    assert p.returncode == 0 and "converted 4" in p.stdout, p.stderr


# --- progress bar: counts every input, ends at 100 %, and its rate is told apart from the summary's ---------------


def _last_counts(stderr: str) -> dict[str, tuple[int, int]]:
    """``{bar name: (n, total)}`` of the last state of each tqdm bar in ``stderr``."""
    import re

    out = {}
    for frame in re.split(r"[\r\n]", stderr):
        m = re.match(r"\s*(\w+):.*?\|\s*(\d+)/(\d+)\s*\[", frame)
        if m:
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


@pytest.mark.parametrize(
    "opts",
    [
        ConvertConfig(image=EncodeConfig(short_side=16), shard_size=3, shard_bytes=None),
        ConvertConfig(image=EncodeConfig(short_side=16), shard_size=4),  # byte cap on: the pilot encodes a few first
    ],
    ids=["count-cap", "byte-cap-pilot"],
)
def test_progress_bar_counts_every_input_and_ends_at_total(tmp_path, capfd, opts):
    src = _src(tmp_path / "src", per_class=5, splits={"train": 5, "val": 2})
    cls = sorted(os.listdir(os.path.join(src, "train")))[0]
    with open(os.path.join(src, "train", cls, "zz_broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")  # a skip is an input the bar counts too
    capfd.readouterr()
    r = convert(src, str(tmp_path / "out"), opts, workers=1, quiet=False)
    err = capfd.readouterr().err
    bars = _last_counts(err)
    assert bars == {"train": (11, 11), "val": (4, 4)}, err
    assert r.converted == 14 and r.skipped == 1


def test_summary_rate_is_labelled_as_the_whole_run(tmp_path, capsys):
    src = _src(tmp_path / "src")
    assert main(["convert", src, str(tmp_path / "out"), "--quiet", "--workers", "1", "--short-side", "16"]) == 0
    out = capsys.readouterr().out
    import re

    m = re.search(
        r"converted 6 images, skipped 0 files; .* ([\d.]+) s in all, ([\d.]+) img/s overall \(start-up included\)", out
    )
    assert m, out


# --- bench on a dataset too small to measure ----------------------------------------------------------------------


def test_bench_says_when_the_dataset_is_too_small_for_a_steady_figure(tmp_path):
    from shardkit.ops.bench import bench

    small = write_dataset(str(tmp_path / "small"), num_samples=24, shard_size=6)
    r = bench(small.url, workers=[0], batches=4, batch_size=4, size=32, window=4, max_s=3.0)
    p = r.points[0]
    # 6 batches per epoch; a steady figure needs the warm-up batch and two windows of 4 within one epoch (9)
    assert not p.stable and p.stop == "too small: 6 batches per epoch, a steady figure needs 9"
    text = r.format()
    assert "no (too small: 6 batches per epoch" in text and "too small to measure" in text and "steady: yes" not in text
    big = write_dataset(str(tmp_path / "big"), num_samples=40, shard_size=10)
    r = bench(big.url, workers=[0], batches=4, batch_size=4, size=32, window=4, max_s=3.0)
    assert not r.points[0].stop.startswith("too small") and "too small to measure" not in r.format()


# --- shardkit sample-data: the documented way to make data for experiments ------------------------------------------


def _images(root: str) -> dict[str, tuple[int, int]]:
    """``{relative path: (width, height)}`` of every file under ``root``, read with PIL (must all be JPEGs)."""
    from PIL import Image

    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            with Image.open(os.path.join(d, f)) as im:
                assert im.format == "JPEG" and im.mode == "RGB"
                out[os.path.relpath(os.path.join(d, f), root)] = im.size
    return out


def test_sample_data_writes_what_it_says_and_the_quick_start_runs_on_it(tmp_path, capsys):
    d = str(tmp_path / "pets")
    assert main(["sample-data", d, "--classes", "3", "--per-class", "4", "--size", "40x30"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote 12 images of 3 classes (circle, square, stripes) to {d}/<class>/")
    imgs = _images(d)
    assert sorted(os.listdir(d)) == ["circle", "square", "stripes"] and len(imgs) == 12
    assert set(imgs.values()) == {(40, 30)}
    assert {p.split(os.sep)[0] for p in imgs} == {"circle", "square", "stripes"}
    # the same seed writes the same bytes; another seed other bytes
    assert main(["sample-data", str(tmp_path / "again"), "--classes", "3", "--per-class", "4", "--size", "40x30"]) == 0
    assert (
        main(
            [
                "sample-data",
                str(tmp_path / "other"),
                "--classes",
                "3",
                "--per-class",
                "4",
                "--size",
                "40x30",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert tree_digests(d) == tree_digests(str(tmp_path / "again")) != tree_digests(str(tmp_path / "other"))
    # the Quick start: convert DIR, then load DEST/train
    assert main(["convert", d, str(tmp_path / "shards"), "--quiet", "--workers", "1", "--short-side", "24"]) == 0
    capsys.readouterr()
    loader = shardkit.load(
        str(tmp_path / "shards" / "train"), batch_size=5, size=16, num_workers=0, preset="eval", shuffle=False
    )
    labels = [int(y) for _, ys in loader for y in ys]
    assert sorted(labels) == [0] * 4 + [1] * 4 + [2] * 4 and list(loader.classes) == ["circle", "square", "stripes"]


def test_sample_data_splits_and_bad_arguments(tmp_path, capsys):
    d = str(tmp_path / "s")
    assert main(["sample-data", d, "--classes", "2", "--per-class", "3", "--val-per-class", "1"]) == 0
    assert f"to {d}/train and {d}/val" in capsys.readouterr().out
    imgs = _images(d)
    assert sorted(os.listdir(d)) == ["train", "val"] and len(imgs) == 8
    assert sum(p.startswith("val" + os.sep) for p in imgs) == 2
    for argv, what in (
        ([d], "exists and is not an empty folder"),
        ([str(tmp_path / "x"), "--classes", "9"], "--classes must be between 1 and 8"),
        ([str(tmp_path / "x"), "--size", "4x4"], "at least 8x8"),
    ):
        assert main(["sample-data", *argv]) == 2
        err = capsys.readouterr().err
        assert what in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit):
        main(["sample-data", str(tmp_path / "x"), "--size", "40"])
    assert "expected WIDTHxHEIGHT" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")
