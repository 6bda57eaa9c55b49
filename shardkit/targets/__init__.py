"""Targets that follow the pixels: boxes, keypoints and masks (detection and segmentation).

* :mod:`shardkit.targets.geometry`: the one rule every geometric step applies to every target
  (:func:`~shardkit.targets.geometry.move`), and :class:`~shardkit.targets.geometry.Targets`;
* :mod:`shardkit.targets.batchdict`: a dict batch's target fields as :class:`Targets` and back;
* :mod:`shardkit.targets.instances`: instance maps (an object row per pixel) relabelled when boxes drop, and as
  one binary mask per box;
* :mod:`shardkit.targets.torchvision`: a dict batch as torchvision's detection models take it
  (:func:`~shardkit.targets.torchvision.to_torchvision`) and as ``tv_tensors`` for
  ``torchvision.transforms.v2`` (:func:`~shardkit.targets.torchvision.as_tv_tensors`, and back).

This layer sits above :mod:`shardkit.format` (whose :class:`~shardkit.format.fields.Objects` it
pads into batches) and below :mod:`shardkit.augment` and :mod:`shardkit.loader`, which both call it.
"""

from shardkit.targets.batchdict import TARGET_FIELDS, targets_of, with_targets
from shardkit.targets.geometry import Targets, move, pad_objects, warp_masks
from shardkit.targets.torchvision import as_tv_tensors, from_tv_tensors, to_torchvision

__all__ = [
    "TARGET_FIELDS",
    "Targets",
    "as_tv_tensors",
    "from_tv_tensors",
    "move",
    "pad_objects",
    "targets_of",
    "to_torchvision",
    "warp_masks",
    "with_targets",
]
