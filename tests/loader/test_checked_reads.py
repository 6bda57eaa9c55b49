"""Every sample the loader delivers is the converted one, or it is withheld and counted, or the run stops with a
clear error naming the shard.

Hypothesis picks how and where a converted, indexed dataset's bytes change after the conversion, under an unchanged
manifest: a flipped bit anywhere in a shard, a label rewritten in place at the same size, a shard truncated or with
bytes appended, two shards (with or without their indexes) exchanged. The reference is the intact dataset read by
the same loader: key -> (pixels, label). Also here: the sample index cache is least-recently-used, and a sidecar with
trailing bytes is refused.
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.errors import DataError, StorageError
from shardkit.format.index import index_url
from shardkit.format.manifest import load_manifest
from shardkit.loader.config import StorageConfig
from shardkit.loader.read.reader import BlockReader
from shardkit.loader.stats import Counters
from shardkit.plan.epoch import shard_offsets
from shardkit.storage.opener import ShardOpener
from tests.support.data import add_index, write_dataset

SHARDS, PER_SHARD = 3, 5
KW = dict(batch_size=4, size=16, pin_memory=False, seed=3, with_keys=True, shuffle_buffer=8)


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An indexed dataset of 3 shards of 5 samples (built once per module)."""
    root = str(tmp_path_factory.mktemp("checked") / "intact")
    write_dataset(root, num_samples=SHARDS * PER_SHARD, shard_size=PER_SHARD, size=(24, 20), distinct_images=4)
    add_index(root)
    return root


def _epoch(root: str, **kw) -> tuple[dict[str, tuple[torch.Tensor, int]], shardkit.LoaderStats]:
    loader = shardkit.load(root, **{**KW, "num_workers": 0, **kw})
    try:
        got: dict[str, tuple[torch.Tensor, int]] = {}
        for images, labels, keys in loader:
            for im, lab, key in zip(images, labels.tolist(), keys):
                assert key not in got, f"{key} delivered twice"
                got[key] = (im, lab)
        return got, loader.stats
    finally:
        loader.close()


@pytest.fixture(scope="module")
def reference(intact: str) -> dict[str, tuple[torch.Tensor, int]]:
    """The intact dataset as the loader delivers it: key -> (pixels, label)."""
    return _epoch(intact)[0]


def _sample_at(root: str, shard: int, offset: int) -> "str | None":
    """The key of the sample of ``shard`` whose bytes hold byte ``offset`` (None: past the samples)."""
    m = load_manifest(root)
    with open(index_url(m.shard_url(shard)), "rb") as f:
        from shardkit.format.index import SampleIndex

        idx = SampleIndex.from_bytes(f.read())
    i = int(np.searchsorted(idx.starts, offset, side="right")) - 1
    return idx.keys[i] if 0 <= i < len(idx) else None


CHANGES = st.sampled_from(["flip", "relabel", "truncate", "append", "swap shards", "swap shards and indexes"])


def _change(root: str, kind: str, shard: int, where: float, ref: "dict[str, tuple[torch.Tensor, int]]") -> set[str]:
    """Apply ``kind`` to ``shard`` of the copy at ``root`` (``ref``: the intact dataset's deliveries); the keys
    that must not be delivered."""
    m = load_manifest(root)
    path = m.shard_url(shard)
    data = bytearray(open(path, "rb").read())
    must_go: set[str] = set()
    if kind == "flip":
        at = int(where * (len(data) - 1))
        data[at] ^= 1 << (at % 8)
        key = _sample_at(root, shard, at)
        must_go = {key} if key is not None else set()
    elif kind == "relabel":
        keys = [k for k in ref if k in _keys_of(root, shard)]
        key = keys[int(where * (len(keys) - 1))]
        at = data.index(f"{key}.cls".encode()) + 512  # the member's data follows its header
        data[at : at + 1] = b"2" if data[at : at + 1] != b"2" else b"1"
        must_go = {key}
    elif kind == "truncate":
        del data[max(1, int(where * len(data))) :]
    elif kind == "append":
        data += b"\0garbage" * (1 + int(where * 100))
    else:
        other = (shard + 1) % SHARDS
        names = [(path, m.shard_url(other))]
        if kind == "swap shards and indexes":
            names.append((index_url(path), index_url(m.shard_url(other))))
        for a, b in names:
            os.replace(a, a + ".x")
            os.replace(b, a)
            os.replace(a + ".x", b)
        return set()
    open(path, "wb").write(bytes(data))
    return must_go


def _keys_of(root: str, shard: int) -> set[str]:
    return {f"k{i:06d}" for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD)}


def _check(root: str, must_go: set[str], shard: int, ref: "dict[str, tuple[torch.Tensor, int]]", **kw) -> None:
    try:
        got, stats = _epoch(root, **kw)
    except (StorageError, DataError) as exc:  # the run stopped: the message names a changed shard
        names = {os.path.basename(load_manifest(root).shard_url(k))[:-4] for k in (shard, (shard + 1) % SHARDS)}
        assert any(n in str(exc) for n in names), exc
        return
    for key, (im, lab) in got.items():
        assert torch.equal(im, ref[key][0]) and lab == ref[key][1], f"{key}: not the converted sample"
    assert len(got) + stats.skipped == len(ref), "a sample neither delivered nor counted"
    assert not must_go & set(got), f"changed samples delivered: {must_go & set(got)}"


