"""What stays unchanged with target fields: exactly once and resume, progressive resolution,
mixtures (box labels and masks remapped by class name, ``"background"`` first), ``DevicePrefetcher``.

Each check compares with an independent run: the uninterrupted epoch, the scenes' own objects and the oracle of
``tests/loader/test_targets_oracle.py`` (:func:`tests.support.scene_crops.check_batch`), or the same source loaded
alone.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import shardkit
from shardkit.demo.scenes import CLASSES, write_scenes
from tests.support.scene_crops import SCENE, TARGETS, check_batch

FIELDS = TARGETS


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> str:
    return write_scenes(str(tmp_path_factory.mktemp("scenes") / "train"), 22, size=SCENE, shard_size=6)


def rows(batches) -> list[tuple[str, list[torch.Tensor]]]:
    """Each sample's key and targets (its own rows, padding cut), in order."""
    out = []
    for b in batches:
        for r, k in enumerate(b["key"]):
            n = int(b["box_count"][r])
            out.append((k, [b["boxes"][r, :n], b["box_labels"][r, :n], b["keypoints"][r, :n], b["mask"][r]]))
    return out


def same(a, b) -> bool:
    return [k for k, _ in a] == [k for k, _ in b] and all(
        all(torch.equal(u, v) for u, v in zip(x, y)) for (_, x), (_, y) in zip(a, b)
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch_gives_the_same_targets(scenes, num_workers):
    kw = dict(batch_size=4, size=32, seed=7, fields=FIELDS, num_workers=num_workers, min_visible=0.2)
    whole = list(shardkit.load(scenes, **kw))
    first = shardkit.load(scenes, **kw)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))
    del it
    again = shardkit.load(scenes, **kw)
    again.load_state_dict(state)
    rest = list(again)
    assert same(rows(head + rest), rows(whole))
    assert sorted(k for k, _ in rows(whole)) == [f"k{i:06d}" for i in range(22)], "exactly once"


def test_progressive_resolution_moves_targets_to_the_new_size(scenes):
    loader = shardkit.load(scenes, batch_size=5, size=40, seed=2, fields=TARGETS, num_workers=0, min_visible=0.0)
    list(loader)
    loader.set_epoch(1, size=24)
    n = 0
    for b in loader:
        assert b["image"].shape[-1] == 24 and b["mask"].shape[-2:] == (24, 24)
        assert (b["boxes"] <= 24).all()
        check_batch(b, 24, "train", 2, 0.0, epoch=1)
        n += len(b["key"])
    assert n == 22


def test_device_prefetcher_moves_every_target(scenes):
    from shardkit.loader.prefetch import DevicePrefetcher

    kw = dict(batch_size=6, size=32, seed=1, fields=FIELDS, num_workers=0)
    plain = rows(shardkit.load(scenes, **kw))
    moved = list(DevicePrefetcher(shardkit.load(scenes, **kw), device="cpu"))
    assert same(rows(moved), plain)


