"""The fields a dataset stores beside its image, their members, and the one rule for each member.

A split's manifest (version 3) lists its ``fields``: ``"image"`` plus any of

==========  ===============  ================================================  ==============================
field       member           stored as                                         the loader yields
==========  ===============  ================================================  ==============================
``label``   ``.cls``         ASCII decimal class index in ``[0, C)``           int64 ``[B]``
``labels``  ``.labels.json`` JSON list of distinct class indices in ``[0, C)`` multi-hot uint8 ``[B, C]``
``target``  ``.target.json`` JSON list of ``D`` finite numbers                 float32 ``[B, D]``
``text``    ``.txt``         UTF-8 text                                        list of str
``boxes``   ``.objects.json`` objects: xyxy boxes + class per box (+ crowd)    ``boxes``/``box_labels``/``box_count``
``keypoints`` ``.objects.json`` (the same member) ``K`` (x, y, v) per object   float32 ``[B, M, K, 3]``
``mask``    ``.mask.png``    8-bit grey PNG, class per pixel, 255 = ignore     uint8 ``[B, S, S]``
``instances`` ``.instances.png`` 16-bit grey PNG, object ``k`` + 1 per pixel   int16 ``[B, S, S]``, box row or -1
==========  ===============  ================================================  ==============================

The ``.objects.json`` member (:func:`parse_objects`, :func:`objects_bytes`)::

    {"boxes": [[x0, y0, x1, y1], ...], "labels": [c, ...], "iscrowd": [0 | 1, ...],
     "keypoints": [[[x, y, v] * K], ...]}

Coordinates are in the stored image's pixels with pixel *edges* at integers (a box covering pixel
``(0, 0)`` only is ``[0, 0, 1, 1]``): ``x0 < x1``, ``y0 < y1``, finite (a box may reach past the image;
the loader clips). ``labels`` index ``classes``; ``iscrowd`` (optional, default all 0) marks COCO crowd
regions; ``keypoints`` (only in a dataset with the ``keypoints`` field: ``K = len(keypoint_names)``)
gives per object ``K`` points with COCO's visibility ``v`` (0 not labelled, 1 labelled but hidden, 2
visible). The mask has the stored image's size; its pixel values are class indices or 255. The instance
map (:mod:`shardkit.format.masks`) has the stored image's size too; pixel value ``k + 1`` is object ``k`` of
the sample's ``.objects.json`` (crowd regions included), 0 no object; it needs ``boxes``.

``C`` is ``len(manifest.classes)`` (the class names of ``label`` or of ``labels``: a dataset has at
most one of the two; ``boxes`` and ``mask`` index the same class names) and ``D`` is ``len(manifest.targets)`` (the targets' names). Every member is
readable by plain webdataset (``.cls`` -> int, ``.json`` -> parsed JSON, ``.txt`` -> str).

Manifests before version 3 declare ``("image", "label")``. A member of a field the dataset does not
declare is ignored; a declared field whose member is missing or breaks its rule makes the sample
unusable (skipped and counted, like a bad label): :meth:`shardkit.format.sample.SampleRule.check`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Optional

from shardkit.format.members import IMAGE_EXT, LABEL_EXT, MAX_JSON_BYTES, parse_label
from shardkit.format.objects import MAX_OBJECTS, Objects, objects_bytes, parse_objects

LABELS_EXT = "labels.json"
TARGET_EXT = "target.json"
TEXT_EXT = "txt"
OBJECTS_EXT = "objects.json"
MASK_EXT = "mask.png"
INSTANCES_EXT = "instances.png"
#: the fields a manifest may declare, in their canonical order
STORED_FIELDS = ("image", "label", "labels", "target", "text", "boxes", "keypoints", "mask", "instances")
#: the member extension of each stored field (``boxes`` and ``keypoints`` share ``.objects.json``)
MEMBER_OF = {
    "image": IMAGE_EXT,
    "label": LABEL_EXT,
    "labels": LABELS_EXT,
    "target": TARGET_EXT,
    "text": TEXT_EXT,
    "boxes": OBJECTS_EXT,
    "keypoints": OBJECTS_EXT,
    "mask": MASK_EXT,
    "instances": INSTANCES_EXT,
}
#: the value of a mask pixel that belongs to no class (padding, "void", a pixel no source pixel maps to)
IGNORE = 255
#: what a dataset written before manifest version 3 holds
DEFAULT_FIELDS = ("image", "label")
#: largest ``.txt`` member read
MAX_TEXT_BYTES = 1 << 20
_decode = json.JSONDecoder().decode
_INT64_MAX = (1 << 63) - 1


def fields_error(
    fields: "tuple[str, ...] | list[str]",
    num_classes: int,
    num_targets: int,
    num_keypoints: int = 0,
    flip_pairs: "Sequence[Sequence[int]]" = (),
) -> Optional[str]:
    """Why a manifest's ``fields`` (with its class, target and keypoint counts and keypoint flip pairs)
    cannot describe a dataset, or ``None``."""
    unknown = [f for f in fields if f not in STORED_FIELDS]
    if unknown:
        return f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(STORED_FIELDS)})"
    if len(set(fields)) != len(fields):
        return f"a field is listed twice in {list(fields)}"
    if "image" not in fields:
        return "'image' is not among the fields"
    if "label" in fields and "labels" in fields:
        return "'label' and 'labels' both listed (a dataset has one class space)"
    if ("target" in fields) != (num_targets > 0):
        return "'targets' names the target values exactly when 'target' is a field"
    if num_classes and not any(f in fields for f in CLASS_FIELDS):
        return f"classes are listed but none of {', '.join(map(repr, CLASS_FIELDS))} is a field"
    if "keypoints" in fields and "boxes" not in fields:
        return "'keypoints' needs 'boxes' (each object's keypoints sit beside its box)"
    if "instances" in fields and "boxes" not in fields:
        return "'instances' needs 'boxes' (an instance map's pixel values are rows of the objects)"
    if ("keypoints" in fields) != (num_keypoints > 0):
        return "'keypoint_names' names the keypoints exactly when 'keypoints' is a field"
    if num_classes > IGNORE and "mask" in fields:
        return f"a mask holds class indices below {IGNORE} ({num_classes} classes listed)"
    if ("boxes" in fields or "mask" in fields) and not num_classes:
        return "'boxes' and 'mask' need class names ('classes')"
    seen: set[int] = set()
    for pair in flip_pairs:
        if len(pair) != 2 or not all(_is_index(i, num_keypoints) for i in pair) or pair[0] == pair[1]:
            return f"flip pair {list(pair)} is not two distinct keypoint indices in [0, {num_keypoints})"
        if seen & set(pair):
            return f"keypoint {sorted(seen & set(pair))[0]} is in two flip pairs"
        seen |= set(pair)
    return None


#: the fields whose values are indices into ``classes``
CLASS_FIELDS = ("label", "labels", "boxes", "mask")


def _is_index(i: object, n: int) -> bool:
    return isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n


def parse_labels(data: bytes, num_classes: Optional[int] = None) -> tuple[int, ...]:
    """A ``.labels.json`` member: sorted distinct class indices in ``[0, num_classes)``; ``ValueError`` otherwise."""
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"labels of {len(data)} bytes (limit {MAX_JSON_BYTES})")
    try:
        v = _decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise ValueError(f"labels {data[:40]!r} are not JSON") from None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError(f"labels {data[:40]!r} are not a JSON list of class indices")
    if len(set(v)) != len(v):
        raise ValueError(f"labels {data[:40]!r} repeat a class")
    limit = num_classes if num_classes is not None else _INT64_MAX + 1
    bad = [x for x in v if not 0 <= x < limit]
    if bad:
        raise ValueError(f"label {bad[0]} outside [0, {num_classes if num_classes is not None else '2**63'})")
    return tuple(sorted(v))


def parse_target(data: bytes, dim: Optional[int] = None) -> tuple[float, ...]:
    """A ``.target.json`` member: ``dim`` finite numbers; ``ValueError`` otherwise."""
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"target of {len(data)} bytes (limit {MAX_JSON_BYTES})")
    try:
        v = _decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise ValueError(f"target {data[:40]!r} is not JSON") from None
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise ValueError(f"target {data[:40]!r} is not a JSON list of numbers")
    if dim is not None and len(v) != dim:
        raise ValueError(f"target has {len(v)} values, the dataset {dim}")
    out = tuple(float(x) for x in v)  # OverflowError for a huge int is a ValueError's cousin: refused below
    if not all(math.isfinite(x) for x in out):
        raise ValueError(f"target {data[:40]!r} has a non-finite value")
    return out


def parse_text(data: bytes) -> str:
    """A ``.txt`` member as text; ``ValueError`` if it is not UTF-8 or too long."""
    if len(data) > MAX_TEXT_BYTES:
        raise ValueError(f"text of {len(data)} bytes (limit {MAX_TEXT_BYTES})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"text is not UTF-8 (byte {exc.start})") from None


def labels_bytes(labels: "tuple[int, ...] | list[int]") -> bytes:
    """The ``.labels.json`` member of ``labels``: a compact JSON list of the sorted indices (``[0,3]``).

    Raises:
        ValueError: an index that is not an int >= 0, or one listed twice.
    """
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _INT64_MAX for x in labels):
        raise ValueError(f"labels {list(labels)[:8]} are not class indices (ints >= 0)")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels {list(labels)[:8]} repeat a class")
    return b"[" + b",".join(b"%d" % x for x in sorted(labels)) + b"]"


def target_bytes(target: "tuple[float, ...] | list[float]") -> bytes:
    """The ``.target.json`` member of ``target``: a compact JSON list of floats, each written as ``repr`` writes it.

    Raises:
        ValueError: a value that is not a finite number.
    """
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in target):
        raise ValueError(f"target {list(target)[:8]} is not a list of numbers")
    values = [float(x) for x in target]
    if not all(math.isfinite(x) for x in values):
        raise ValueError(f"target {values[:8]} has a non-finite value")
    return ("[" + ",".join(map(repr, values)) + "]").encode("ascii")


def text_bytes(text: str) -> bytes:
    """The ``.txt`` member of ``text`` (UTF-8); ``ValueError`` if it cannot be UTF-8 or is too long."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode (character {exc.start})") from None
    if len(data) > MAX_TEXT_BYTES:
        raise ValueError(f"text of {len(data)} bytes (limit {MAX_TEXT_BYTES})")
    return data


__all__ = [
    "CLASS_FIELDS",
    "DEFAULT_FIELDS",
    "IGNORE",
    "INSTANCES_EXT",
    "LABELS_EXT",
    "MASK_EXT",
    "MAX_OBJECTS",
    "OBJECTS_EXT",
    "Objects",
    "MAX_TEXT_BYTES",
    "MEMBER_OF",
    "STORED_FIELDS",
    "TARGET_EXT",
    "TEXT_EXT",
    "fields_error",
    "labels_bytes",
    "objects_bytes",
    "parse_objects",
    "parse_label",
    "parse_labels",
    "parse_target",
    "parse_text",
    "target_bytes",
    "text_bytes",
]