@settings(phases=[Phase.explicit, Phase.generate], max_examples=30, deadline=None)
@given(kind=CHANGES, shard=st.integers(0, SHARDS - 1), where=st.floats(0, 1), check_sizes=st.booleans())
@example(kind="flip", shard=1, where=0.5, check_sizes=True)  # a bit inside a JPEG: only the CRC32C sees it
@example(kind="relabel", shard=0, where=0.0, check_sizes=True)  # a label, same size: only the CRC32C sees it
@example(kind="truncate", shard=2, where=0.6, check_sizes=False)  # samples past the cut withheld, not walked
@example(kind="swap shards and indexes", shard=0, where=0.0, check_sizes=False)
def test_changed_bytes_are_never_delivered(tmp_path_factory, intact, reference, kind, shard, where, check_sizes):
    root = str(tmp_path_factory.mktemp("changed") / "ds")
    shutil.copytree(intact, root)
    must_go = _change(root, kind, shard, where, reference)
    _check(root, must_go, shard, reference, check_sizes=check_sizes)


@settings(phases=[Phase.explicit, Phase.generate], max_examples=12, deadline=None)
@given(kind=CHANGES, shard=st.integers(0, SHARDS - 1), where=st.floats(0, 1), after=st.integers(1, 3))
@example(kind="relabel", shard=1, where=0.5, after=2)
@example(kind="swap shards", shard=0, where=0.0, after=1)
def test_changed_bytes_after_a_mid_epoch_resume(tmp_path_factory, intact, reference, kind, shard, where, after):
    """Bytes changed between a checkpoint and its resume: the rest of the epoch is the converted samples not yet
    delivered, or withheld and counted, or a clear error; nothing delivered twice."""
    ref = reference
    root = str(tmp_path_factory.mktemp("resumed") / "ds")
    shutil.copytree(intact, root)
    first = shardkit.load(root, **{**KW, "num_workers": 0})
    head: list[str] = []
    try:
        for b, (_, _, keys) in enumerate(first):
            head += keys
            if b + 1 == after:
                state = first.state_dict()
                break
    finally:
        first.close()
    must_go = _change(root, kind, shard, where, ref)
    again = shardkit.load(root, **{**KW, "num_workers": 0, "check_sizes": False})
    rest: dict[str, tuple[torch.Tensor, int]] = {}
    try:
        again.load_state_dict(state)
        for images, labels, keys in again:
            for im, lab, key in zip(images, labels.tolist(), keys):
                assert key not in rest and key not in head, f"{key} delivered twice"
                rest[key] = (im, lab)
        skipped = again.stats.skipped
    except (StorageError, DataError) as exc:
        assert "train-" in str(exc), exc
        return
    finally:
        again.close()
    for key, (im, lab) in rest.items():
        assert torch.equal(im, ref[key][0]) and lab == ref[key][1], f"{key}: not the converted sample"
    assert len(head) + len(rest) + skipped == len(ref), "a sample neither delivered nor counted"
    assert not must_go & set(rest)


def test_changed_sample_with_workers_and_strict(tmp_path, intact, reference):
    root = str(tmp_path / "ds")
    shutil.copytree(intact, root)
    must_go = _change(root, "relabel", 1, 0.5, reference)
    _check(root, must_go, 1, reference, num_workers=2)
    with pytest.raises(DataError, match="changed since conversion"):
        _epoch(root, strict=True)


# --------------------------------------------------------------------------- the index cache, a sidecar's length


class _CountingOpener(ShardOpener):
    def __init__(self) -> None:
        super().__init__(StorageConfig())
        self.fetched: list[str] = []

    def fetch(self, url: str) -> bytes:
        self.fetched.append(os.path.basename(url))
        return super().fetch(url)


def test_a_hot_shards_index_stays_cached_while_others_come_and_go(tmp_path):
    root = str(tmp_path / "ds")
    write_dataset(root, num_samples=8 * 3, shard_size=3, size=(24, 20), distinct_images=2)
    add_index(root)
    m = load_manifest(root)
    opener = _CountingOpener()
    r = BlockReader(
        m.shard_urls(),
        [s.bytes for s in m.shards],
        shard_offsets(m.shard_sizes),
        opener,
        Counters(),
        num_classes=len(m.classes),
        sha256=[s.sha256 for s in m.shards],
    )
    assert r.KEEP_INDEXES < 7
    for other in range(1, 8):  # the hot shard 0 between each of seven others: more than KEEP_INDEXES of them
        r.read(np.array([0]))
        r.read(np.array([3 * other]))
    r.close()
    assert opener.fetched.count("train-000000.idx") == 1, opener.fetched


def test_a_sidecar_with_trailing_bytes_is_refused(tmp_path):
    root = str(tmp_path / "ds")
    write_dataset(root, num_samples=10, shard_size=5, size=(24, 20), distinct_images=2)
    add_index(root)
    m = load_manifest(root)
    path = index_url(m.shard_url(0))
    body = open(path, "rb").read()[:-4] + b"\0" * 8  # consistent: the CRC-32 recomputed over the longer body
    open(path, "wb").write(body + struct.pack("<I", zlib.crc32(body)))
    got, stats = _epoch(root)
    assert stats.shards_withheld == 1 and stats.skipped == 5 and len(got) == 5
    assert not set(got) & {f"k{i:06d}" for i in range(5)}
