"""The batch field table (:mod:`shardkit.format.fieldtable`) is the only description of a batch's fields.

Every name a batch type, the rows it carries, the targets, the batch slot or the delivered dict knows is a table
entry, and agrees with the entry (stored member, dtype, planes' bytes, the moved targets' attribute); and an entry
added to the table (here a dummy one, by monkeypatch) is accepted by ``fields=``, built, carried and delivered
with nothing else changed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import shardkit
import shardkit.loader.fields as loader_fields
from shardkit.format import fieldtable
from shardkit.format.fields import MEMBER_OF, STORED_FIELDS
from shardkit.format.fieldtable import Batching, Delivery, Field, Geometry, Home, Layout
from shardkit.loader.decode.strategies import _HOMES
from shardkit.loader.rows import PLANES, ROW_CODECS, FieldRows
from shardkit.loader.targetrows import PIXEL_TARGETS, PLANE_BYTES
from shardkit.ops.bench import bench_fields
from shardkit.targets.batchdict import TARGET_FIELDS, targets_of, with_targets
from shardkit.targets.geometry import Targets
from tests.support.data import write_fields_dataset

TABLE = fieldtable.names()


def test_every_name_the_loader_knows_is_a_table_entry():
    assert loader_fields.FIELD_KINDS == TABLE and len(set(TABLE)) == len(TABLE)
    for derived in (
        loader_fields.TARGET_KINDS,
        loader_fields.ROW_FIELDS,
        loader_fields.ALWAYS,
        loader_fields.OPT_IN,
        TARGET_FIELDS,
        PLANES,
        PIXEL_TARGETS,
        PLANE_BYTES,
    ):
        assert set(derived) <= set(TABLE), derived
    assert set(TARGET_FIELDS) == {f.name for f in fieldtable.FIELDS if f.is_target}
    # the user's documentation of fields= lists exactly the table, in its order
    lines = (loader_fields.__doc__ or "").splitlines()
    rules = [n for n, line in enumerate(lines) if line.startswith("=====")]
    documented = [line.split()[0].strip("`") for line in lines[rules[1] + 1 : rules[2]]]
    assert documented == list(TABLE)


def test_each_entry_agrees_with_the_code_that_follows_it():
    targets = {f.name for f in dataclasses.fields(Targets)}
    for f in fieldtable.FIELDS:
        if f.stored is not None:
            assert f.stored in STORED_FIELDS and f.member == MEMBER_OF[f.stored], f.name
        assert f.home in _HOMES or f.home is Home.ROWS, f.name  # the delivered dict can find it
        assert (f.delivery is Delivery.LIST) == (f.batching is Batching.LIST), f.name
        if f.home is Home.ROWS and not f.is_target:
            assert f.codec in ROW_CODECS, f.name  # the worker can build it
        if f.is_target:
            assert f.attr in targets, f.name  # the moved objects carry it
        if f.layout is Layout.PLANE and f.home is Home.ROWS:
            assert f.plane_bytes == torch.empty(0, dtype=getattr(torch, f.dtype)).element_size(), f.name
    with pytest.raises(TypeError, match="not a batch field"):
        FieldRows(colour=torch.zeros(1))


def test_box_crowd_is_asked_for_by_name_only():
    class Detection:
        fields = ("image", "boxes")
        classes = ["a"]

    assert "box_crowd" in loader_fields.available(Detection())
    assert "box_crowd" not in bench_fields(Detection())  # a default selection never changes what boxes holds


def test_box_crowd_round_trips_through_targets():
    labels = torch.tensor([[0, 1, -1]])
    batch = {
        "boxes": torch.zeros(1, 3, 4),
        "box_labels": labels,
        "box_count": torch.tensor([2]),
        "box_crowd": torch.tensor([[False, True, False]]),
    }
    t = targets_of(batch)
    assert t is not None and torch.equal(t.crowd, batch["box_crowd"])
    flipped = dataclasses.replace(t, crowd=torch.tensor([[True, False, False]]))
    assert torch.equal(with_targets(batch, flipped)["box_crowd"], flipped.crowd)
    with pytest.raises(ValueError, match="box_crowd"):
        targets_of({"box_crowd": batch["box_crowd"], "mask": torch.zeros(1, 4, 4, dtype=torch.uint8)})


def test_a_new_table_entry_flows_through_to_the_delivered_dict(tmp_path, monkeypatch):
    """A row field added to the table alone: a copy of each sample's key, built by the ``list`` codec."""
    root = write_fields_dataset(str(tmp_path / "d"), ["image", "label"], n=9, shard_size=4)
    dummy = Field(
        "key_again", None, None, "str", "[B]", Layout.ROW, Geometry.NONE, Batching.LIST, Delivery.LIST, Home.ROWS,
        codec="list", attr="key",
    )  # fmt: skip
    monkeypatch.setattr(fieldtable, "FIELDS", (*fieldtable.FIELDS, dummy))
    with pytest.raises(ValueError, match="valid fields: .*key_again"):
        shardkit.load(root, fields=("image", "nonesuch"), num_workers=0)
    loader = shardkit.load(root, fields=("key_again", "image", "key"), batch_size=4, num_workers=0, size=32)
    seen = []
    for b in loader:
        assert list(b) == ["key_again", "image", "key"]
        assert b["key_again"] == b["key"]
        seen += b["key"]
    loader.close()
    assert sorted(seen) == [f"k{i:06d}" for i in range(9)]
