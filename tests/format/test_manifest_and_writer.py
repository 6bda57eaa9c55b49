"""Core format pieces: manifest validation and the deterministic shard writer."""

from __future__ import annotations

import tarfile

import pytest

from shardkit.errors import ManifestError
from shardkit.format.manifest import Manifest, load_manifest
from shardkit.plan.world import World
from tests.support.data import manifest_json, tree_digests, write_dataset


def test_roundtrip_and_tar_contents(tmp_path):
    ds = write_dataset(str(tmp_path / "ds"), num_samples=20, shard_size=6)
    m = load_manifest(ds.url)
    assert m.num_samples == 20 and [s.samples for s in m.shards] == [6, 6, 6, 2]
    seen = []
    for i in range(len(m.shards)):
        with tarfile.open(m.shard_url(i)) as tf:
            names = tf.getnames()
            keys = sorted({n.split(".")[0] for n in names})
            for k in keys:
                assert {f"{k}.cls", f"{k}.jpg", f"{k}.json"} <= set(names)
                assert int(tf.extractfile(f"{k}.cls").read()) == ds.labels[k]
            seen += keys
    assert sorted(seen) == sorted(ds.keys) and len(set(seen)) == 20


def test_writer_is_deterministic(tmp_path):
    a = write_dataset(str(tmp_path / "a"), num_samples=9, shard_size=4)
    b = write_dataset(str(tmp_path / "b"), num_samples=9, shard_size=4)
    files_a, files_b = tree_digests(a.url), tree_digests(b.url)
    assert files_a == files_b and len(files_a) == 4  # 3 shards and the manifest, byte-identical
    assert [files_a[s.name] for s in a.manifest.shards] == [
        s.sha256 for s in a.manifest.shards
    ]  # the recorded digests are the files'


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "not valid JSON"),
        (manifest_json(version=99), "version 99"),
        (manifest_json(format="x"), "not a shardkit manifest"),
        (
            manifest_json(shards=[{"name": "../evil.tar", "samples": 1, "bytes": 1, "sha256": "0" * 64}]),
            "not a plain file name",
        ),
        (
            manifest_json(shards=[{"name": "/etc/passwd.tar", "samples": 1, "bytes": 1, "sha256": "0" * 64}]),
            "not a plain file name",
        ),
        (
            manifest_json(shards=[{"name": "pipe:rm -rf x.tar", "samples": 1, "bytes": 1, "sha256": "0" * 64}]),
            "not a plain file name",
        ),
        (
            manifest_json(shards=[{"name": "s3://other/x.tar", "samples": 1, "bytes": 1, "sha256": "0" * 64}]),
            "not a plain file name",
        ),
        (manifest_json(shards=[{"name": "a.tar", "samples": -1, "bytes": 1, "sha256": "0" * 64}]), "impossible count"),
        (manifest_json(shards=[{"name": "a.tar", "samples": 1, "bytes": 1, "sha256": "xyz"}]), "sha256"),
        (manifest_json(shards=[{"name": "a.tar"}]), "malformed"),
    ],
)
def test_hostile_manifests_refused(text, match):
    with pytest.raises(ManifestError, match=match):
        Manifest.from_json(text, url="mem://m.json")


def test_missing_manifest_names_url(tmp_path):
    with pytest.raises(ManifestError, match=str(tmp_path)):
        load_manifest(str(tmp_path))


def test_world_validation():
    w = World(rank=1, world_size=2, worker=2, num_workers=3)
    assert w.partition == 5 and w.num_partitions == 6
    with pytest.raises(ValueError):
        World(rank=2, world_size=2)
