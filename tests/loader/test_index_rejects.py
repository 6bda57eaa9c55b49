"""A sample index wrong only at slice time, and reads that go back inside a shard.

* An index that passes every load-time check (CRC, shard size and sha256, unique keys, members
  back to back) but names the wrong key or size for a member is found when the block is sliced
  (the tar header in front of the member does not match). Those samples are withheld (their
  ``error`` set: skipped and counted, or ``DataError`` under ``strict``) and never read with the
  header walk; every other id of the block is delivered once, with the walk's bytes.
* A mixture source repeated in an epoch (``repeat=2``) makes a block whose ids of one shard go
  back (the second pass); the range arithmetic on the index's uint64 offsets must not wrap
  (``RuntimeWarning: overflow``) and the block must read back exactly as the walk reads it.

The reference is the header walk (a reader without the index) on the same shards.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

import shardkit
from shardkit.format.manifest import load_manifest
from shardkit.loader.config import StorageConfig
from shardkit.loader.read.reader import BlockReader
from shardkit.loader.stats import Counters
from shardkit.plan.epoch import shard_offsets
from shardkit.storage.opener import ShardOpener
from tests.support.batches import keyed_batches
from tests.support.data import add_index, write_dataset

KW = dict(batch_size=4, size=16, pin_memory=False, seed=4, with_keys=True, num_workers=0)
SHARD = 7  # samples per shard; shard 1 holds ids 7..13


def swap_keys(idx, i: int = 2, j: int = 5):
    """The keys of samples ``i`` and ``j`` swapped: same layout, unique keys; wrong for the tar headers."""
    keys = list(idx.keys)
    keys[i], keys[j] = keys[j], keys[i]
    return replace(idx, keys=tuple(keys))


def jpg_one_byte_short(idx, i: int = 2):
    """Sample ``i``'s image one byte shorter than it is: its padded end, hence the layout, unchanged."""
    c = idx.exts.index("jpg")
    assert int(idx.sizes[i, c]) % 512 != 1, "the size must stay inside its last 512-byte block"
    sizes = idx.sizes.copy()
    sizes[i, c] -= 1
    return replace(idx, sizes=sizes)


@pytest.fixture(params=["swapped keys", "an image one byte short"])
def trio(tmp_path, request):
    """``(walk_root, wrong_root, dataset, wrong ids)``: 30 samples in shards of 7, without an index, and with indexes whose
    shard 1 is wrong only at slice time: the keys of its samples 2 and 5 (ids 9 and 12) swapped, or the
    image of its sample 2 (id 9) one byte short."""
    ds = write_dataset(str(tmp_path / "walk"), num_samples=30, shard_size=SHARD, size=(24, 20), distinct_images=8)
    wrong = str(tmp_path / "wrong")
    shutil.copytree(ds.url, wrong)
    swapped = request.param == "swapped keys"
    add_index(wrong, swap_keys if swapped else jpg_one_byte_short)
    return ds.url, wrong, ds, {9, 12} if swapped else {9}


def reader(root: str, *, indexed: bool) -> BlockReader:
    m = load_manifest(root)
    return BlockReader(
        m.shard_urls(),
        [s.bytes for s in m.shards],
        shard_offsets(m.shard_sizes),
        ShardOpener(StorageConfig()),
        Counters(),
        num_classes=len(m.classes),
        sha256=[s.sha256 for s in m.shards] if indexed else None,
    )


def named(samples):
    """The samples with their shard named by file name only (the same shards in two folders)."""
    return [replace(s, shard=os.path.basename(s.shard)) for s in samples]


#: blocks as the plan makes them: across shards (the wrong one in the middle), holes of consumed samples, a resumed tail
BLOCKS = [np.arange(3, 20), np.array([8, 9, 10, 12, 13]), np.array([11, 12, 13, 14, 15]), np.arange(7, 14)]


