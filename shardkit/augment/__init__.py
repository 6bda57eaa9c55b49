"""GPU-side batch augmentation with per-sample randomness.

:class:`GpuAugment` takes a ``uint8 [B, 3, H, W]`` batch on any device and
returns the augmented, normalised batch in the requested dtype and memory
format. Every sample draws its own parameters from a seedable generator on
the batch's device; there is no Python loop over samples and no host-device
synchronisation, and all consecutive geometric ops are fused into one
``grid_sample`` pass.

Ops (torchvision's parameter meaning): :class:`RandomResizedCrop`,
:class:`CenterCrop`, :class:`Resize`, :class:`HorizontalFlip`,
:class:`VerticalFlip`, :class:`RandomRotation`, :class:`RandomAffine`,
:class:`ColorJitter`, :class:`RandomGrayscale`, :class:`GaussianBlur`,
:class:`RandomSolarize`, :class:`Normalize`, :class:`RandomErasing`, :class:`MixUp`, :class:`CutMix`.

Multi-crop views (``load(url, views=[...])`` yields a list of view tensors): :class:`ViewAugment`
runs a pipeline per :class:`ViewOps`; :meth:`ViewAugment.dino` is DINO's colour recipe
(:func:`dino_groups`, :func:`dino_global_1_ops`, :func:`dino_global_2_ops`, :func:`dino_local_ops`).

Example::

    aug = GpuAugment(
        [RandomResizedCrop(224), HorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1),
         RandomGrayscale(0.2), Normalize(IMAGENET_MEAN, IMAGENET_STD)],
        output_dtype=torch.bfloat16, memory_format="channels_last", seed=0,
    )
    x = aug(images_uint8_on_gpu)
"""

from __future__ import annotations

from shardkit.augment.base import GeometricOp, MixOp, Op, OpKind, PixelOp
from shardkit.augment.blur import GaussianBlur
from shardkit.augment.color import ColorJitter, Normalize, RandomGrayscale, RandomSolarize
from shardkit.augment.erase import RandomErasing
from shardkit.augment.geometric_ops import (
    CenterCrop,
    HorizontalFlip,
    RandomAffine,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    VerticalFlip,
)
from shardkit.augment.mixup import CutMix, MixUp
from shardkit.augment.pipeline import GpuAugment, MemoryFormat
from shardkit.augment.presets import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    dino_global_1_ops,
    dino_global_2_ops,
    dino_groups,
    dino_local_ops,
    imagenet_eval_ops,
    imagenet_train_ops,
)
from shardkit.augment.viewops import ViewOps, augment_views
from shardkit.augment.views import ViewAugment

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "GaussianBlur",
    "GeometricOp",
    "GpuAugment",
    "HorizontalFlip",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MemoryFormat",
    "MixOp",
    "MixUp",
    "Normalize",
    "Op",
    "OpKind",
    "PixelOp",
    "RandomAffine",
    "RandomErasing",
    "RandomGrayscale",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "Resize",
    "VerticalFlip",
    "ViewAugment",
    "ViewOps",
    "augment_views",
    "dino_global_1_ops",
    "dino_global_2_ops",
    "dino_groups",
    "dino_local_ops",
    "imagenet_eval_ops",
    "imagenet_train_ops",
]
