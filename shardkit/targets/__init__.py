"""Targets that follow the pixels: boxes, keypoints and masks (detection and segmentation).

* :mod:`shardkit.targets.geometry`: the one rule every geometric step applies to every target
  (:func:`~shardkit.targets.geometry.move`), and :class:`~shardkit.targets.geometry.Targets`;
* :mod:`shardkit.targets.fields`: a dict batch's target fields as :class:`Targets` and back.

This layer sits above :mod:`shardkit.format` (whose :class:`~shardkit.format.fields.Objects` it
pads into batches) and below :mod:`shardkit.augment` and :mod:`shardkit.loader`, which both call it.
"""

from shardkit.targets.fields import TARGET_FIELDS, targets_of, with_targets
from shardkit.targets.geometry import Targets, move, pad_objects, warp_masks

__all__ = ["TARGET_FIELDS", "Targets", "move", "pad_objects", "targets_of", "warp_masks", "with_targets"]