def renamed(root: str, dest: str, classes: list[str]) -> str:
    """A copy of a scenes dataset whose manifest names its classes ``classes`` (labels stay the same indices)."""
    import shutil

    shutil.copytree(root, dest)
    path = os.path.join(dest, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    m["classes"] = classes
    with open(path, "w") as f:
        json.dump(m, f)
    return dest


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mixture_remaps_box_labels_and_masks_by_class_name(tmp_path, num_workers):
    a = write_scenes(str(tmp_path / "a"), 10, size=SCENE, shard_size=5)
    b_classes = ["background", "zebra", "blue", "red", "green", "apple", "cyan"]  # other names, other positions
    b = renamed(
        write_scenes(str(tmp_path / "b0"), 10, size=SCENE, shard_size=5, seed=1), str(tmp_path / "b"), b_classes
    )
    kw = dict(batch_size=4, size=32, preset="letterbox", fields=FIELDS, min_visible=0.0, shuffle=False)
    alone = {0: dict(rows(shardkit.load(a, num_workers=0, **kw))), 1: dict(rows(shardkit.load(b, num_workers=0, **kw)))}
    mix = shardkit.load([shardkit.Source(a, repeat=1), shardkit.Source(b, repeat=1)], num_workers=num_workers, **kw)
    classes = list(mix.classes)
    assert classes[0] == "background" and sorted(classes[1:]) == sorted(set(CLASSES[1:]) | set(b_classes[1:]))
    table = {0: [classes.index(c) for c in CLASSES], 1: [classes.index(c) for c in b_classes]}
    seen = 0
    for key, (boxes, labels, kp, mask) in rows(mix):
        src, k = int(key.split("/")[0]), key.split("/")[1]
        a_boxes, a_labels, a_kp, a_mask = alone[src][k]
        assert torch.equal(boxes, a_boxes) and torch.equal(kp, a_kp)
        assert labels.tolist() == [table[src][c] for c in a_labels.tolist()], key
        lut = np.array(table[src] + [255] * (256 - len(table[src])), np.uint8)
        lut[255] = 255
        assert np.array_equal(mask.numpy(), lut[a_mask.numpy()]), key
        seen += 1
    assert seen == 20


@pytest.mark.parametrize("preset", ["train", "eval", "detect", "letterbox"])
def test_device_decode_moves_targets_with_the_crop_it_cuts(scenes, preset):
    """``decode_on="device"`` (here on the CPU): the worker moves the targets with the boxes the device cuts (full
    resolution); the oracle holds, and the targets equal the worker path's wherever both decode at full size."""
    kw = dict(batch_size=5, size=40, seed=4, preset=preset, fields=TARGETS, num_workers=0, min_visible=0.0)
    loader = shardkit.load(scenes, decode_on="device", **kw)
    given_n = returned = n = 0
    for b in loader:
        g, r = check_batch(b, 40, preset, 4, 0.0)
        given_n, returned, n = given_n + g, returned + r, n + len(b["key"])
    assert n == 22 and loader.stats.boxes_dropped == given_n - returned
    worker = dict(rows(shardkit.load(scenes, decoder="torchvision", **kw)))  # no DCT scaling: the same boxes
    for k, v in rows(shardkit.load(scenes, decode_on="device", **kw)):
        assert all(torch.equal(x, y) for x, y in zip(v, worker[k])), k


@pytest.mark.parametrize("member", ["k000003.mask.png", "k000003.jpg"])
def test_device_decode_drops_a_bad_sample_from_every_field(tmp_path, member):
    """A bad mask is skipped in the worker, an image the device cannot decode on the consumer (``rows_at``: every
    target field keeps to the decoded samples, ``M`` shrinks to the most kept)."""
    from shardkit.demo.scenes import scene
    from tests.support.scene_crops import crops_of, reference_boxes, spoil, truncated_scan

    root = write_scenes(str(tmp_path / "s"), 8, size=SCENE, shard_size=8)
    boxes, flips = crops_of(None, 32, "train", 5, list(range(8)))
    drops = [  # the sample spoiled: one that surely drops a box (its count must leave the stats with it)
        i
        for i in range(8)
        if any(share < 0.25 for _, _, share in reference_boxes(scene(0, i, SCENE).objects, boxes[i], flips[i], 32, 0.3))
    ]
    bad = drops[0]
    member = member.replace("3", str(bad))
    spoil(root, member, truncated_scan if member.endswith(".jpg") else lambda d: b"X" * len(d))
    loader = shardkit.load(
        root, decode_on="device", batch_size=4, size=32, seed=5, fields=TARGETS, num_workers=0, min_visible=0.3
    )
    keys = []
    given_n = returned = 0
    for b in loader:
        g, r = check_batch(b, 32, "train", 5, 0.3)
        given_n, returned = given_n + g, returned + r
        assert b["boxes"].shape[1] == int(b["box_count"].numpy().max(initial=0))
        keys += b["key"]
    assert sorted(keys) == [f"k{i:06d}" for i in range(8) if i != bad] and loader.stats.skipped == 1
    assert loader.stats.boxes_dropped == given_n - returned, "the boxes of a row the device dropped are not counted"


def test_flip_pairs_option_overrides_the_manifests(scenes):
    """``flip_pairs=()``: mirrored samples keep keypoint order, so "left" (index 0) lands on the right edge."""
    from tests.support.scene_crops import crops_of

    kw = dict(batch_size=11, size=32, seed=6, fields=TARGETS, num_workers=0, min_visible=0.0)
    flipped_rows = 0
    for swapped, kept in zip(shardkit.load(scenes, **kw), shardkit.load(scenes, flip_pairs=(), **kw)):
        idx = [int(k[1:]) for k in kept["key"]]
        _, flips = crops_of(None, 32, "train", 6, idx)
        for row, flip in enumerate(flips.tolist()):
            n = int(kept["box_count"][row])
            a, b = swapped["keypoints"][row, :n], kept["keypoints"][row, :n]
            assert torch.equal(a, b[:, [1, 0]] if flip else b)
            flipped_rows += flip and n > 0
    assert flipped_rows > 3
    with pytest.raises(ValueError, match="flip pair"):
        shardkit.load(scenes, fields=TARGETS, flip_pairs=[(0, 5)], num_workers=0)


def test_elastic_resume_on_other_ranks_keeps_every_target(tmp_path):
    """Saved on 2 ranks after 2 batches, resumed on 3: no sample twice, the epoch exactly covered, and every
    resumed sample's targets are the uninterrupted run's (its crop is a function of seed, epoch and sample)."""
    scenes = write_scenes(str(tmp_path / "s"), 24, size=SCENE, shard_size=4)  # 24: no rank padded, on 2 or 3
    kw = dict(batch_size=3, size=32, seed=9, fields=TARGETS, num_workers=0, min_visible=0.2)
    whole = dict(rows(b for r in range(2) for b in shardkit.load(scenes, rank=r, world_size=2, **kw)))
    head, states = [], []
    for r in range(2):
        loader = shardkit.load(scenes, rank=r, world_size=2, **kw)
        it = iter(loader)
        head += [next(it) for _ in range(2)]
        states.append(json.loads(json.dumps(loader.state_dict())))
        del it
    rest = []
    for r in range(3):
        loader = shardkit.load(scenes, rank=r, world_size=3, **kw)
        loader.load_state_dict(states[r % 2])
        rest += list(loader)
    got = rows(head + rest)
    keys = [k for k, _ in got]
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(whole)
    for k, v in got:
        assert all(torch.equal(x, y) for x, y in zip(v, whole[k])), k