@pytest.mark.parametrize("pieces", ["one range per shard", "one range per sample"])
@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_index_wrong_at_slice_time_withholds_those_samples_and_never_walks(trio, block, pieces):
    walk_root, wrong_root, _, wrong_ids = trio
    gids = BLOCKS[block]
    walk, idx = reader(walk_root, indexed=False), reader(wrong_root, indexed=True)
    if pieces == "one range per sample":
        idx.MAX_RANGE_BYTES, idx.MAX_HOLE_BYTES = 1, 0
    for _ in range(2):  # and again: the shard is never read with the walk later either
        got, want = idx.read(gids), walk.read(gids)
        assert [s.gid for s in got] == gids.tolist(), "not every id of the block exactly once, in order"
        for g, w in zip(named(got), named(want)):
            if g.gid in wrong_ids:
                assert "changed since conversion" in (g.error or "") and g.jpeg is None, g
            else:
                assert g == w and g.error is None, "not the walk's sample"
        assert idx.shards_withheld == 0 and walk.shards_withheld == 0
    idx.close()
    walk.close()


@pytest.mark.parametrize("shuffle", [True, False])
def test_loader_with_an_index_wrong_at_slice_time_skips_and_counts_those_samples(trio, shuffle):
    walk_root, wrong_root, ds, wrong_ids = trio
    walker, want = keyed_batches(walk_root, **KW, shuffle=shuffle, shuffle_buffer=9)
    loader, got = keyed_batches(wrong_root, **KW, shuffle=shuffle, shuffle_buffer=9)
    keys = [k for _, ks in got for k in ks]
    wrong_keys = {ds.keys[i] for i in wrong_ids}
    assert sorted(keys) == sorted(set(ds.keys) - wrong_keys) and len(set(keys)) == len(keys)
    assert loader.stats.skipped == len(wrong_ids) and walker.stats.skipped == 0
    with pytest.raises(shardkit.DataError, match="changed since conversion"):
        keyed_batches(wrong_root, **KW, shuffle=shuffle, shuffle_buffer=9, strict=True)


# --------------------------------------------------------------------------- going back inside a shard


@pytest.fixture()
def indexed_pair(tmp_path):
    ds = write_dataset(str(tmp_path / "walk"), num_samples=30, shard_size=SHARD, size=(24, 20))
    indexed = str(tmp_path / "indexed")
    shutil.copytree(ds.url, indexed)
    add_index(indexed)
    return ds.url, indexed


@pytest.mark.parametrize("gids", [[3, 4, 5, 6, 2, 3, 4], [5, 6, 0, 1, 9, 10, 7], [4, 4], [6, 5, 4, 3, 2, 1, 0]])
@pytest.mark.parametrize("hole", [0, 1 << 20])
def test_ids_going_back_in_a_shard_read_without_overflow(indexed_pair, gids, hole):
    walk_root, indexed_root = indexed_pair
    walk, idx = reader(walk_root, indexed=False), reader(indexed_root, indexed=True)
    idx.MAX_HOLE_BYTES = hole
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = idx.read(np.array(gids))
    assert named(got) == named(walk.read(np.array(gids))) and [s.gid for s in got] == gids
    assert idx.shards_withheld == 0, "a read going back must not be mistaken for a wrong index"
    idx.close()
    walk.close()


def test_mixture_with_repeat_reads_without_overflow_warnings(tmp_path):
    """``repeat=2`` reads without ``RuntimeWarning: overflow in scalar subtract`` from the reader."""
    roots = []
    for name, n in (("a", 6), ("b", 12)):  # a: one shard, so its two passes meet inside a block of that shard
        ds = write_dataset(str(tmp_path / name), num_samples=n, shard_size=6, size=(24, 20), distinct_images=3)
        add_index(ds.url)
        roots.append(ds.url)
    sources = [shardkit.Source(roots[0], repeat=2), shardkit.Source(roots[1], repeat=1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        loader = shardkit.load(sources, **{**KW, "shuffle_buffer": 40})
        keys = [k for _, _, ks in loader for k in ks]
    assert loader.stats.shards_withheld == 0
    count = Counter(keys)
    assert len(keys) == 2 * 6 + 12 and {count[k] for k in count if k.startswith("0/")} == {2}
    assert {count[k] for k in count if k.startswith("1/")} == {1}
