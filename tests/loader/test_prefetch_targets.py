"""``DevicePrefetcher(transform=GpuAugment)`` over dict batches with targets: the augmentation moves the boxes,
masks and keypoints with the pixels (it used to get the image only, so targets silently stayed put); a transform
that cannot move targets is refused in one line."""

from __future__ import annotations

import pytest
import torch

import shardkit
from shardkit.augment import GpuAugment, HorizontalFlip
from shardkit.demo.scenes import write_scenes

FIELDS = ("image", "boxes", "box_labels", "box_count", "mask", "keypoints")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_scenes(str(tmp_path_factory.mktemp("scenes")), 12, size=(80, 60), shard_size=6)


def _loader(url):
    return shardkit.load(url, fields=FIELDS, batch_size=4, num_workers=0, size=48, preset="letterbox", shuffle=False)


def test_the_prefetchers_augmentation_moves_every_target_with_the_pixels(scenes):
    plain = list(_loader(scenes))
    loader = _loader(scenes)
    aug = GpuAugment([HorizontalFlip(p=1.0)], flip_pairs=loader.flip_pairs)
    flipped = list(shardkit.DevicePrefetcher(loader, device="cpu", transform=aug))
    assert len(plain) == len(flipped) == 3
    for a, b in zip(plain, flipped):
        live = a["box_labels"] >= 0
        want = a["boxes"].clone()
        want[..., 0], want[..., 2] = 48 - a["boxes"][..., 2], 48 - a["boxes"][..., 0]  # mirrored about the width
        assert torch.equal(b["box_labels"], a["box_labels"]) and torch.equal(b["box_count"], a["box_count"])
        assert torch.allclose(b["boxes"][live], want[live], atol=1e-4)
        assert torch.equal(b["mask"], a["mask"].flip(-1))
        # left and right keypoints swap slots under the flip: "left" stays on the left edge of its box
        assert torch.allclose(b["keypoints"][..., 0, 0][live], b["boxes"][..., 0][live], atol=1e-4)
        assert torch.allclose(b["keypoints"][..., 1, 0][live], b["boxes"][..., 2][live], atol=1e-4)


def test_a_transform_that_cannot_move_targets_is_refused(scenes):
    with pytest.raises(ValueError, match="would move only the image"):
        next(iter(shardkit.DevicePrefetcher(_loader(scenes), device="cpu", transform=lambda x: x)))


def test_keypoints_without_flip_pairs_are_refused(scenes):
    """A flip would mirror the keypoints without swapping left and right: GpuAugment needs the pairs."""
    aug = GpuAugment([HorizontalFlip(p=1.0)])
    with pytest.raises(ValueError, match="keypoints need flip_pairs"):
        aug(next(iter(_loader(scenes))))
