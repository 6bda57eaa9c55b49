"""``shardkit.open`` over living splits: the items are the samples that are in, with their changed labels.

The truth is :mod:`tests.support.living`'s (each generation's keys and labels, every image's colour its id); the
streaming loader is the second reference: on a corrected split and on a selection, ``get(key)`` equals the sample
the loader delivers at stored size (``preset="letterbox"`` at scale 1, the same decoder), field by field.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import shardkit
from shardkit.format.snapshot.selection import write_selection
from tests.support.living import SIZE, Living, append, convert_split, correct, select
from tests.support.source_reference import image_id


@pytest.fixture(scope="module")
def living(tmp_path_factory) -> Living:
    """Generation 0: 20 converted images; 1: 8 appended; 2: 3 removed and 3 relabelled."""
    lv = convert_split(str(tmp_path_factory.mktemp("open")), 20, shard_size=6)
    append(lv, list(range(20, 28)), shard_size=3)
    keys = sorted(lv.latest)
    correct(lv, [keys[0], keys[9], keys[24]], {k: (lv.latest[k] + 1) % 3 for k in (keys[3], keys[12], keys[26])})
    return lv


@pytest.fixture(scope="module")
def selection(living, tmp_path_factory) -> tuple[str, set[str]]:
    """Every third stored key (a removed one among them: the corrections win)."""
    chosen = set(living.order[::3])
    return select(living, chosen, str(tmp_path_factory.mktemp("sel"))), chosen & set(living.latest)


def _colour_id(img: torch.Tensor) -> "int | None":
    return image_id(tuple(float(v) for v in img.float().mean((1, 2))))


@pytest.mark.parametrize("generation", [0, 1, 2, None])
def test_items_are_the_kept_samples_with_their_labels(living, generation):
    truth = living.generations[-1 if generation is None else generation]
    ds = shardkit.open(living.url, generation=generation)
    want = [k for k in living.order if k in truth]
    assert len(ds) == len(truth) and ds.keys() == want
    for i, key in enumerate(want):
        item = ds[i]
        assert item["key"] == key and item["label"] == truth[key], key
        assert item["meta"]["class"] == living.classes[truth[key]], f"{key}: the metadata names the old class"
        assert _colour_id(item["image"]) == living.ids[key], key
        assert ds.get(key)["key"] == key and ds.index_of(key) == i


def test_a_removed_key_is_a_key_error_saying_so(living, selection):
    removed = sorted(set(living.generations[1]) - set(living.latest))
    ds = shardkit.open(living.url)
    for key in removed:
        with pytest.raises(KeyError, match="removed .* by a correction"):
            ds.get(key)
    assert shardkit.open(living.url, generation=1).get(removed[0])["key"] == removed[0]  # before the correction
    sel = shardkit.open(selection[0])
    left_out = next(k for k in living.latest if k not in selection[1])
    with pytest.raises(KeyError, match="not in the selection"):
        sel.get(left_out)
    gone = next(k for k in living.order[::3] if k in removed)
    with pytest.raises(KeyError, match="removed .* by a correction"):
        sel.get(gone)
    with pytest.raises(KeyError, match="no sample with key"):
        ds.get("nope")


def test_a_selection_reads_its_samples(living, selection):
    url, chosen = selection
    ds = shardkit.open(url)
    want = [k for k in living.order if k in chosen]
    assert len(ds) == len(chosen) and ds.keys() == want
    assert [ds[i]["label"] for i in range(len(ds))] == [living.latest[k] for k in want]
    assert [_colour_id(ds[i]["image"]) for i in range(len(ds))] == [living.ids[k] for k in want]


def _stream(url: str) -> dict[str, dict]:
    side = max(SIZE)
    loader = shardkit.load(
        url,
        preset="letterbox",
        size=side,
        decoder="pil",
        fast_decode=False,
        shuffle=False,
        batch_size=4,
        num_workers=0,
        fields=("image", "label", "key", "meta"),
        strict=True,
    )
    out: dict[str, dict] = {}
    for b in loader:
        for r, key in enumerate(b["key"]):
            assert key not in out
            out[key] = {"image": b["image"][r], "label": int(b["label"][r]), "meta": b["meta"][r]}
    return out


@pytest.mark.parametrize("which", ["corrected", "selection"])
def test_items_equal_the_streamed_samples_field_by_field(living, selection, which):
    url = living.url if which == "corrected" else selection[0]
    streamed = _stream(url)
    ds = shardkit.open(url, decoder="pil")
    assert sorted(streamed) == sorted(ds.keys())
    side = max(SIZE)
    for key, row in streamed.items():
        item = ds.get(key)
        h, w = item["image"].shape[1:]
        top, left = (side - h) // 2, (side - w) // 2
        assert torch.equal(row["image"][:, top : top + h, left : left + w], item["image"]), key
        assert row["label"] == item["label"] and row["meta"] == item["meta"], key


def test_one_ranged_request_per_item_of_a_selection_on_s3(living, s3, s3_endpoint):
    import s3fs

    from tests.support.faults import FaultProxy

    opts, bucket = s3
    fs = s3fs.S3FileSystem(**opts)
    fs.put(living.url, f"{bucket}/ds/train", recursive=True)
    parent = f"s3://{bucket}/ds/train"
    chosen = set(living.order[1::4]) & set(living.latest)
    stored = [k for k in living.order]
    write_selection(parent, np.array([k in chosen for k in stored]), f"s3://{bucket}/sel", **opts)
    with FaultProxy(s3_endpoint) as proxy:
        via = proxy.storage_options(opts)
        ds = shardkit.open(f"s3://{bucket}/sel", storage_options=via)
        assert len(ds) == len(chosen)
        for i in range(len(ds)):
            shard = int(np.searchsorted(ds.offsets, i, side="right") - 1)
            pos = int(ds.snapshot.subset.stored(shard, np.array([i - int(ds.offsets[shard])]))[0])
            known = shard in ds._indexes
            proxy.log.clear()
            key = ds[i]["key"]
            assert key in chosen and stored.index(key) == sum(ds.manifest.shard_sizes[:shard]) + pos
            tar = [r for r in proxy.log if r.method == "GET" and r.path.endswith(".tar")]
            lo, hi = ds._indexes[shard].byte_range(pos, pos + 1)
            assert [r.range for r in tar] == [f"bytes={lo}-{hi - 1}"], proxy.log
            assert len([r for r in proxy.log if r.path.endswith(".idx")]) == (0 if known else 1)
    assert os.path.basename(ds.snapshot.url) == "sel"
