"""``shardkit.open`` against the streaming loader: for every key, ``ds.get(key)`` equals the sample
``shardkit.load`` delivers at stored size with no augmentation, field by field.

The loader delivers stored size through ``preset="letterbox"`` with ``size`` the longer stored side: the scale is
exactly 1, so the image is the stored image centred in a ``size`` x ``size`` row, ``floor((size - w) / 2)`` columns
and ``floor((size - h) / 2)`` rows of padding before it. ``open()`` and the loader decode the same bytes with the
same decoder (``"auto"`` or ``"pil"``, ``fast_decode=False``), so pixels are compared exactly. Targets move by that whole-
pixel offset only (no resampling, no clipping, no dropped box), so boxes and keypoints (float32 whole numbers) are
compared exactly after subtracting it, and masks and instance maps (nearest resampling with the identity map)
exactly inside the window; the padding holds 0 in the image, 255 in a mask, -1 in an instance map.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.demo.scenes import write_scenes
from shardkit.ops.upgrade import add_checksums
from tests.support.data import write_fields_dataset

FIELDS = ["image", "label", "target", "text"]
MULTI = ["image", "labels", "text"]
ROW_SIZE = (40, 30)  # the stored size of write_fields_dataset's images
DECODERS = ["auto", "pil"]  # "auto": the default (simplejpeg where installed)


def stream(url: str, side: int, batch_size: int, decoder: str, num_workers: int = 0) -> dict[str, dict[str, Any]]:
    """One epoch of ``url`` through the loader at stored size (letterbox at scale 1), each sample's fields by key."""
    fields = tuple(f for f in shardkit.open(url).manifest.fields if f != "image")
    want = ("image", "key", "meta", *fields) + (("box_labels", "box_count") if "boxes" in fields else ())
    loader = shardkit.load(
        url,
        preset="letterbox",
        size=side,
        decoder=decoder,
        fast_decode=False,
        shuffle=False,
        batch_size=batch_size,
        num_workers=num_workers,
        fields=want,
        strict=True,
    )
    out: dict[str, dict[str, Any]] = {}
    for batch in loader:
        for r, key in enumerate(batch["key"]):
            assert key not in out, f"{key} streamed twice"
            out[key] = {name: batch[name][r] for name in want}
    return out


def assert_equal_items(url: str, side: int, decoder: str, streamed: dict[str, dict[str, Any]]) -> None:
    """``get(key)`` equals the streamed sample of every key (see the module docstring for the comparison)."""
    ds = shardkit.open(url, decoder=decoder)
    assert sorted(streamed) == sorted(ds.keys())
    for key, row in streamed.items():
        item = ds.get(key)
        assert item["key"] == key
        h, w = item["image"].shape[1:]
        left, top = (side - w) // 2, (side - h) // 2
        window = (slice(top, top + h), slice(left, left + w))
        img = row["image"]
        assert torch.equal(img[:, window[0], window[1]], item["image"]), key
        outside = torch.ones(side, side, dtype=torch.bool)
        outside[window] = False
        assert not img[:, outside].any(), key
        assert row["meta"] == item["meta"], key
        if "label" in item:
            assert int(row["label"]) == item["label"], key
        if "labels" in item:
            assert row["labels"].dtype == item["labels"].dtype and torch.equal(row["labels"], item["labels"]), key
        if "target" in item:
            assert row["target"].dtype == torch.float32 and torch.equal(row["target"], item["target"]), key
        if "text" in item:
            assert row["text"] == item["text"], key
        if "boxes" in item:
            n = int(row["box_count"])
            shift = torch.tensor([left, top, left, top], dtype=torch.float32)
            assert torch.equal(row["boxes"][:n] - shift, item["boxes"]), key
            assert torch.equal(row["box_labels"][:n], item["box_labels"]), key
            assert (row["box_labels"][n:] == -1).all() and not row["boxes"][n:].any(), key
        if "keypoints" in item:
            n = int(row["box_count"])
            kp = row["keypoints"][:n].clone()
            kp[..., 0] -= left
            kp[..., 1] -= top
            assert torch.equal(kp, item["keypoints"]), key
        for plane, pad in (("mask", 255), ("instances", -1)):
            if plane in item:
                assert row[plane].dtype == item[plane].dtype, (key, plane)
                assert torch.equal(row[plane][window], item[plane]), (key, plane)
                assert (row[plane][outside] == pad).all(), (key, plane)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, max_examples=12, deadline=None)
