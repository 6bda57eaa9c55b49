"""Masks and instance maps travel from the workers in the batch's shared slot, beside the images.

A worker decodes a batch's images and writes its ``mask`` (uint8) and ``instances`` (int16) planes into one slot of
the transport's ring; the main process views all three in that slot (no new shared segment per batch, which cost it
a fifth of a core at 512 px). The oracle is the in-process loader (``num_workers=0``, no transport): with two
workers, every sample's mask and instance map are the same bytes, batches with a skipped sample included (fewer
rows than the slot was cut for), and while batches are consumed one at a time (slots free) the planes share the
images' memory and are not torch shared memory (which is what a plane pickled on its own would arrive in).
"""

from __future__ import annotations

import pytest
import torch

import shardkit
from shardkit.demo.scenes import write_scenes
from tests.support.scene_crops import SCENE, spoil, truncated_scan

FIELDS = ("image", "mask", "instances", "boxes", "box_count", "key")
N = 14


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> str:
    root = write_scenes(str(tmp_path_factory.mktemp("planes") / "train"), N, size=SCENE, shard_size=7, instances=True)
    spoil(root, "k000003.jpg", truncated_scan)  # one sample skipped: a batch with fewer rows than its slot
    return root


def by_key(batches: list[dict]) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    return {
        k: (b["image"][r].clone(), b["mask"][r].clone(), b["instances"][r].clone())
        for b in batches
        for r, k in enumerate(b["key"])
    }


@pytest.mark.parametrize("preset", ["train", "detect"])
def test_planes_travel_in_the_slot_and_equal_the_in_process_loader(scenes, preset):
    kw = dict(batch_size=4, size=32, seed=11, preset=preset, fields=FIELDS, min_visible=0.0)
    want = by_key(list(shardkit.load(scenes, num_workers=0, **kw)))
    loader = shardkit.load(scenes, num_workers=2, **kw)
    got: dict = {}
    slotted = 0
    try:
        for b in loader:  # one batch at a time: its slot comes back before the worker needs it again
            image, mask, inst = b["image"], b["mask"], b["instances"]
            assert mask.dtype == torch.uint8 and inst.dtype == torch.int16
            ptr = image.untyped_storage().data_ptr()
            if mask.untyped_storage().data_ptr() == ptr:
                assert inst.untyped_storage().data_ptr() == ptr, "the instance map in the same slot as its mask"
                assert not mask.is_shared() and not inst.is_shared(), "viewed in the slot, not a new shared segment"
                slotted += 1
            got.update(by_key([b]))
            del b, image, mask, inst
    finally:
        loader.close()
    assert slotted > 0, "no batch travelled by its slot"
    assert sorted(got) == sorted(want) and len(want) == N - 1
    for k, (image, mask, inst) in want.items():
        assert torch.equal(got[k][0], image), k
        assert torch.equal(got[k][1], mask), k
        assert torch.equal(got[k][2], inst), k


def test_a_batch_slot_holds_the_planes(scenes):
    """The ring's slots are cut for images plus planes (else every batch would go to new memory)."""
    from shardkit.loader.decode.strategies import WorkerDecode, strategy_for

    cfg = shardkit.load(scenes, num_workers=0, fields=FIELDS, size=32).config
    strategy = strategy_for(cfg)
    assert isinstance(strategy, WorkerDecode)
    assert strategy.slot_bytes(4, 32) == 4 * 32 * 32 * (3 + 1 + 2)
    plain = strategy_for(shardkit.load(scenes, num_workers=0, size=32, fields=("image", "boxes")).config)
    assert plain.slot_bytes(4, 32) == 4 * 32 * 32 * 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_instance_map_alone_at_odd_sizes(scenes, num_workers):
    """An int16 plane right after the images: 3 n S^2 bytes is odd for odd n and S, so each part of a slot starts
    at an aligned offset (a batch of 3 at 33 px, and of 2 after the skipped sample)."""
    kw = dict(batch_size=3, size=33, seed=2, preset="detect", fields=("image", "instances", "boxes", "key"))
    want = {
        k: b["instances"][r].clone() for b in shardkit.load(scenes, num_workers=0, **kw) for r, k in enumerate(b["key"])
    }
    loader = shardkit.load(scenes, num_workers=num_workers, **kw)
    try:
        got = {k: b["instances"][r].clone() for b in loader for r, k in enumerate(b["key"])}
    finally:
        loader.close()
    assert sorted(got) == sorted(want) and len(got) == N - 1
    assert all(torch.equal(got[k], want[k]) for k in want)
