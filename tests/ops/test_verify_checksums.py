"""``shardkit verify`` and per-sample checksums: each sample's CRC32C in a sidecar index is checked against the tar
(full and ``quick``), a mismatch names the shard and the key; a split whose indexes hold no checksums is a warning
naming the command that adds them; a checksum-less sidecar under a manifest that promises checksums is a problem."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from shardkit.format.index import INDEX_FORMAT, index_url
from shardkit.format.indexio import load_index
from shardkit.format.manifest import load_manifest, save_manifest
from shardkit.ops.verify import verify
from shardkit.ops.verify_split import SHOWN_MISMATCHES
from tests.support.data import add_index, write_dataset


@pytest.fixture()
def ds(tmp_path):
    """Split ``train``: 3 shards (k000000..k000003, k000004..k000007, k000008..k000009) with checksummed indexes."""
    d = write_dataset(str(tmp_path / "train"), num_samples=10, shard_size=4, distinct_images=2)
    add_index(d.url)
    assert load_manifest(d.url).sample_index == INDEX_FORMAT
    return d.url


def _rewrite_crcs(split: str, shard: int, change) -> None:
    """Replace shard ``shard``'s sidecar by one whose checksums are ``change(crcs)`` (consistent, loads fine)."""
    m = load_manifest(split)
    s = m.shards[shard]
    idx = load_index(m.shard_url(shard), shard_bytes=s.bytes, shard_sha256=s.sha256)
    assert idx.crc32c is not None
    wrong = replace(idx, crc32c=change(idx.crc32c.copy()).astype(np.uint32))
    with open(index_url(m.shard_url(shard)), "wb") as f:
        f.write(wrong.to_bytes())


def _crc_problems(report) -> list[str]:
    return [str(p) for p in report.problems if "CRC32C" in p.message]


@pytest.mark.parametrize("quick", [False, True])
def test_intact_checksummed_split_is_ok_without_warnings(ds, quick):
    report = verify(ds, quick=quick, strict=True)
    assert report.ok and report.problems == [] and report.warnings == []


@pytest.mark.parametrize("quick", [False, True])
def test_a_wrong_checksum_in_the_index_names_the_shard_and_the_key(ds, quick):
    def flip(crcs):
        crcs[2] ^= 1
        return crcs

    _rewrite_crcs(ds, 1, flip)
    m = load_manifest(ds)
    s = m.shards[1]
    lo, hi = load_index(m.shard_url(1), shard_bytes=s.bytes, shard_sha256=s.sha256).byte_range(2, 3)
    report = verify(ds, quick=quick)
    assert [str(p) for p in report.problems] == [
        f"train-000001.tar key k000006: bytes {lo}..{hi} do not match the CRC32C in the sample index "
        "(the shard or its index is damaged)"
    ]


def test_changed_sample_bytes_are_named_by_key_as_well_as_by_sha256(ds):
    path = os.path.join(ds, "train-000002.tar")
    data = bytearray(open(path, "rb").read())
    second = data.index(b"k000009.jpg")  # the second sample's first member header; its JPEG follows
    data[second + 512 + 100] ^= 0x01
    open(path, "wb").write(bytes(data))
    for quick in (False, True):
        report = verify(ds, quick=quick)
        assert [p.key for p in report.problems if "CRC32C" in p.message] == ["k000009"]
        assert any("sha256 does not match" in p.message for p in report.problems)


def test_every_sample_wrong_is_counted_after_the_first_ones(tmp_path):
    d = write_dataset(str(tmp_path / "train"), num_samples=SHOWN_MISMATCHES + 3, shard_size=100, distinct_images=1)
    add_index(d.url)
    _rewrite_crcs(d.url, 0, lambda crcs: crcs ^ 1)
    msgs = [p.message for p in verify(d.url, quick=True).problems]
    assert len(msgs) == SHOWN_MISMATCHES + 1 and msgs[-1] == "3 more samples do not match their CRC32C"


def test_no_checksums_is_a_warning_naming_the_command(tmp_path):
    plain = write_dataset(str(tmp_path / "ds" / "plain"), num_samples=3, shard_size=2, split="plain").url
    old = write_dataset(str(tmp_path / "ds" / "old"), num_samples=3, shard_size=2, split="old").url
    add_index(old)
    m = load_manifest(old)
    for i, s in enumerate(m.shards):  # the sidecars of a conversion made before checksums
        idx = load_index(m.shard_url(i), shard_bytes=s.bytes, shard_sha256=s.sha256)
        with open(m.index_url(i), "wb") as f:
            f.write(replace(idx, crc32c=None).to_bytes())
    save_manifest(replace(m, sample_index="sidecar-1"), old)
    report = verify(str(tmp_path / "ds"))
    assert report.ok and report.problems == []
    assert [str(w) for w in report.warnings] == [
        "old/: sample indexes (sidecar-1) without per-sample checksums: the loader cannot check each sample's "
        f"bytes; add them with 'shardkit index {old}'",
        "plain/: no sample index, so no per-sample checksums: the loader cannot check each sample's bytes; add "
        f"them with 'shardkit index {plain}'",
    ]
    assert not verify(str(tmp_path / "ds"), strict=True).ok


def test_a_sidecar_without_checksums_under_a_manifest_that_promises_them_is_a_problem(ds):
    m = load_manifest(ds)
    s = m.shards[0]
    idx = load_index(m.shard_url(0), shard_bytes=s.bytes, shard_sha256=s.sha256)
    with open(m.index_url(0), "wb") as f:
        f.write(replace(idx, crc32c=None).to_bytes())
    for quick in (False, True):
        assert [str(p) for p in verify(ds, quick=quick).problems] == [
            f"train-000000.idx: sample index holds no per-sample checksums, though the manifest says "
            f"{INDEX_FORMAT!r}; 'shardkit index {ds}' adds them"
        ]