@given(
    fields=st.sampled_from([FIELDS, MULTI]),
    n=st.integers(1, 24),
    shard_size=st.integers(1, 9),
    batch_size=st.integers(1, 8),
    decoder=st.sampled_from(DECODERS),
)
@example(fields=FIELDS, n=17, shard_size=4, batch_size=5, decoder="auto")
@example(fields=MULTI, n=17, shard_size=4, batch_size=5, decoder="pil")
@example(fields=FIELDS, n=1, shard_size=1, batch_size=1, decoder="auto")
def test_row_fields_equal_the_stream(fields, n, shard_size, batch_size, decoder):
    with tempfile.TemporaryDirectory() as tmp:
        url = write_fields_dataset(os.path.join(tmp, "train"), fields, n=n, shard_size=shard_size)
        assert add_checksums(url).complete
        side = max(ROW_SIZE)
        assert_equal_items(url, side, decoder, stream(url, side, batch_size, decoder))


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, max_examples=12, deadline=None)
@given(
    n=st.integers(1, 14),
    shard_size=st.integers(1, 6),
    width=st.integers(24, 64),
    height=st.integers(24, 64),
    batch_size=st.integers(1, 6),
    decoder=st.sampled_from(DECODERS),
)
@example(
    n=9, shard_size=4, width=48, height=37, batch_size=4, decoder="auto"
)  # odd padding: floor puts the extra row after
@example(n=5, shard_size=2, width=31, height=56, batch_size=3, decoder="pil")  # portrait: the padding is left and right
@example(n=4, shard_size=4, width=40, height=40, batch_size=4, decoder="auto")  # square: no padding
def test_targets_equal_the_stream(n, shard_size, width, height, batch_size, decoder):
    with tempfile.TemporaryDirectory() as tmp:
        url = write_scenes(
            os.path.join(tmp, "train"), n, size=(width, height), shard_size=shard_size, instances=True, max_objects=4
        )
        assert add_checksums(url).complete
        side = max(width, height)
        assert_equal_items(url, side, decoder, stream(url, side, batch_size, decoder))


def test_a_coco_conversion_with_crowd_regions_equals_the_stream_from_worker_processes(tmp_path):
    """Crowd regions are no boxes in either, their mask pixels 255 and their instance pixels -1 in both."""
    import json

    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.options import ScanConfig
    from shardkit.demo.sources import write_source

    src, dest = str(tmp_path / "src"), str(tmp_path / "ds")
    write_source(src, "coco", images=10, size=(56, 42))
    with open(os.path.join(src, "annotations.json"), encoding="utf-8") as f:
        doc = json.load(f)
    for a in doc["annotations"][::3]:
        a["iscrowd"] = 1
    with open(os.path.join(src, "annotations.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    opts = ConvertConfig(shard_size=3, source=ScanConfig(masks=True, instances=True))
    convert(f"coco:{os.path.join(src, 'annotations.json')}", dest, opts, workers=1, quiet=True)
    url = os.path.join(dest, "train")
    ds = shardkit.open(url)
    assert {"boxes", "mask", "instances"} <= set(ds.manifest.fields)
    crowded = [int(ds.raw(j).objects.iscrowd.sum()) for j in range(len(ds))]  # type: ignore[union-attr]
    assert sum(crowded) == len(doc["annotations"][::3]) and 0 in crowded
    assert_equal_items(url, 56, "auto", stream(url, 56, 4, "auto", num_workers=2))
