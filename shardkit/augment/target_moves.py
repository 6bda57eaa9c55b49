"""How :class:`~shardkit.augment.GpuAugment`'s geometric runs move boxes, keypoints and masks.

A fused geometric run resamples the image once, through the product of its ops' inverse maps
(:func:`~shardkit.augment.affine.chain`); its targets move by that same product with the one
geometry rule of every target, :func:`shardkit.targets.geometry.move` (enclosing boxes, clipping,
``min_visible``, flip pairs, nearest masks). Nothing here computes a box or a mask pixel itself.

One subtlety: with ``clip_intermediate=True`` a rotation or affine op *inside* a run fills what
lies outside its own input (a crop's edge, say), exactly as applying the ops one by one. Its
input is then a *cut*: boxes and keypoints move canvas by canvas, clipped at each cut (and a box
must keep ``min_visible`` at each, as when the ops run one by one), and the mask, warped once
with the whole run's map, becomes :data:`~shardkit.format.fields.IGNORE` wherever the image
shows a fill; an instance map likewise (-1 there), its rows relabelled through the composition of
every canvas's drops (:mod:`shardkit.targets.instances`). A run without such a cut (the usual one)
is a single :func:`move`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from shardkit.augment.affine import chain, constant_matrix
from shardkit.augment.base import Size
from shardkit.format.fields import IGNORE
from shardkit.targets.batchdict import targets_of, with_targets
from shardkit.targets.geometry import Targets, compact, move, moved_rows, outside, warp_masks
from shardkit.targets.instances import NO_OBJECT, kept_rows, relabel


def check_flip_pairs(flip_pairs: Sequence[Sequence[int]]) -> tuple[tuple[int, int], ...]:
    """``flip_pairs`` as ``((i, j), ...)``; one-line error unless each is two distinct indices >= 0, each once."""
    out: list[tuple[int, int]] = []
    seen: set[int] = set()
    for pair in flip_pairs:
        if len(pair) != 2 or not all(isinstance(k, int) and k >= 0 for k in pair) or pair[0] == pair[1]:
            raise ValueError(f"flip_pairs must be pairs of two distinct keypoint indices >= 0, got {pair!r}")
        if seen & set(pair):
            raise ValueError(f"flip_pairs name keypoint {sorted(seen & set(pair))[0]} twice: each index once")
        seen.update(pair)
        out.append((int(pair[0]), int(pair[1])))
    return tuple(out)


def augment_dict(aug: Any, batch: Mapping[str, Any]) -> dict[str, Any]:
    """``aug`` (a :class:`~shardkit.augment.GpuAugment`) on a loader dict batch: ``image`` augmented, the
    target fields it has (:data:`~shardkit.targets.batchdict.TARGET_FIELDS`) moved with it, ``label`` mixed
    by MixUp/CutMix when the batch has no targets; every other field passes through."""
    if "image" not in batch:
        raise ValueError(f"a dict batch needs an 'image' field (load(fields=('image', ...))), got {sorted(batch)}")
    targets = targets_of(batch)
    if targets is None:
        out = dict(batch)
        if aug.needs_labels and "label" in batch:
            out["image"], out["label"] = aug(batch["image"], batch["label"])
        else:
            out["image"] = aug(batch["image"])
        return out
    images, moved = aug(batch["image"], targets=targets)
    out = with_targets(batch, moved)
    out["image"] = images
    return out


def check_targets(targets: Targets, images: Tensor, flip_pairs: "Sequence[tuple[int, int]] | None" = ()) -> None:
    """One-line errors for targets that do not fit ``images`` ``[B, 3, H, W]``, and for keypoints when
    ``flip_pairs`` was not given (``None``: a flip would mirror them without swapping left and right)."""
    b, _, h, w = images.shape
    if targets.keypoints is not None and targets.keypoints.shape[2] and flip_pairs is None:
        raise ValueError(
            "keypoints need flip_pairs= (which keypoints swap under a mirror): pass GpuAugment(..., "
            "flip_pairs=loader.flip_pairs), the dataset's, or flip_pairs=() when none swap"
        )
    if targets.boxes.shape[0] != b or targets.labels.shape[0] != b:
        raise ValueError(
            f"targets hold {targets.boxes.shape[0]} samples but the images {b}: pass the batch's own targets"
        )
    if targets.mask is not None and tuple(targets.mask.shape) != (b, h, w):
        raise ValueError(
            f"mask must be [B, H, W] = {[b, h, w]} like the images, got {list(targets.mask.shape)}: "
            "masks are resampled with the images' own map"
        )
    if targets.mask is not None and targets.mask.dtype != torch.uint8:
        raise ValueError(f"mask must be uint8 (class per pixel, 255 none), got {targets.mask.dtype}")
    inst = targets.instances
    if inst is not None and (tuple(inst.shape) != (b, h, w) or inst.dtype != torch.int16):
        raise ValueError(
            f"instances must be int16 [B, H, W] = {[b, h, w]} like the images (object row per pixel, -1 none), got "
            f"{inst.dtype} {list(inst.shape)}"
        )
    if targets.keypoints is not None and (targets.keypoints.ndim != 4 or targets.keypoints.shape[-1] != 3):
        raise ValueError(f"keypoints must be [B, M, K, 3] (x, y, visibility), got {list(targets.keypoints.shape)}")


def move_crop(
    targets: Targets, crop: tuple[int, int, int, int], *, min_visible: float, flip_pairs: Sequence[tuple[int, int]]
) -> tuple[Targets, Tensor]:
    """The targets of a run that is a fixed integer crop ``(top, left, height, width)`` (a slice of the image)."""
    top, left, h, w = crop
    inv = constant_matrix([[1.0, 0.0, float(left)], [0.0, 1.0, float(top)]], targets.boxes.device)
    return move(targets, inv, (h, w), min_visible=min_visible, flip_pairs=flip_pairs)


def move_run(
    targets: Targets,
    matrices: list[Tensor],
    sizes: Sequence[Size],
    cuts: Sequence[int],
    *,
    min_visible: float,
    flip_pairs: Sequence[tuple[int, int]],
) -> tuple[Targets, Tensor]:
    """The targets of one fused geometric run (the maps and canvas sizes :func:`~.geometry.warp` got; ``cuts``:
    the canvases ``k > 0`` whose outside the image fills, :class:`~shardkit.augment.program.GeometricStage`).

    Returns:
        ``(targets, dropped)``: ``dropped`` int64 ``[B]``, the objects each sample lost.
    """
    device = targets.boxes.device
    if not cuts:
        return move(targets, chain(matrices, device)[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)
    bounds = [0, *cuts, len(matrices)]
    moved, dropped = replace(targets, mask=None, instances=None), torch.zeros_like(targets.count)
    n, m = targets.labels.shape
    rows = torch.arange(m, device=device).expand(n, m)  # each input row's row now (-1: dropped on the way)
    for a, b in zip(bounds, bounds[1:]):
        segment = chain(matrices[a:b], device)[0]
        stepped, keep = moved_rows(moved, segment, sizes[b], min_visible=min_visible, flip_pairs=flip_pairs)
        rows = relabel(rows, kept_rows(keep))
        dropped = dropped + (moved.labels >= 0).sum(1) - keep.sum(1)
        moved = compact(stepped, keep)
    if targets.mask is None and targets.instances is None:
        return moved, dropped
    to_canvas = chain(matrices, device)
    fills = []  # where the image shows a cut's fill
    for k in cuts:
        fills.append(outside(to_canvas[k].expand(n, 3, 3), sizes[k], sizes[-1]))
    if targets.mask is not None:
        mask = warp_masks(targets.mask, to_canvas[0], sizes[-1])
        for fill in fills:
            mask = torch.where(fill, IGNORE, mask)
        moved = replace(moved, mask=mask)
    if targets.instances is not None:
        inst = warp_masks(targets.instances, to_canvas[0], sizes[-1], NO_OBJECT)
        for fill in fills:
            inst = torch.where(fill, NO_OBJECT, inst)
        moved = replace(moved, instances=relabel(inst, rows))
    return moved, dropped


__all__ = ["augment_dict", "check_flip_pairs", "check_targets", "move_crop", "move_run"]
