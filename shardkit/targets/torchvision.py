"""shardkit's dict batches as torchvision takes them: detection models' inputs and ``tv_tensors``.

* :func:`to_torchvision`: ``(images, targets)`` for torchvision's detection models
  (``fasterrcnn_*``, ``retinanet_*``, ``fcos_*``, ``ssd*``, ``keypointrcnn_*``): ``images`` a list of
  float ``[3, H, W]`` tensors in ``[0, 1]`` (the models normalise and resize them themselves), and
  per sample ``{"boxes": float32 [n, 4] xyxy, "labels": int64 [n]}`` with the padding rows removed,
  ``"keypoints"`` ``[n, K, 3]`` when the batch has them, the semantic ``"mask"`` ``[H, W]``
  when it has one, and the instance ``"masks"`` (uint8 ``[n, H, W]``, one binary mask per box,
  what Mask R-CNN trains on: ``instances == k``) when it has ``instances``. The semantic mask
  travels under its own key, which the detection models ignore; segmentation models
  (``lraspp_*``, ``deeplabv3_*``, ``fcn_*``) take ``batch["image"]`` and ``batch["mask"]`` as they are.
* :func:`as_tv_tensors`: one dict per sample of ``tv_tensors`` (``Image``, ``BoundingBoxes`` XYXY with
  its ``canvas_size``, ``Mask`` for the semantic ``"mask"`` and the instance ``"masks"``, ``KeyPoints``) plus
  the plain ``"labels"``, so any
  ``torchvision.transforms.v2`` pipeline takes shardkit's output; :func:`from_tv_tensors` pads such
  samples back into a dict batch (the inverse: ``from_tv_tensors(as_tv_tensors(b))`` equals ``b``).

Coordinates are shardkit's everywhere: pixel *edges* at integers (a box covering pixel ``(0, 0)``
only is ``[0, 0, 1, 1]``), torchvision's convention for boxes, so v2's box kernels and shardkit's
:func:`~shardkit.targets.geometry.move` agree. Keypoints keep the same edge coordinates; torchvision's
own keypoint kernels mix conventions (its horizontal flip sends ``x`` to ``W - 1 - x``, its resize to
``x * W' / W``), so after a v2 flip a keypoint sits one pixel left of where shardkit's flip puts it.

torchvision is imported when one of these functions is first called, not with :mod:`shardkit.targets`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from shardkit.targets.batchdict import targets_of
from shardkit.targets.instances import binary_masks, instance_map

#: the key under which the per-sample dicts carry the keypoints' visibility (``KeyPoints`` hold x, y only)
VISIBILITY = "keypoints_visibility"
#: the key under which the per-sample dicts carry a batch's multi-hot ``labels`` (``"labels"`` are the boxes' classes)
MULTI_HOT = "multi_hot"
#: the batch fields that are no target and no image, each carried per sample (a row, or a list's item) by
#: :func:`as_tv_tensors` under the name given here and batched back by :func:`from_tv_tensors`
PASSED = {
    "label": "label",
    "labels": MULTI_HOT,
    "target": "target",
    "text": "text",
    "meta": "meta",
    "key": "key",
    "source": "source",
}


def _per_sample(batch: Mapping[str, Any]) -> tuple[Tensor, list[int], Any]:
    """The batch's images, each sample's object count (host ints: one sync) and its targets."""
    if "image" not in batch:
        raise ValueError("the batch has no 'image' field: ask load(fields=...) for 'image' too")
    images = batch["image"]
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError(
            f"batch['image'] must be one [B, 3, H, W] tensor (got {type(images).__name__}"
            f"{' of shape ' + str(list(images.shape)) if isinstance(images, Tensor) else ''}): views are not detection inputs"
        )
    t = targets_of(batch)
    if t is None:
        raise ValueError(
            "the batch has no targets: ask load(fields=...) for 'boxes', 'box_labels', 'box_count' and/or 'mask'"
        )
    counts = [int(c) for c in t.count.tolist()]
    return images, counts, t


def to_torchvision(
    batch: Mapping[str, Any], *, dtype: torch.dtype = torch.float32
) -> tuple[list[Tensor], list[dict[str, Tensor]]]:
    """A dict batch as ``(images, targets)`` for torchvision's detection models.

    Args:
        batch: a dict batch with ``image`` (uint8 or float ``[B, 3, H, W]``) and ``boxes`` +
            ``box_labels`` (+ ``box_count``, ``keypoints``) and/or ``mask``.
        dtype: the images' floating dtype. uint8 images are scaled to ``[0, 1]`` in one batched
            division; floating images are passed as they are (already scaled or normalised by you).

    Returns:
        ``images``: a list of ``B`` ``[3, H, W]`` tensors (views of one batched tensor, on the
        batch's device); ``targets``: a list of ``B`` dicts ``{"boxes": float32 [n, 4] xyxy,
        "labels": int64 [n]}`` (``n`` = that sample's ``box_count``, padding removed; ``n`` may be
        0, which the models accept), plus ``"keypoints"`` float32 ``[n, K, 3]`` (x, y, visibility)
        and ``"mask"`` uint8 ``[H, W]`` (the semantic mask, class per pixel, 255 ignore: not
        Mask R-CNN's instance ``"masks"``) when the batch has them, and ``"masks"`` uint8 ``[n, H, W]``
        (mask ``k``: the pixels of box ``k``, ``instances == k``) when it has ``instances``. The tensors are
        views of the batch's (no copy), but for ``"masks"`` (built on the batch's device).
    """
    images, counts, t = _per_sample(batch)
    floats = images.to(dtype).div_(255) if not images.is_floating_point() else images.to(dtype)
    targets: list[dict[str, Tensor]] = []
    for i, n in enumerate(counts):
        d = {"boxes": t.boxes[i, :n], "labels": t.labels[i, :n]}
        if t.keypoints is not None:
            d["keypoints"] = t.keypoints[i, :n]
        if t.instances is not None:
            d["masks"] = binary_masks(t.instances[i], n)
        if t.mask is not None:
            d["mask"] = t.mask[i]
        targets.append(d)
    return list(floats.unbind(0)), targets


def as_tv_tensors(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A dict batch as one dict of ``torchvision.tv_tensors`` per sample, for ``torchvision.transforms.v2``.

    Each dict holds ``"image"`` (``tv_tensors.Image`` ``[3, H, W]``, the batch's dtype), and as the
    batch has them ``"boxes"`` (``tv_tensors.BoundingBoxes``, format XYXY, ``canvas_size=(H, W)``,
    padding removed) with ``"labels"`` (int64 ``[n]``, the key ``SanitizeBoundingBoxes`` finds by
    default), ``"keypoints"`` (``tv_tensors.KeyPoints`` ``[n, K, 2]``) with
    ``"keypoints_visibility"`` (float32 ``[n, K]``: ``KeyPoints`` hold x, y only), ``"mask"``
    (``tv_tensors.Mask`` ``[H, W]``, semantic) and ``"masks"`` (``tv_tensors.Mask`` uint8 ``[n, H, W]``, one per
    box, from ``instances``). The batch's other fields go along per sample (:data:`PASSED`: ``"key"``, ``"text"``,
    ``"meta"`` items, ``"label"``, ``"target"``, ``"source"`` rows, the multi-hot ``labels`` as ``"multi_hot"``).
    All but ``"masks"`` are views of the batch's tensors.

    Note: ``SanitizeBoundingBoxes`` removes boxes with their labels (and instance masks) but not
    the keypoints; pass ``labels_getter=lambda s: (s["labels"], s["keypoints"], s["keypoints_visibility"])``
    to keep them together.
    """
    from torchvision import tv_tensors

    images, counts, t = _per_sample(batch)
    h, w = int(images.shape[-2]), int(images.shape[-1])
    has_boxes = "boxes" in batch
    out: list[dict[str, Any]] = []
    for i, n in enumerate(counts):
        d: dict[str, Any] = {"image": tv_tensors.Image(images[i])}
        if has_boxes:
            d["boxes"] = tv_tensors.BoundingBoxes(t.boxes[i, :n], format="XYXY", canvas_size=(h, w))
            d["labels"] = t.labels[i, :n]
        if t.keypoints is not None:
            d["keypoints"] = tv_tensors.KeyPoints(t.keypoints[i, :n, :, :2], canvas_size=(h, w))
            d[VISIBILITY] = t.keypoints[i, :n, :, 2]
        if t.mask is not None:
            d["mask"] = tv_tensors.Mask(t.mask[i])
        if t.instances is not None:
            d["masks"] = tv_tensors.Mask(binary_masks(t.instances[i], n))
        for field, name in PASSED.items():
            if field in batch:
                d[name] = batch[field][i]
        out.append(d)
    return out


