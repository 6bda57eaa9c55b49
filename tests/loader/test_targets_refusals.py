"""Misuse that would silently lose targets is refused in one line: flip pairs that name a keypoint twice (a flip
would copy one keypoint over another), and target fields without the boxes that say which rows are objects (a
geometric step would empty them)."""

from __future__ import annotations

import pytest
import torch

import shardkit
from shardkit.augment import GpuAugment, HorizontalFlip
from shardkit.demo.scenes import write_scenes
from shardkit.targets import targets_of


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    return write_scenes(str(tmp_path_factory.mktemp("scenes")), 4, size=(40, 30), shard_size=4)


def test_flip_pairs_naming_a_keypoint_twice_are_refused(scenes):
    # the scenes have 2 keypoints; (0, 1) then (1, 0) names both twice
    with pytest.raises(ValueError, match="name keypoint 0 twice|name keypoint 1 twice"):
        shardkit.load(scenes, fields=("image", "boxes", "box_labels", "keypoints"), flip_pairs=[(0, 1), (1, 0)])


@pytest.mark.parametrize("field", ["keypoints", "box_labels", "box_count"])
def test_target_fields_without_boxes_are_refused_not_emptied(field):
    batch = {"image": torch.zeros((2, 3, 8, 8), dtype=torch.uint8), field: torch.zeros((2, 1, 1, 3))}
    with pytest.raises(ValueError, match=f"a batch with '{field}' needs 'boxes'"):
        targets_of(batch)
    with pytest.raises(ValueError, match="needs 'boxes'"):
        GpuAugment([HorizontalFlip(p=1.0)], flip_pairs=())(batch)
