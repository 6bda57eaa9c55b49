"""The encode path of detection and segmentation targets: an item's objects and mask at the stored size.

A source gives each item's targets in its source image's pixels (EXIF-oriented, pixel edges at
integers), before any resize (:class:`~shardkit.convert.scan.source.SourceFile`): ``objects``
(boxes, classes, crowd flags, keypoints), a ``mask`` (a ref to a PNG of class indices) or
``segments`` (COCO polygons / RLE, rasterised here by
:func:`shardkit.convert.segments.semantic_mask`). The conversion's resize is a pure scale
``sx = out_w / in_w``, ``sy = out_h / in_h``; :func:`resize_map` is its inverse map and
:func:`encode_targets` moves everything with the one geometry rule
(:func:`shardkit.targets.geometry.move`: boxes and keypoints exactly, the mask nearest), so
a stored box is the source box times ``(sx, sy)`` and a stored mask pixel is the source pixel
nearest its centre (``floor((j + 0.5) * in_w / out_w)``).

Accounting: a box that reaches outside its image is clipped (``clipped``), one wholly outside
is dropped (``outside_image``); these moves out of ``kept`` are returned per item
(:class:`TargetOutcome`). A mask that cannot be read (``bad_mask``), whose size is not its
image's (``bad_mask``), or holds a value that is neither a class index nor
:data:`~shardkit.format.fields.IGNORE` (``bad_mask``) skips the sample; a split that stores
masks and an item without one skips it as ``missing_mask``.

Instance maps (``instances``, COCO ``--instances``): the item's ``segments`` are then one per object, in the
objects' order (an object without a segmentation has no polygon); they are painted at the source size, the
smaller object on top (:func:`shardkit.convert.segments.instance_map`), and the map moves like the mask
(nearest) with its rows following the stored objects (:func:`shardkit.targets.geometry.move`: an object
dropped here leaves no pixel). A stored object whose segmentation has pixels, all of them under smaller
objects, is counted ``hidden_instance`` (it keeps its box; only its mask is empty).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from shardkit.convert.imageproc import SkipImage, SkipReason
from shardkit.format.fields import IGNORE, Objects

if TYPE_CHECKING:
    from shardkit.convert.scan.source import Reader
    from shardkit.convert.shards import Item

#: a box edge moved by less than this (output pixels) by clipping is not counted as clipped (float rounding)
CLIP_TOLERANCE = 1e-3
#: the ``annotations`` key of the objects of a sample that was skipped as a whole (bad image, bad mask, ...)
IMAGE_SKIPPED = "image_skipped"
#: the ``annotations`` key of a box wholly outside its image
OUTSIDE_IMAGE = "outside_image"
CLIPPED = "clipped"
#: the ``annotations`` key of a stored object whose instance mask is wholly hidden by smaller objects
HIDDEN_INSTANCE = "hidden_instance"
KEPT = "kept"


@dataclass(frozen=True)
class TargetSpec:
    """What the targets of one conversion hold (sent to the encoding workers once per chunk).

    Attributes:
        boxes: the split stores ``boxes`` (an item without objects stores none: ``[]``).
        mask: the split stores ``mask`` (an item without one is ``missing_mask``).
        num_classes: mask values must be below this (or :data:`IGNORE`).
        num_keypoints: ``K`` keypoints per object (0: none).
        instances: the split stores ``instances`` (the item's ``segments`` are one per object).
    """

    boxes: bool = False
    mask: bool = False
    num_classes: int = 0
    num_keypoints: int = 0
    instances: bool = False


@dataclass(frozen=True)
class TargetOutcome:
    """One item's stored targets: ``objects`` and ``mask`` (PNG bytes) at the stored size, the classes it
    holds (box labels and mask values) and what became of its objects beyond ``kept`` (``{reason: n}``);
    ``instances``: the instance map's PNG bytes."""

    objects: Objects | None = None
    mask: bytes | None = None
    classes: tuple[int, ...] = ()
    moved: dict[str, int] = field(default_factory=dict)
    instances: bytes | None = None


def resize_map(in_size: tuple[int, int], out_size: tuple[int, int]) -> np.ndarray:
    """The inverse map ``[3, 3]`` (output pixel centre -> input point, centres at integers) of resizing an
    ``in_size`` = ``(width, height)`` image to ``out_size``: a pure scale of the pixel edges."""
    (iw, ih), (ow, oh) = in_size, out_size
    ax, ay = iw / ow, ih / oh
    return np.array([[ax, 0.0, 0.5 * ax - 0.5], [0.0, ay, 0.5 * ay - 0.5], [0.0, 0.0, 1.0]], np.float64)


def is_full_ref(ref: str) -> bool:
    """True for a ref :class:`Reader` reads as it is (a URL, an absolute path, a source's own prefix such as
    ``mask:`` or ``hfmask:``); a plain relative path is read below the reader's root."""
    return ":" in ref or ref.startswith("/")


def read_mask(reader: "Reader", ref: str) -> bytes:
    """The bytes of the mask at ``ref`` (see :func:`is_full_ref`)."""
    return reader.read(ref, ref) if is_full_ref(ref) else reader.read(ref, "")


def _source_mask(item: "Item", reader: "Reader", in_size: tuple[int, int]) -> np.ndarray:
    """The item's mask in source pixels (uint8 ``[H, W]``), or :class:`SkipImage`."""
    from shardkit.convert.scan.source import MissingFile
    from shardkit.format.masks import decode_mask

    w, h = in_size
    if item.mask is not None:
        try:
            data = read_mask(reader, item.mask)
        except MissingFile:
            raise SkipImage(SkipReason.MISSING_MASK, f"{item.mask}: no such mask file") from None
        except OSError as exc:
            raise SkipImage(SkipReason.BAD_MASK, f"{item.mask}: {exc.strerror or exc}") from None
        try:
            return decode_mask(data, (w, h))
        except ValueError as exc:
            raise SkipImage(SkipReason.BAD_MASK, f"{item.mask}: {exc}") from None
    if item.segments is not None:
        from shardkit.convert.segments import semantic_mask

        try:
            return semantic_mask(item.segments, w, h)
        except ValueError as exc:
            raise SkipImage(SkipReason.BAD_MASK, f"{item.relpath}: segmentation: {exc}") from None
    raise SkipImage(SkipReason.MISSING_MASK, f"{item.relpath}: no mask for this image")


def encode_targets(
    item: "Item", reader: "Reader", in_size: tuple[int, int], out_size: tuple[int, int], spec: TargetSpec
) -> TargetOutcome:
    """``item``'s objects and mask moved from its source image (``in_size``) to the stored one (``out_size``).

    Raises:
        SkipImage: ``missing_mask`` or ``bad_mask`` (the detail names the mask file), ``size_mismatch`` (the
            source declares another image size than the image has).
    """
    import torch

    from shardkit.format.masks import mask_bytes
    from shardkit.targets.geometry import clip_boxes, move, move_boxes, pad_objects

    mask = _checked_mask(item, reader, in_size, spec)
    inv = torch.from_numpy(resize_map(in_size, out_size))[None]
    size = (out_size[1], out_size[0])
    objects = item.objects if item.objects is not None or not spec.boxes else Objects.empty(spec.num_keypoints)
    moved: dict[str, int] = {}
    out_objects = stored_instances = None
    if objects is not None and spec.boxes:
        t = pad_objects([objects], spec.num_keypoints)
        regions = _instance_regions(item, objects, in_size) if spec.instances else None
        if regions is not None:
            from shardkit.convert.segments import paint_instances

            rows = torch.from_numpy(paint_instances(regions, *in_size))
            t = replace(t, instances=rows[None])
        raw = move_boxes(t.boxes, inv)  # unclipped: what clipping changes is counted
        clipped, keep = clip_boxes(raw, size, 0.0)
        keep = keep & (t.labels >= 0)
        changed = keep & ((clipped - raw).abs() > CLIP_TOLERANCE).any(-1)
        dropped, n_clipped = int((~keep & (t.labels >= 0)).sum()), int(changed.sum())
        if dropped:
            moved[OUTSIDE_IMAGE] = dropped
        if n_clipped:
            moved[CLIPPED] = n_clipped
        out, _ = move(t, inv, size)
        n = int(out.count[0])
        if regions is not None and out.instances is not None:
            from shardkit.format.masks import instances_bytes

            assert t.instances is not None
            painted = np.bincount(t.instances.reshape(-1).numpy().astype(np.int64) + 1, minlength=len(regions) + 1)
            hidden = sum(1 for k, r in enumerate(regions) if len(r) and not painted[k + 1] and bool(keep[0, k]))
            if hidden:
                moved[HIDDEN_INSTANCE] = hidden
            stored_instances = instances_bytes(out.instances[0].numpy())
        kp = None if out.keypoints is None else out.keypoints[0, :n].numpy()
        out_objects = Objects(
            out.boxes[0, :n].numpy().astype(np.float32),
            out.labels[0, :n].numpy().astype(np.int64),
            out.crowd[0, :n].numpy().astype(bool),
            None if kp is None else kp.astype(np.float32),
        )
    stored = None
    classes: set[int] = set() if out_objects is None else {int(c) for c in out_objects.labels}
    if mask is not None:
        from shardkit.targets.geometry import warp_masks

        warped = warp_masks(torch.from_numpy(np.require(mask, np.uint8, ["C", "W"]))[None], inv, size)[0].numpy()
        stored = mask_bytes(warped)
        counts = np.bincount(warped.reshape(-1), minlength=256)
        classes |= {int(c) for c in np.flatnonzero(counts[:IGNORE])}
    return TargetOutcome(out_objects, stored, tuple(sorted(classes)), moved, stored_instances)


def _checked_mask(item: "Item", reader: "Reader", in_size: tuple[int, int], spec: TargetSpec) -> np.ndarray | None:
    """``item``'s source mask (``None`` without one), after checking that the annotations were drawn on an image of
    the size it has and that every mask value is a class index or :data:`IGNORE` (:class:`SkipImage` if not)."""
    declared = getattr(item, "declared_size", None)
    if declared is not None and tuple(declared) != tuple(in_size):
        raise SkipImage(
            SkipReason.SIZE_MISMATCH,
            f"{item.relpath}: the annotations are for a {declared[0]}x{declared[1]} image but the image is "
            f"{in_size[0]}x{in_size[1]} (EXIF-oriented); fix width/height in the annotation file or the image",
        )
    mask = _source_mask(item, reader, in_size) if spec.mask else None
    if mask is not None and spec.num_classes:
        bad = (mask >= spec.num_classes) & (mask != IGNORE)
        if bad.any():
            y, x = (int(v[0]) for v in np.nonzero(bad))
            raise SkipImage(
                SkipReason.BAD_MASK,
                f"{item.mask or item.relpath}: mask value {int(mask[y, x])} at x={x}, y={y} is not a class index "
                f"(below {spec.num_classes}) or {IGNORE}",
            )
    return mask


def _instance_regions(item: "Item", objects: Objects, in_size: tuple[int, int]) -> list[np.ndarray]:
    """Each object's pixels in the source image (flat row-major indices), from the item's per-object segments.

    Raises:
        SkipImage: ``bad_mask``: a segmentation that does not fit the image.
    """
    from shardkit.convert.segments import segment_region

    segments = item.segments or ()
    if len(segments) != len(objects):  # the scan writes one segment per object: a mismatch is a bug, not bad input
        raise AssertionError(f"{item.relpath}: {len(segments)} segments for {len(objects)} objects")
    try:
        return [np.flatnonzero(segment_region(s, *in_size)) for s in segments]
    except ValueError as exc:
        raise SkipImage(SkipReason.BAD_MASK, f"{item.relpath}: segmentation: {exc}") from None


def target_spec(source: Any) -> TargetSpec | None:
    """What the encoding workers make of each item's targets for a
    :class:`~shardkit.convert.scan.source.ScannedSource` (``None``: a source without boxes or masks)."""
    boxes, mask = "boxes" in source.fields, "mask" in source.fields
    if not boxes and not mask:
        return None
    return TargetSpec(boxes, mask, len(source.classes), len(source.keypoint_names), "instances" in source.fields)


def sample_classes(item: Any, targets: TargetOutcome | None) -> tuple[int, ...]:
    """The classes a written sample counts for in ``class_counts``: its label, its labels, or the classes of
    its stored boxes and mask."""
    if item.label is not None:
        return (item.label,)
    if item.labels is not None:
        return tuple(item.labels)
    return targets.classes if targets is not None else ()


def has_targets(item: Any) -> bool:
    """True for an item with objects, a mask ref or segments."""
    return item.objects is not None or item.mask is not None or item.segments is not None


def target_fingerprint(item: Any) -> dict[str, Any]:
    """What the input fingerprint records of an item's targets: its objects' and segments' digests and its mask
    ref and size (a mask file replaced or renamed between runs is a different input, never resumed over)."""
    import hashlib

    from shardkit.format.fields import objects_bytes

    out: dict[str, Any] = {}
    if item.objects is not None:
        out["objects"] = hashlib.sha256(objects_bytes(item.objects)).hexdigest()
    if item.mask is not None:
        out["mask"] = [item.mask, getattr(item, "mask_size", 0)]
    if item.segments is not None:
        out["segments"] = hashlib.sha256(repr(item.segments).encode("utf-8")).hexdigest()
    return out


def settle(annotations: dict[str, int], moved: dict[str, int]) -> dict[str, int]:
    """A split's scan-time ``annotations`` with the encode-time ``moved`` counts taken out of ``kept``
    (then out of ``clipped`` where ``kept`` runs out, for objects lost with their sample): every annotation
    is counted once, in sorted key order."""
    out = dict(annotations)
    for reason, n in sorted(moved.items()):
        if not n:
            continue
        take = min(n, out.get(KEPT, 0))
        out[KEPT] = out.get(KEPT, 0) - take
        if n > take and reason != CLIPPED:
            out[CLIPPED] = out.get(CLIPPED, 0) - (n - take)
        out[reason] = out.get(reason, 0) + n
    return {k: v for k, v in sorted(out.items()) if v or k == KEPT}


__all__ = [
    "CLIPPED",
    "CLIP_TOLERANCE",
    "HIDDEN_INSTANCE",
    "IMAGE_SKIPPED",
    "KEPT",
    "OUTSIDE_IMAGE",
    "TargetOutcome",
    "TargetSpec",
    "encode_targets",
    "has_targets",
    "is_full_ref",
    "read_mask",
    "resize_map",
    "sample_classes",
    "settle",
    "target_fingerprint",
    "target_spec",
]