def _size_of(sample: Mapping[str, Any], i: int) -> tuple[int, int]:
    image = sample.get("image")
    if not isinstance(image, Tensor) or image.dim() != 3:
        raise ValueError(f"sample {i}: 'image' must be a [C, H, W] tensor (a tv_tensors.Image)")
    return int(image.shape[-2]), int(image.shape[-1])


def from_tv_tensors(samples: Sequence[Mapping[str, Any]], width: Optional[int] = None) -> dict[str, Any]:
    """Per-sample dicts as :func:`as_tv_tensors` makes them (after any v2 transforms) as one dict batch.

    The images must share one size (transform them to it: a crop, a resize, a letterbox); boxes are
    padded to ``width`` rows (default: the most any sample has) with label -1, like the loader's.
    The batch has ``image``, and ``boxes``/``box_labels``/``box_count``, ``keypoints`` (x, y and the
    ``"keypoints_visibility"``, 2 where a sample has none), ``mask``, and ``instances`` (from ``"masks"``: each
    pixel the row of the box whose mask holds it, -1 none; where masks overlap, which the loader's never do
    but a v2 transform's or your own may, the later row wins) when the samples have them, and the fields of
    :data:`PASSED` (``key``, ``text``, ``meta`` as lists; ``label``, ``target``, ``source``, ``labels`` stacked).
    """
    if not samples:
        raise ValueError("no samples to batch")
    size = _size_of(samples[0], 0)
    for i, s in enumerate(samples):
        if _size_of(s, i) != size:
            raise ValueError(
                f"sample {i} is {_size_of(s, i)} (H, W), sample 0 {size}: resize or crop them to one size first"
            )
        for key in ("boxes", "keypoints"):
            canvas = getattr(s.get(key), "canvas_size", None)
            if canvas is not None and tuple(canvas) != size:
                raise ValueError(f"sample {i}: {key} have canvas_size {tuple(canvas)}, the image is {size} (H, W)")
    first = samples[0]
    image = torch.stack([s["image"].as_subclass(Tensor) for s in samples])
    out: dict[str, Any] = {"image": image}
    n = len(samples)
    if "boxes" in first:
        counts = [len(s["boxes"]) for s in samples]
        m = max(counts) if width is None else width
        if m < max(counts):
            raise ValueError(f"width={width} but a sample has {max(counts)} boxes")
        boxes = torch.zeros((n, m, 4), dtype=torch.float32)
        labels = torch.full((n, m), -1, dtype=torch.int64)
        kp: Optional[Tensor] = None
        if "keypoints" in first:
            k = int(first["keypoints"].shape[-2])
            kp = torch.zeros((n, m, k, 3), dtype=torch.float32)
        for i, s in enumerate(samples):
            c = counts[i]
            boxes[i, :c] = s["boxes"].as_subclass(Tensor).to(torch.float32)
            labels[i, :c] = s["labels"]
            if kp is not None:
                kp[i, :c, :, :2] = s["keypoints"].as_subclass(Tensor)
                vis = s.get(VISIBILITY)
                kp[i, :c, :, 2] = 2.0 if vis is None else vis
        out["boxes"], out["box_labels"] = boxes, labels
        out["box_count"] = torch.tensor(counts, dtype=torch.int64)
        if kp is not None:
            out["keypoints"] = kp
    if "mask" in first:
        out["mask"] = torch.stack([s["mask"].as_subclass(Tensor) for s in samples])
    if "masks" in first:
        if "boxes" not in first:
            raise ValueError("sample 0 has 'masks' (one per box) but no 'boxes'")
        for i, s in enumerate(samples):
            if tuple(s["masks"].shape) != (len(s["boxes"]), *size):
                raise ValueError(
                    f"sample {i}: 'masks' are {list(s['masks'].shape)}, not [n boxes, H, W] = "
                    f"{[len(s['boxes']), *size]}"
                )
        out["instances"] = torch.stack([instance_map(s["masks"].as_subclass(Tensor)) for s in samples])
    for field, name in PASSED.items():
        if name in first:
            items = [s[name] for s in samples]
            out[field] = torch.stack(items) if isinstance(items[0], Tensor) else items
    return out


__all__ = ["MULTI_HOT", "PASSED", "VISIBILITY", "as_tv_tensors", "from_tv_tensors", "to_torchvision"]
