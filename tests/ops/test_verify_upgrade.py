"""``shardkit index`` (:func:`shardkit.ops.upgrade.add_checksums`) against a fresh conversion.

The oracle: over small datasets (sample counts, shard sizes, flat or in prefix directories, manifest versions 1
to 3, without an index, with checksum-less sidecars, or half upgraded by a killed run), every sidecar it writes is
byte for byte the one the writer writes for the same samples (whose CRC32Cs are checked here against the sample
bytes with ``google_crc32c`` directly), the manifest changes in ``sample_index`` alone, the loader's reader reads
the same samples as before, now through the index, and a rerun has nothing to do. A shard whose bytes changed is
refused before anything is built from it; a shard that cannot be indexed leaves ``sample_index`` as it was.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import dataclass, replace
from unittest import mock

import google_crc32c
import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.format import EncodedSample, write_tar
from shardkit.format.index import INDEX_FORMAT, index_url
from shardkit.format.indexio import load_index
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from shardkit.format.prefixes import spread_name
from shardkit.ops.upgrade import UpgradeError, add_checksums
from shardkit.ops.verify import verify
from shardkit.storage import fs
from tests.support.data import jpeg_bytes, tar_bytes, tree_digests, tree_snapshot, write_raw_dataset

JPEGS = [jpeg_bytes(c, 0, (16, 12)) for c in range(2)]


@dataclass
class Built:
    root: str  # the split folder
    fresh: dict[str, bytes]  # shard name -> the sidecar the writer wrote for it
    indexed: list[str]  # the shards given a sidecar before the upgrade
    manifest_text: str


def _build(root: str, counts: list[int], *, prefixes: int, state: str, version: int) -> Built:
    """Shards of ``counts`` samples written by the writer; ``state``: ``none`` (no sidecar, ``sample_index`` ``""``),
    ``sidecar-1`` (the writer's sidecars stripped of checksums) or ``killed`` (every other shard already has the
    writer's sidecar, as a killed upgrade leaves them, and the manifest says ``""``)."""
    fresh, infos, indexed = {}, [], []
    key = 0
    for j, n in enumerate(counts):
        samples = []
        for _ in range(n):
            samples.append(EncodedSample(f"k{key:06d}", JPEGS[key % 2], key % 2, {"class": f"c{key % 2}"}))
            key += 1
        buf = io.BytesIO()
        w = write_tar(samples, buf)
        data = buf.getvalue()
        assert w.index is not None and w.index.crc32c is not None
        want = [google_crc32c.value(data[int(a) : int(b)]) for a, b in zip(w.index.starts[:-1], w.index.starts[1:])]
        assert w.index.crc32c.tolist() == want  # the writer's checksums are those of the sample bytes
        name = spread_name(f"train-{j:06d}.tar", j, prefixes)
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        fresh[name] = w.index.to_bytes()
        side = {"sidecar-1": replace(w.index, crc32c=None).to_bytes(), "killed": fresh[name] if j % 2 else None}
        if side.get(state) is not None:
            with open(os.path.join(root, index_url(name)), "wb") as f:
                f.write(side[state])  # type: ignore[arg-type]
            indexed.append(name)
        infos.append(ShardInfo(name, w.samples, w.bytes, w.sha256))
    classes = ["c0", "c1"]
    m = Manifest("train", classes, infos, class_counts=[(key + 1) // 2, key // 2], version=version)
    m.sample_index = "sidecar-1" if state == "sidecar-1" else ""
    save_manifest(m, root)
    with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
        return Built(root, fresh, indexed, f.read())


def _loader_read(root: str) -> tuple[list, int, int]:
    """Every sample as the loader's reader reads it, with the shards it withheld and its range reads."""
    from shardkit.loader.config import StorageConfig
    from shardkit.loader.read.blocks import BlockReader, indexed_shards
    from shardkit.loader.stats import Counters
    from shardkit.plan.epoch import shard_offsets
    from shardkit.storage.opener import ShardOpener

    m = load_manifest(root)
    urls = m.shard_urls()
    r = BlockReader(
        urls,
        [s.bytes for s in m.shards],
        shard_offsets(m.shard_sizes),
        ShardOpener(StorageConfig()),
        Counters(),
        num_classes=len(m.classes),
        sha256=indexed_shards(m, urls),
    )
    try:
        return r.read(np.arange(m.num_samples)), r.shards_withheld, r.range_reads
    finally:
        r.close()


class _Killed(BaseException):
    """A kill in the middle of an upgrade."""


def _killing_put_bytes(after: int):
    real, calls = fs.put_bytes, []

    def put_bytes(url, data, **kw):
        if len(calls) == after:
            raise _Killed(url)
        calls.append(url)
        return real(url, data, **kw)

    return put_bytes


SETTINGS = dict(phases=[Phase.explicit, Phase.generate], deadline=None, derandomize=True)


@settings(**SETTINGS, max_examples=12)
@given(
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    prefixes=st.sampled_from([1, 3]),
    state=st.sampled_from(["none", "sidecar-1", "killed"]),
    version=st.sampled_from([1, 2, 3]),
    kill_after=st.one_of(st.none(), st.integers(0, 4)),
)
@example(counts=[3, 2], prefixes=1, state="none", version=3, kill_after=None)
@example(counts=[3, 2], prefixes=1, state="none", version=1, kill_after=None)
@example(counts=[2, 2, 1], prefixes=1, state="sidecar-1", version=2, kill_after=None)
@example(counts=[2, 2, 1], prefixes=3, state="killed", version=3, kill_after=None)
@example(counts=[1, 4, 2], prefixes=3, state="none", version=3, kill_after=1)
def test_index_writes_what_a_fresh_conversion_writes(counts, prefixes, state, version, kill_after):
    if state == "sidecar-1":
        version = max(version, 2)  # a version 1 manifest has no sample_index
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "train")
        b = _build(root, counts, prefixes=prefixes, state=state, version=version)
        before, withheld, _ = _loader_read(root)
        assert withheld == 0 and len(before) == sum(counts) and all(x.error is None for x in before)
        if kill_after is not None:
            with mock.patch.object(fs, "put_bytes", _killing_put_bytes(kill_after)):
                try:
                    add_checksums(root)
                except _Killed:
                    pass
        report = add_checksums(root)
        (s,) = report.splits
        assert report.complete and s.unindexable == [] and s.after == INDEX_FORMAT
        if kill_after is None:
            kept = len(b.indexed) if state == "killed" else 0  # sidecar-1 sidecars are rebuilt
            assert (s.written, s.kept) == (len(counts) - kept, kept)
        for name, sidecar in b.fresh.items():
            with open(os.path.join(root, index_url(name)), "rb") as f:
                assert f.read() == sidecar, name
        # the manifest: sample_index set (version 1 becomes 2, the first to read it), every other key as it was
        with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
            text = f.read()
        old, new = json.loads(b.manifest_text), json.loads(text)
        tables = new[
            "tables"
        ]  # the key table and per-sample table, built from the shards (tests/format/test_tables.py)
        assert list(new) == [*old, "tables"]
        assert new == {**old, "sample_index": INDEX_FORMAT, "version": max(version, 2), "tables": tables}
        assert text == json.dumps(new, indent=1, ensure_ascii=False) + "\n"
        # the loader reads the same samples, through the index
        after, withheld, range_reads = _loader_read(root)
        assert after == before and withheld == 0 and range_reads == len(counts)
        # no litter; a rerun has nothing to do and changes no byte; verify finds nothing to say
        assert not [p for p in tree_snapshot(root) if fs.WORK_DIR in p or p.endswith(".part")]
        digests = tree_digests(root)
        (again,) = add_checksums(root).splits
        assert not again.changed and again.kept == len(counts) and tree_digests(root) == digests
        v = verify(root)
        assert v.ok and v.warnings == [], (v.problems, v.warnings)


@pytest.mark.parametrize("how", ["byte", "size"])
def test_a_shard_whose_bytes_changed_is_refused_and_nothing_is_vouched_for(tmp_path, how):
    root = str(tmp_path / "train")
    _build(root, [2, 3, 2], prefixes=1, state="none", version=3)
    path = os.path.join(root, "train-000001.tar")
    data = bytearray(open(path, "rb").read())
    if how == "byte":
        data[data.index(b"\xff\xd8\xff") + 40] ^= 1  # a JPEG byte: the walk reads the same members
    else:
        data += bytes(512)
    open(path, "wb").write(bytes(data))
    manifest = open(os.path.join(root, "manifest.json"), "rb").read()
    with pytest.raises(UpgradeError) as err:
        add_checksums(root)
    msg = str(err.value)
    assert msg.startswith(path + ": ") and "\n" not in msg and "restore the shard" in msg
    size = os.path.getsize(path)
    assert ("sha256 differs" in msg) if how == "byte" else (f"holds more than the {size - 512} bytes" in msg)
    assert not os.path.exists(os.path.join(root, "train-000001.idx"))
    assert open(os.path.join(root, "manifest.json"), "rb").read() == manifest


def test_a_shard_that_cannot_be_indexed_is_reported_and_the_manifest_promises_no_index(tmp_path):
    root = str(tmp_path / "train")
    odd = tar_bytes([("a.jpg", JPEGS[0]), ("a.cls", b"0"), ("a.json", b"{}"), ("b.jpg", JPEGS[1]), ("b.cls", b"1")])
    good = tar_bytes([("c.cls", b"0"), ("c.jpg", JPEGS[0]), ("c.json", b"{}")])
    write_raw_dataset(root, [(good, 1), (odd, 2)], ["c0", "c1"])
    (s,) = add_checksums(root).splits
    assert s.unindexable == ["train-000001.tar"] and s.written == 1 and (s.before, s.after) == ("", "")
    assert load_manifest(root).sample_index == ""
    assert os.path.exists(os.path.join(root, "train-000000.idx"))
    assert not os.path.exists(os.path.join(root, "train-000001.idx"))


def test_an_unfinished_split_or_an_unknown_index_format_is_refused_untouched(tmp_path):
    root = str(tmp_path / "ds")
    _build(os.path.join(root, "train"), [2], prefixes=1, state="none", version=3)
    os.makedirs(os.path.join(root, "val"))
    open(os.path.join(root, "val", "val-000000.tar"), "wb").close()
    with pytest.raises(UpgradeError, match="incomplete conversion"):
        add_checksums(root)
    assert not os.path.exists(os.path.join(root, "train", "train-000000.idx"))
    m = load_manifest(os.path.join(root, "train"))
    save_manifest(replace(m, sample_index="sidecar-9"), os.path.join(root, "train"))
    with pytest.raises(UpgradeError, match="'sidecar-9' is unknown to this shardkit"):
        add_checksums(os.path.join(root, "train"))


def test_a_sidecar_with_checksums_for_other_bytes_is_rebuilt(tmp_path):
    """A sidecar that holds checksums but names another shard (a copy) is not "already done"."""
    root = str(tmp_path / "train")
    b = _build(root, [2, 3], prefixes=1, state="none", version=3)
    with open(os.path.join(root, "train-000001.idx"), "wb") as f:
        f.write(b.fresh["train-000000.tar"])
    (s,) = add_checksums(root).splits
    assert (s.written, s.kept) == (2, 0)
    assert load_index(os.path.join(root, "train-000001.tar"), **_size_sha(root, 1)).has_checksums


def _size_sha(root: str, i: int) -> dict:
    s = load_manifest(root).shards[i]
    return {"shard_bytes": s.bytes, "shard_sha256": s.sha256}
