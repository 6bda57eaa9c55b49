"""``shardkit verify`` names the shard and index files a split folder holds but its manifest does not list (flat,
in prefix directories, local, ``file://`` and S3): a warning per split, a problem with ``--strict``; shardkit's work
folder, the manifest and the listed shards' indexes are not strays."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest

from shardkit.cli import main
from shardkit.convert import ConvertConfig, EncodeConfig, convert
from shardkit.demo.sampledata import make_imagefolder
from shardkit.format.manifest import load_manifest, save_manifest
from shardkit.ops.strays import stray_files
from shardkit.ops.verify import verify
from tests.support.data import add_index, write_dataset


@pytest.fixture()
def ds(tmp_path):
    """A dataset root holding split ``train`` (3 shards of 4, 4, 2 samples, with sample indexes)."""
    d = write_dataset(str(tmp_path / "ds" / "train"), num_samples=10, shard_size=4, distinct_images=2)
    add_index(d.url)
    return str(tmp_path / "ds")


def _drop_last_shard(split: str) -> None:
    """Edit the manifest so that it forgets its last shard (its files stay)."""
    m = load_manifest(split)
    counts = [0] * len(m.classes)  # class counts of the shards kept (key i has label i % 3)
    for i in range(sum(s.samples for s in m.shards[:-1])):
        counts[i % len(m.classes)] += 1
    save_manifest(replace(m, shards=m.shards[:-1], class_counts=counts), split)


def _warnings(url: str, **kw) -> list[str]:
    return [str(w) for w in verify(url, **kw).warnings if "does not list" in w.message]


def test_a_clean_split_has_no_strays_the_work_folder_and_other_files_are_not_looked_at(ds):
    split = os.path.join(ds, "train")
    os.makedirs(os.path.join(split, "_shardkit"))
    open(os.path.join(split, "_shardkit", "train-000007.tar"), "wb").close()  # a conversion's work file
    open(os.path.join(split, "README.md"), "w").close()
    assert stray_files(load_manifest(split)) == [] and _warnings(ds) == []
    assert verify(ds, strict=True).ok


def test_a_shard_dropped_from_the_manifest_is_named_a_warning_and_with_strict_a_problem(ds, capsys):
    split = os.path.join(ds, "train")
    _drop_last_shard(split)
    shutil.copy(os.path.join(split, "train-000000.tar"), os.path.join(split, "train-000009.tar"))
    assert stray_files(load_manifest(split)) == ["train-000002.idx", "train-000002.tar", "train-000009.tar"]
    report = verify(ds)
    assert report.ok and not report.problems
    (w,) = _warnings(ds)
    assert w.startswith("train/: 3 shard or index file(s) the manifest does not list: train-000002.idx, ")
    assert "delete them if they are leftovers, or re-convert if the manifest lost shards" in w
    assert not verify(ds, strict=True).ok
    assert main(["verify", ds, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: train/: 3 shard or index file(s)") and len(err.splitlines()) == 1
    assert out.startswith("OK: samples in 2 shards, 8 samples") and out.endswith(" in 1 split(s), 1 warning(s)\n")
    assert main(["verify", ds, "--quiet", "--strict"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("train/: 3 shard or index file(s)") and "\n1 problem(s): samples in 2 shards" in out
    assert err == ""


def test_a_stray_index_alone_is_named_and_the_split_folder_url_works_through_file(ds):
    split = os.path.join(ds, "train")
    shutil.copy(os.path.join(split, "train-000000.idx"), os.path.join(split, "train-000005.idx"))
    (w,) = _warnings("file://" + split)
    assert w.startswith("./: 1 shard or index file(s) the manifest does not list: train-000005.idx; ")
    assert stray_files(load_manifest("file://" + split)) == ["train-000005.idx"]


def test_many_strays_are_counted_after_the_first_ten(ds):
    split = os.path.join(ds, "train")
    for j in range(10, 23):
        open(os.path.join(split, f"train-{j:06d}.tar"), "wb").close()
    (w,) = _warnings(ds)
    assert "13 shard or index file(s)" in w and "train-000019.tar and 3 more" in w and "train-000020" not in w


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """A real conversion over 3 prefix directories (7 shards of 2 images, its journal in ``_shardkit/``)."""
    src = make_imagefolder(str(tmp_path_factory.mktemp("src") / "if"), num_classes=2, per_class=7)
    dest = str(tmp_path_factory.mktemp("out") / "ds")
    cfg = ConvertConfig(image=EncodeConfig(short_side=32), shard_size=2, shuffle=False, prefixes=3)
    convert(src, dest, cfg, workers=1, quiet=True)
    return dest


def test_prefix_directories_are_looked_into(spread, tmp_path):
    ds = str(tmp_path / "ds")
    shutil.copytree(spread, ds)
    (split,) = [os.path.join(ds, d) for d in os.listdir(ds)]
    m = load_manifest(split)
    assert len({s.name.split("/")[0] for s in m.shards}) == 3 and m.sample_index
    assert stray_files(m) == [] and _warnings(ds) == [] and verify(ds, strict=True).ok
    last = m.shards[-1].name
    save_manifest(replace(m, shards=m.shards[:-1], class_counts=[]), split)
    assert stray_files(load_manifest(split)) == [last[:-4] + ".idx", last]
    (w,) = _warnings(ds)
    assert f"2 shard or index file(s) the manifest does not list: {last[:-4]}.idx, {last};" in w


@pytest.mark.slow
def test_s3_strays_in_a_prefix_directory(s3, tmp_path):
    opts, bucket = s3
    d = write_dataset(str(tmp_path / "train"), num_samples=4, shard_size=2, distinct_images=1)
    m = d.manifest
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    url = f"s3://{bucket}/ds/train"
    names = {s.name: f"ab12/{s.name}" for s in m.shards}
    for old, new in names.items():
        fs.put_file(os.path.join(d.url, old), f"{bucket}/ds/train/{new}")
    fs.pipe_file(f"{bucket}/ds/train/ab12/train-000007.tar", b"x")
    spread_m = replace(m, shards=[replace(s, name=names[s.name]) for s in m.shards])
    spread_m.url = ""
    save_manifest(spread_m, url, **opts)
    assert stray_files(load_manifest(url, **opts), **opts) == ["ab12/train-000007.tar"]
    assert [w[:45] for w in _warnings(f"s3://{bucket}/ds", **opts)] == ["train/: 1 shard or index file(s) the manifest"]
