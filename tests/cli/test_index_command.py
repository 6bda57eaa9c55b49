"""``shardkit index DATASET``: a converted dataset made before checksums (sidecar-1 sidecars) gets them, every split
of a root through ``file://``, then ``verify --strict`` passes and the loader delivers the same batches; a rerun
has nothing to do (exit 0); a shard that cannot be indexed exits 1; a changed shard is one line, exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from shardkit.format.index import INDEX_FORMAT
from shardkit.format.indexio import load_index
from shardkit.format.manifest import load_manifest, save_manifest
from shardkit.ops.verify import verify
from tests.support.batches import assert_same_batches, keyed_batches
from tests.support.data import tar_bytes, write_raw_dataset

KW = dict(batch_size=4, size=16, pin_memory=False, seed=2, num_workers=0, shuffle=False)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    src = make_imagefolder(
        str(tmp_path_factory.mktemp("src") / "splits"), num_classes=2, per_class=4, splits={"train": 3, "val": 1}
    )
    dest = str(tmp_path_factory.mktemp("out") / "ds")
    convert(src, dest, ConvertConfig(image=EncodeConfig(short_side=32), shard_size=2, seed=1), workers=1, quiet=True)
    return dest


def _strip_checksums(split: str) -> None:
    """What a conversion made before checksums holds: sidecar-1 sidecars, ``sample_index`` ``"sidecar-1"``."""
    m = load_manifest(split)
    for i, s in enumerate(m.shards):
        idx = load_index(m.shard_url(i), shard_bytes=s.bytes, shard_sha256=s.sha256)
        with open(m.index_url(i), "wb") as f:
            f.write(replace(idx, crc32c=None).to_bytes())
    save_manifest(replace(m, sample_index="sidecar-1"), split)


def test_an_old_dataset_gets_checksums_and_loads_the_same(converted, tmp_path, capsys):
    ds = str(tmp_path / "ds")
    shutil.copytree(converted, ds)
    fresh = {p: open(os.path.join(ds, p), "rb").read() for p in ("train/train-000000.idx", "val/val-000000.idx")}
    for split in ("train", "val"):
        _strip_checksums(os.path.join(ds, split))
    _, before = keyed_batches(os.path.join(ds, "train"), **KW)
    assert main(["verify", ds, "--quiet", "--strict"]) == 1
    assert "add them with 'shardkit index " in capsys.readouterr().out
    assert main(["index", "file://" + ds, "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"train: 3 sample index(es) written with checksums; manifest sample_index 'sidecar-1' -> '{INDEX_FORMAT}'",
        f"val: 1 sample index(es) written with checksums; manifest sample_index 'sidecar-1' -> '{INDEX_FORMAT}'",
    ]
    assert {p: open(os.path.join(ds, p), "rb").read() for p in fresh} == fresh  # as the conversion wrote them
    assert main(["verify", ds, "--quiet", "--strict"]) == 0
    assert capsys.readouterr().out.startswith("OK: samples in 4 shards, 8 samples")
    _, after = keyed_batches(os.path.join(ds, "train"), **KW)
    assert_same_batches(before, after)
    assert main(["index", os.path.join(ds, "val"), "--quiet"]) == 0
    assert (
        capsys.readouterr().out
        == "val: nothing to do (every shard's sample index holds checksums; the tables are there)\n"
    )


def test_a_shard_that_cannot_be_indexed_exits_1_and_says_why(tmp_path, capsys):
    odd = tar_bytes([("a.cls", b"0"), ("a.jpg", b"x"), ("a.json", b"{}"), ("b.cls", b"1"), ("b.jpg", b"y")])
    root = write_raw_dataset(str(tmp_path / "train"), [(odd, 2)], ["c0", "c1"])
    assert main(["index", root, "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "train: 1 shard(s) cannot be indexed (train-000000.tar)" in out
    assert "the manifest keeps sample_index '' as it cannot promise an index for every shard" in out


def test_a_changed_shard_is_one_line_exit_2_in_a_real_process(converted, tmp_path):
    ds = str(tmp_path / "ds")
    shutil.copytree(os.path.join(converted, "val"), ds)
    _strip_checksums(ds)
    path = os.path.join(ds, "val-000000.tar")
    data = bytearray(open(path, "rb").read())
    data[data.index(b"\xff\xd8\xff") + 60] ^= 1
    open(path, "wb").write(bytes(data))
    r = subprocess.run(
        [sys.executable, "-m", "shardkit", "index", ds, "--quiet"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"shardkit index: error: {path}: sha256 differs from the manifest")
    assert load_manifest(ds).sample_index == "sidecar-1"
    assert verify(ds, quick=True).problems[0].message.startswith("sha256 does not match")
