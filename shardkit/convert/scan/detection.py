"""Detection sources: ``coco:ANNOTATIONS.json`` (with ``--root IMAGES_DIR``), ``voc:DIR``, ``yolo:DIR``.

Each becomes a :class:`~shardkit.convert.scan.source.ScannedSource` whose files carry
``objects`` (and, for ``--masks``, ``segments`` or a ``mask`` ref), with the classes
``["background", *category names]`` (box labels >= 1, mask 0 = background: torchvision's
detection convention), and whose splits account for every annotation (``SplitSource.annotations``).

The rules every detection source shares live here: where a box lands on its image
(:func:`place_box`: ``kept``, ``clipped``, or skipped as ``degenerate_box`` / ``outside_image``),
how the annotations are counted (:class:`Tally`), and which keypoints a horizontal flip swaps
(:func:`flip_pairs_of`). Boxes are in the source image's pixels with edges at integers: a box
``(x0, y0, x1, y1)`` covers the pixels whose centres lie inside it, and the image is
``[0, width] x [0, height]``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardkit.convert.scan.source import ScannedSource, SplitSource
from shardkit.errors import ConvertError
from shardkit.format.fields import Objects

#: EXIF orientations that turn the image by 90 degrees (its upright size swaps width and height)
_TURNED = (5, 6, 7, 8)
#: what became of an annotation: stored as given, or stored cut to its image
KEPT, CLIPPED = "kept", "clipped"
#: why an annotation was skipped (keys of ``SplitSource.annotations``)
NO_IMAGE = "no_image"  # its image is not in the source (unknown image id, no image file, image skipped)
DEGENERATE_BOX = "degenerate_box"  # width or height <= 0
OUTSIDE_IMAGE = "outside_image"  # no part of the box is inside its image
BAD_CATEGORY = "bad_category"  # its category / class is not one the source declares
BAD_LINE = "bad_line"  # YOLO: a label line that is not ``cls cx cy w h`` numbers
NO_MASK = "no_mask"  # VOC --masks: its image has no SegmentationClass PNG


class Tally:
    """What became of every annotation of a split: ``{"kept": n, "clipped": n, <reason>: n}``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` annotations with ``outcome`` (``kept``, ``clipped`` or a skip reason)."""
        self.counts[outcome] += n

    def as_dict(self, always: Sequence[str] = (KEPT, CLIPPED)) -> dict[str, int]:
        """The outcomes in ``always`` (also at 0), then each other outcome that occurred, sorted by name.

        A source whose boxes are never cut at scan time (a Hugging Face objects column) lists ``(KEPT,)`` only:
        it has no ``clipped`` to report.
        """
        out = {k: self.counts[k] for k in always}
        out.update({k: v for k, v in sorted(self.counts.items()) if k not in out and v})
        return out


def place_box(x0: float, y0: float, x1: float, y1: float, width: int, height: int) -> tuple[str, list[float] | None]:
    """Where the box ``(x0, y0, x1, y1)`` lands on a ``width x height`` image: ``(outcome, box or None)``.

    ``kept`` (inside the image, returned as is), ``clipped`` (reaching outside: cut to the image),
    ``degenerate_box`` (not finite, or ``x1 <= x0`` or ``y1 <= y0``, also once stored as float32) or
    ``outside_image`` (no area inside the image) with ``None``.
    """
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or not (x1 > x0 and y1 > y0):
        return DEGENERATE_BOX, None
    c = [max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), min(y1, float(height))]
    if not (c[2] > c[0] and c[3] > c[1]):
        return OUTSIDE_IMAGE, None
    f = np.array(c, np.float32)
    if not (f[2] > f[0] and f[3] > f[1]):  # too thin to be a box in float32
        return DEGENERATE_BOX, None
    return (CLIPPED if c != [x0, y0, x1, y1] else KEPT), c


def objects_of(
    boxes: Sequence[Sequence[float]],
    labels: Sequence[int],
    crowd: Sequence[bool],
    keypoints: Sequence[Any] | None = None,
    num_keypoints: int = 0,
) -> Objects:
    """:class:`Objects` of plain lists (``keypoints``: ``M`` lists of ``K`` ``[x, y, v]``, when ``num_keypoints``)."""
    kp = None
    if num_keypoints:
        kp = np.array(keypoints or [], np.float32).reshape(len(labels), num_keypoints, 3)
    return Objects(
        np.array(boxes, np.float32).reshape(-1, 4),
        np.array(labels, np.int64).reshape(-1),
        np.array(crowd, bool).reshape(-1),
        kp,
    )


def _partner(name: str) -> str | None:
    """The name of the keypoint mirroring ``name`` (lower case), if ``name`` is a left one."""
    if name == "left":
        return "right"
    for sep in "_- ":
        if name.startswith("left" + sep):
            return "right" + name[4:]
        if name.endswith(sep + "left"):
            return name[:-4] + "right"
    return None


def flip_pairs_of(names: Sequence[str]) -> list[list[int]]:
    """The keypoints a horizontal flip swaps, found by their names: ``left_eye`` / ``right_eye``
    (also ``eye_left`` / ``eye_right``, ``left`` / ``right``; any case; ``_``, ``-`` or a space);
    each pair ``[left, right]``, sorted by the left one; a keypoint is in one pair at most."""
    where = {n.lower(): i for i, n in enumerate(names)}
    pairs: list[list[int]] = []
    used: set[int] = set()
    for i, n in enumerate(names):
        partner = _partner(n.lower())
        j = where.get(partner) if partner else None
        if j is not None and not {i, j} & used and j != i:  # each keypoint in one pair at most
            pairs.append([i, j])
            used.update((i, j))
    return pairs


def image_size(path: str) -> tuple[int, int] | None:
    """The upright ``(width, height)`` of an image from its header, or ``None`` if it cannot be read."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            w, h = im.size
            try:
                turned = im.getexif().get(0x0112) in _TURNED
            except Exception:  # noqa: BLE001 - a broken EXIF block: the image is read as stored
                turned = False
    except Exception:  # noqa: BLE001 - PIL raises many types for unreadable headers
        return None
    return (h, w) if turned else (w, h)


def total_annotations(splits: Sequence[SplitSource]) -> dict[str, int]:
    """The annotation counts of all ``splits`` added up (for the conversion's note)."""
    total: dict[str, int] = {}
    for sp in splits:
        for key, v in sp.annotations.items():
            total[key] = total.get(key, 0) + v
    return total


def describe(classes: Sequence[str], counts: dict[str, int]) -> str:
    """A summary line: the classes and what became of the annotations."""
    names = ", ".join(classes[1:9]) + (" ..." if len(classes) > 9 else "")
    told = ", ".join(f"{v} {k}" for k, v in counts.items())
    return f"{len(classes) - 1} classes ({names}) after 'background'; annotations: {told}"


#: the name of class 0 in every detection source
BACKGROUND = "background"


def finish(
    source: ScannedSource, keypoint_names: Sequence[str] = (), masks: bool = False, instances: bool = False
) -> ScannedSource:
    """Set the fields the source's items fill and its keypoint names and flip pairs.

    Raises:
        ConvertError: a category named ``background`` (class 0's name: its objects would train as background).
    """
    if BACKGROUND in source.classes[1:]:
        raise ConvertError(
            f"{source.root}: a category is named {BACKGROUND!r}, the name of class 0 (no object; torchvision's "
            "convention): rename it, or remove it from the categories if no annotation uses it"
        )
    source.fields = ("image", "boxes") + (("keypoints",) if keypoint_names else ()) + (("mask",) if masks else ())
    source.fields += ("instances",) if instances else ()
    source.keypoint_names = list(keypoint_names)
    source.flip_pairs = flip_pairs_of(keypoint_names)
    return source


__all__ = [
    "BAD_CATEGORY",
    "BAD_LINE",
    "CLIPPED",
    "DEGENERATE_BOX",
    "KEPT",
    "NO_IMAGE",
    "NO_MASK",
    "OUTSIDE_IMAGE",
    "Tally",
    "describe",
    "finish",
    "flip_pairs_of",
    "image_size",
    "objects_of",
    "place_box",
]
