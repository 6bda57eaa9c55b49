"""Crowd regions (COCO ``iscrowd``, VOC ``difficult``) are stored but never yielded as boxes to detect
(torchvision's COCO reference drops them from training targets as well); they are counted with the dropped boxes,
and every other object of the sample is still yielded, in order."""

from __future__ import annotations

import numpy as np
import torch

import shardkit
from shardkit.demo.scenes import CLASSES, scene, scene_jpeg
from shardkit.format import EncodedSample
from shardkit.format.fields import Objects
from tests.support.data import write_samples


def test_crowd_regions_are_not_yielded_as_boxes(tmp_path):
    root, samples, want = str(tmp_path), [], {}
    for i in range(6):
        s = scene(7, i, (64, 48), max_objects=4)
        o = s.objects
        crowd = np.arange(len(o)) % 2 == 1  # every second object is a crowd region
        samples.append(
            EncodedSample(f"k{i:06d}", scene_jpeg(s), None, {"i": i}, objects=Objects(o.boxes, o.labels, crowd))
        )
        want[i] = o.labels[~crowd].tolist()
    write_samples(root, [samples], CLASSES, fields=["image", "boxes"])
    loader = shardkit.load(
        root,
        fields=("meta", "boxes", "box_labels", "box_count"),
        batch_size=3,
        num_workers=0,
        size=64,
        preset="letterbox",
        shuffle=False,
    )
    seen, crowds = 0, sum(len(scene(7, i, (64, 48), max_objects=4).objects) // 2 for i in range(6))
    for b in loader:
        for j, meta in enumerate(b["meta"]):
            labels = b["box_labels"][j]
            assert labels[labels >= 0].tolist() == want[meta["i"]]
            assert int(b["box_count"][j]) == len(want[meta["i"]])
            seen += 1
    assert seen == 6 and torch.is_tensor(b["boxes"])
    assert crowds > 0 and loader.stats.boxes_dropped == crowds  # every stored box is yielded or counted
