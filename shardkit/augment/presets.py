"""Op lists for common recipes."""

from __future__ import annotations

from shardkit.augment.base import Op
from shardkit.augment.color import ColorJitter, Normalize
from shardkit.augment.geometric_ops import CenterCrop, HorizontalFlip, RandomResizedCrop

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def imagenet_train_ops(size: int = 224, *, color_jitter: float = 0.4) -> list[Op]:
    """Random resized crop (scale 0.08-1), horizontal flip, colour jitter
    (brightness, contrast, saturation; no hue), ImageNet normalisation."""
    ops: list[Op] = [RandomResizedCrop(size), HorizontalFlip(0.5)]
    if color_jitter > 0:
        ops.append(ColorJitter(color_jitter, color_jitter, color_jitter))
    ops.append(Normalize(IMAGENET_MEAN, IMAGENET_STD))
    return ops


def imagenet_eval_ops(size: int = 224) -> list[Op]:
    """Centre crop to ``size`` and ImageNet normalisation."""
    return [CenterCrop(size), Normalize(IMAGENET_MEAN, IMAGENET_STD)]
