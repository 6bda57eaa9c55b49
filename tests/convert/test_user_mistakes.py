"""`shardkit convert` against what a new user does: odd names, DEST inside SRC, two runs at once, symlinks, odd options."""

from __future__ import annotations

import json
import os

import pytest

from shardkit.cli import build_parser, main
from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from shardkit.errors import ConvertError
from shardkit.format.manifest import load_manifest
from tests.support.data import split_samples

OPTS = ConvertConfig(image=EncodeConfig(short_side=16), shard_size=8, seed=7)


def _src(path, **kw) -> str:
    return make_imagefolder(str(path), num_classes=kw.pop("num_classes", 2), per_class=kw.pop("per_class", 3), **kw)


def _paths(dest: str) -> dict[str, int]:
    """``{source path: label}`` of every sample in the split at ``dest``."""
    return {g["json"]["path"]: g["cls"] for g in split_samples(dest).values()}


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["convert", *argv, "--quiet", "--workers", "1"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_names_that_are_not_utf8_are_skipped_not_fatal(tmp_path, capsys):
    src = _src(tmp_path / "src")
    classes = sorted(os.listdir(src))
    good = os.path.join(os.fsencode(src), os.fsencode(classes[0]))
    with open(os.path.join(good, b"caf\xe9.jpg"), "wb") as f:  # Latin-1 name
        f.write(open(os.path.join(src, classes[0], sorted(os.listdir(os.path.join(src, classes[0])))[0]), "rb").read())
    bad_class = os.path.join(os.fsencode(src), b"cl\xffss")
    os.makedirs(bad_class)
    with open(os.path.join(bad_class, b"x.jpg"), "wb") as f:
        f.write(b"whatever")
    dest = str(tmp_path / "out")
    rc, out, err = _cli(capsys, src, dest, "--shard-size", "8")
    assert rc == 0, err
    assert "2 bad_name" in out and "not valid UTF-8" in err
    dest = os.path.join(dest, "train")
    m = load_manifest(dest)
    assert m.classes == classes  # a folder that cannot be named is not a class
    skipped = {s.path: s.reason for s in m.skipped}
    assert skipped == {f"{classes[0]}/caf\\xe9.jpg": "bad_name", "cl\\xffss/x.jpg": "bad_name"}
    json.dumps(json.load(open(os.path.join(dest, "manifest.json"), encoding="utf-8")), ensure_ascii=False).encode(
        "utf-8"
    )
    assert len(_paths(dest)) == 6


@pytest.mark.parametrize("layout", ["splits", "imagefolder"])
def test_dest_inside_src_or_src_inside_dest_is_refused(tmp_path, capsys, layout):
    if layout == "splits":
        src = _src(tmp_path / "src", splits={"train": 2, "val": 1})
    else:
        src = _src(tmp_path / "src")
    before = sorted(os.walk(src))
    for dest, what in (
        (os.path.join(src, "out"), "DEST is inside SRC"),
        (src, "DEST is inside SRC"),
        (str(tmp_path), "SRC is inside DEST"),
    ):
        rc, _, err = _cli(capsys, src, dest)
        assert rc == 2 and what in err and len(err.strip().splitlines()) == 1, err
        with pytest.raises(ConvertError, match=what):
            convert(src, dest, OPTS, workers=1, quiet=True)
    assert sorted(os.walk(src)) == before  # nothing written into SRC


def test_second_conversion_on_the_same_dest_is_refused_while_the_first_runs(tmp_path):
    from shardkit.convert.dest import dest_lock, lock_name

    src, dest = _src(tmp_path / "src"), str(tmp_path / "out")
    with dest_lock(dest, 0):
        with open(os.path.join(dest, lock_name(0))) as f:
            holder = json.load(f)
        with pytest.raises(ConvertError, match=rf"another conversion \(pid {holder['pid']}, host .+\) is writing DEST"):
            convert(src, dest, OPTS, workers=1, quiet=True)
        # another task of a multi-task conversion has its own lock
        r = convert(src, dest, OPTS, workers=1, quiet=True, num_tasks=2, task_index=1)
        assert not r.complete
    assert not os.path.exists(os.path.join(dest, lock_name(0)))


def test_stale_lock_file_of_a_dead_run_is_taken_over(tmp_path):
    from shardkit.convert.dest import lock_name

    src, dest = _src(tmp_path / "src"), str(tmp_path / "out")
    os.makedirs(dest)
    with open(os.path.join(dest, lock_name(0)), "w") as f:  # left by a run killed with SIGKILL: nobody holds the flock
        json.dump({"pid": 2**22 + 7, "host": "gone"}, f)
    assert convert(src, dest, OPTS, workers=1, quiet=True).complete
    assert not os.path.exists(os.path.join(dest, lock_name(0)))


def test_symlinked_class_folders_and_loops_visit_each_real_file_once(tmp_path, capsys):
    src = _src(tmp_path / "src", num_classes=2, per_class=2)
    a, b = sorted(os.listdir(src))
    os.symlink(os.path.join(src, a), os.path.join(src, "z_alias_of_a"))  # a class folder that is a link to another
    os.symlink(src, os.path.join(src, b, "up"))  # loop: the whole SRC again below b
    os.symlink(os.path.join(src, a), os.path.join(src, a, "self"))  # loop onto itself
    first_b = sorted(f for f in os.listdir(os.path.join(src, b)) if f.endswith(".jpg"))[0]
    os.link(os.path.join(src, b, first_b), os.path.join(src, a, "hardlink.jpg"))  # a hard link is a file of its own
    dest = str(tmp_path / "out")
    rc, out, err = _cli(capsys, src, dest, "--shard-size", "8")
    assert rc == 0 and "duplicate_file" in err
    dest = os.path.join(dest, "train")
    got = _paths(dest)
    real = {
        f"{c}/{f}": i
        for i, c in enumerate((a, b))
        for f in sorted(os.listdir(os.path.join(src, c)))
        if f.endswith(".jpg")
    }
    assert got == real  # each real file once, with the label of the folder it really is in
    m = load_manifest(dest)
    dups = [s.path for s in m.skipped if s.reason == "duplicate_file"]
    assert len(dups) == len(set(dups)) and all(p.startswith(("z_alias_of_a/", f"{b}/up/")) for p in dups)
    assert f"z_alias_of_a/{sorted(os.listdir(os.path.join(src, a)))[0]}" in dups
    assert m.num_samples + sum(s.reason == "duplicate_file" for s in m.skipped) == m.num_samples + len(dups)


def test_shard_bytes_zero_alone_means_no_byte_cap_and_errors_name_options(tmp_path, capsys):
    src = _src(tmp_path / "src")
    rc, out, err = _cli(capsys, src, str(tmp_path / "one"), "--shard-bytes", "0")
    assert rc == 0, err
    assert len(load_manifest(str(tmp_path / "one" / "train")).shards) == 1
    rc, _, err = _cli(capsys, src, str(tmp_path / "x"), "--shard-size", "0")
    assert rc == 2 and "--shard-size must be positive" in err and "shard_size" not in err
    rc, _, err = _cli(capsys, src, str(tmp_path / "x"), "--num-tasks", "0")
    assert rc == 2 and "--num-tasks must be at least 1" in err and "0..-1" not in err
    rc, _, err = _cli(capsys, src, str(tmp_path / "x"), "--num-tasks", "2", "--task-index", "2")
    assert rc == 2 and "--task-index must be in 0..1" in err


def test_refusal_of_a_different_conversion_says_what_differs(tmp_path):
    src, dest = _src(tmp_path / "src"), str(tmp_path / "out")
    convert(src, dest, OPTS, workers=1, quiet=True)
    with pytest.raises(ConvertError, match=r"different conversion \(--seed was 7, now 8\); pass --overwrite"):
        convert(src, dest, ConvertConfig(image=OPTS.image, shard_size=8, seed=8), workers=1, quiet=True)
    with pytest.raises(
        ConvertError,
        match=r"\(--copy was the default, now True; --label-regex was the default, now '\(\.\)'; classes differ",
    ):
        convert(
            src,
            dest,
            ConvertConfig(
                image=EncodeConfig(short_side=16, copy=True),
                shard_size=8,
                seed=7,
                source=ScanConfig(label_regex="(.)"),
            ),
            workers=1,
            quiet=True,
        )
    cls = sorted(os.listdir(src))[0]
    extra = os.path.join(src, cls, "zz_new.jpg")
    with open(extra, "wb") as f:
        f.write(open(os.path.join(src, cls, sorted(os.listdir(os.path.join(src, cls)))[0]), "rb").read())
    with pytest.raises(ConvertError, match=r"the input listing differs .*: 6 files then, 7 now"):
        convert(src, dest, OPTS, workers=1, quiet=True)
    import shutil

    shutil.rmtree(os.path.join(dest, "train", "_shardkit"))  # only the manifest is left to compare with
    with pytest.raises(ConvertError, match=r"the input listing differs"):
        convert(src, dest, OPTS, workers=1, quiet=True)


def test_strict_ignores_files_that_are_not_images_but_fails_on_broken_images(tmp_path):
    src = _src(tmp_path / "src")
    cls = sorted(os.listdir(src))[0]
    with open(os.path.join(src, cls, "notes.txt"), "w") as f:
        f.write("not an image, ImageFolder ignores it")
    with open(os.path.join(src, "README.md"), "w") as f:
        f.write("about")
    strict = ConvertConfig(image=OPTS.image, shard_size=8, strict=True)
    r = convert(src, str(tmp_path / "ok"), strict, workers=1, quiet=True)
    assert r.converted == 6 and r.skipped_reasons == {"not_an_image": 1, "not_in_class_folder": 1}
    with open(os.path.join(src, cls, "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8 this is not a jpeg")
    with pytest.raises(ConvertError, match="broken.jpg: skipped .*--strict"):
        convert(src, str(tmp_path / "bad"), strict, workers=1, quiet=True)


def test_a_shard_named_file_shardkit_did_not_write_is_not_overwritten(tmp_path, capsys):
    src, dest = _src(tmp_path / "src"), str(tmp_path / "out")
    os.makedirs(os.path.join(dest, "train"))
    mine = os.path.join(dest, "train", "train-000000.tar")
    with open(mine, "wb") as f:
        f.write(b"someone else's shard")
    with open(os.path.join(dest, "train", "notes.txt"), "w") as f:
        f.write("keep")
    rc, _, err = _cli(capsys, src, dest)
    assert rc == 2 and "train-000000.tar: a file named like a shard" in err and "--overwrite" in err
    assert open(mine, "rb").read() == b"someone else's shard"
    rc, _, err = _cli(capsys, src, dest, "--overwrite")
    assert rc == 0, err
    assert load_manifest(os.path.join(dest, "train")).num_samples == 6 and os.path.exists(
        os.path.join(dest, "train", "notes.txt")
    )


def test_a_foreign_sample_index_is_refused_and_cleared_by_overwrite(tmp_path, capsys):
    src, dest = _src(tmp_path / "src"), str(tmp_path / "out")
    dest = os.path.join(dest, "train")  # the split folder: conversions write DEST/<split>/
    os.makedirs(dest)
    stale = os.path.join(dest, "train-000003.idx")  # a sidecar no shard of this conversion would replace
    with open(stale, "wb") as f:
        f.write(b"an index of some other shard")
    rc, _, err = _cli(capsys, src, os.path.dirname(dest))
    assert rc == 2 and "train-000003.idx: a file named like a shard" in err and "--overwrite" in err
    assert os.path.exists(stale)
    rc, _, err = _cli(capsys, src, os.path.dirname(dest), "--overwrite")
    assert rc == 0, err
    assert not os.path.exists(stale) and load_manifest(dest).num_samples == 6
    assert sorted(f for f in os.listdir(dest) if f.startswith("train-")) == [
        "train-000000.idx", "train-000000.tar", "train-g000000.keys", "train-g000000.samples.jsonl.gz",
    ]  # fmt: skip


def test_bench_uses_the_storage_option_convention_and_refuses_zero_batches(capsys):
    p = build_parser()
    args = p.parse_args(["bench", "s3://b/ds", "--endpoint-url", "http://127.0.0.1:9", "--storage-option", "anon=true"])
    from shardkit.cli import storage_options

    assert storage_options(args) == {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    for bad in (["--batches", "0"], ["--storage-options", "{}"], ["--batch-size", "0"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(["bench", "ds", *bad])
        assert e.value.code == 2
    capsys.readouterr()
