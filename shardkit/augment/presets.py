"""Op lists for common recipes: ImageNet training/evaluation, DINO's multi-crop views."""

from __future__ import annotations

from typing import Any

from shardkit.augment.base import Op
from shardkit.augment.blur import GaussianBlur
from shardkit.augment.color import ColorJitter, ColorOrder, Normalize, RandomGrayscale, RandomSolarize
from shardkit.augment.geometric_ops import CenterCrop, HorizontalFlip, RandomResizedCrop
from shardkit.augment.viewops import ViewOps

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


# --- DINO (Caron et al. 2021): facebookresearch/dino, main_dino.py, DataAugmentationDINO; utils.py ---

#: DINO's blur radius range: PIL ``GaussianBlur(radius)`` with radius uniform in [0.1, 2.0] (radius = sigma)
DINO_BLUR_SIGMA = (0.1, 2.0)
#: 13 taps cover +-3 sigma of the largest sigma (2.0), about the support of PIL's blur
DINO_BLUR_KERNEL = 13


def _dino_colour(jitter_order: ColorOrder) -> list[Op]:
    # flip_and_color_jitter without the flip (views already flip in the loader):
    # RandomApply([ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), RandomGrayscale(p=0.2)
    return [ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8, order=jitter_order), RandomGrayscale(0.2)]


def dino_global_1_ops(*, blur_kernel: int = DINO_BLUR_KERNEL, jitter_order: ColorOrder = "random") -> list[Op]:
    """DINO's first global view after the crop and flip: colour jitter (0.4, 0.4, 0.2, 0.1) with
    p=0.8, grayscale p=0.2, Gaussian blur (sigma 0.1-2) with p=1.0, ImageNet normalisation.

    ``DataAugmentationDINO.global_transfo1`` (facebookresearch/dino ``main_dino.py``). torchvision's
    ``ColorJitter`` applies its four adjustments in a random order per image: ``jitter_order="fixed"``
    is about 4x cheaper and differs only in that order. ``blur_kernel``: taps of the blur (odd).
    """
    return [*_dino_colour(jitter_order), GaussianBlur(blur_kernel, DINO_BLUR_SIGMA, p=1.0), _dino_norm()]


def dino_global_2_ops(*, blur_kernel: int = DINO_BLUR_KERNEL, jitter_order: ColorOrder = "random") -> list[Op]:
    """DINO's second global view: as :func:`dino_global_1_ops` but blur with p=0.1, then
    solarization (uint8 values >= 128 inverted) with p=0.2 (``global_transfo2``)."""
    return [
        *_dino_colour(jitter_order),
        GaussianBlur(blur_kernel, DINO_BLUR_SIGMA, p=0.1),
        RandomSolarize(0.5, p=0.2),
        _dino_norm(),
    ]


def dino_local_ops(*, blur_kernel: int = DINO_BLUR_KERNEL, jitter_order: ColorOrder = "random") -> list[Op]:
    """DINO's local (small) views: as :func:`dino_global_1_ops` but blur with p=0.5 (``local_transfo``)."""
    return [*_dino_colour(jitter_order), GaussianBlur(blur_kernel, DINO_BLUR_SIGMA, p=0.5), _dino_norm()]


def _dino_norm() -> Op:
    return Normalize(IMAGENET_MEAN, IMAGENET_STD)


def dino_groups(
    local_crops_number: int = 8, *, blur_kernel: int = DINO_BLUR_KERNEL, jitter_order: ColorOrder = "random"
) -> list[ViewOps]:
    """DINO's whole multi-crop colour recipe as view groups, for the views list of
    ``load(url, views=[View(224, (0.4, 1), count=2), View(96, (0.05, 0.4), count=local_crops_number)])``
    (DINO's crops, ``--global_crops_scale 0.4 1 --local_crops_scale 0.05 0.4``; the loader cuts the
    RandomResizedCrop, with its own antialiased resize rather than PIL's bicubic, and does the flip): global view 0 :func:`dino_global_1_ops`, global view 1
    :func:`dino_global_2_ops`, every local view :func:`dino_local_ops`.

    Follows ``DataAugmentationDINO`` in facebookresearch/dino ``main_dino.py`` (and ``GaussianBlur``,
    ``Solarization`` in its ``utils.py``).
    """
    kw: dict[str, Any] = {"blur_kernel": blur_kernel, "jitter_order": jitter_order}
    return [
        ViewOps(2, dino_global_1_ops(**kw), overrides={1: dino_global_2_ops(**kw)}),
        ViewOps(local_crops_number, dino_local_ops(**kw)),
    ]
