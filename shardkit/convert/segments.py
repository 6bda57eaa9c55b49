"""COCO segmentations (polygons, RLE) rasterised into a semantic mask (a class per pixel) or an instance map.

A :class:`Segment` is one object's segmentation in the source image's pixels (edges at
integers): its class index, whether it is a crowd region, and either polygons (COCO's
``[[x0, y0, x1, y1, ...], ...]``) or an RLE (COCO's ``{"size": [h, w], "counts": [...] | "..."}``,
column-major runs starting with background). :func:`semantic_mask` paints the segments on the background
class 0, the smaller on top where they overlap (the rule of :func:`instance_map`, so the mask and the instance
map of one image agree on every pixel); crowd regions are painted :data:`~shardkit.format.fields.IGNORE`. A pixel belongs to a polygon when its centre lies inside
it (:func:`polygon_mask`), which is what pycocotools' ``annToMask`` gives up to the pixels along the outline.

:func:`instance_map` paints the same regions as object rows (one object per pixel, -1 none: Mask R-CNN's
masks in one image): where objects overlap, the **smaller** one (fewer source pixels) is on top (painted
last; of two of one size, the later), so a small object in front of a large one keeps its pixels; an object
all of whose pixels lie under smaller ones is left with an empty mask (the conversion counts it:
``hidden_instance``). Crowd regions are objects there like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from shardkit.format.fields import IGNORE

Polygons = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Segment:
    """One object's segmentation: ``label`` (class index), ``crowd``, and ``polygons`` or ``rle``."""

    label: int
    crowd: bool
    shape: Union[Polygons, "Rle"]


@dataclass(frozen=True)
class Rle:
    """COCO run-length encoding: ``size`` ``(height, width)``, ``counts`` (ints, or COCO's compressed string)."""

    size: tuple[int, int]
    counts: Union[tuple[int, ...], str]


def rle_counts(counts: str) -> list[int]:
    """COCO's compressed RLE string (``maskApi.c``'s ``rleFrString``) as run lengths.

    Raises:
        ValueError: a character outside COCO's alphabet (``0`` to ``o``), or a string that ends inside a number.
    """
    out: list[int] = []
    i, n = 0, len(counts)
    while i < n:
        x, k, more = 0, 0, True
        while more:
            if i >= n:
                raise ValueError("RLE string ends inside a run length")
            c = ord(counts[i]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"RLE string holds {counts[i]!r}, not a character of COCO's RLE alphabet")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            i += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return out


def rle_string(runs: Sequence[int]) -> str:
    """Run lengths as COCO's compressed RLE string (``maskApi.c``'s ``rleToString``; inverse of :func:`rle_counts`)."""
    chars: list[str] = []
    for i, r in enumerate(runs):
        x = int(r) - (int(runs[i - 2]) if i > 2 else 0)
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            chars.append(chr((c | 0x20 if more else c) + 48))
    return "".join(chars)


def rle_of(mask: np.ndarray) -> Rle:
    """The RLE (compressed string counts, as ``pycocotools.mask.encode`` gives) of a bool ``[h, w]`` mask."""
    m = np.asarray(mask, bool)
    h, w = m.shape
    flat = m.T.reshape(-1)  # column-major
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        runs = [0, *runs]  # runs start with background
    return Rle((h, w), rle_string(runs))


def rle_mask(rle: Rle) -> np.ndarray:
    """The bool ``[h, w]`` mask of an RLE; ``ValueError`` if its runs do not add up to ``h * w``."""
    h, w = rle.size
    runs = rle_counts(rle.counts) if isinstance(rle.counts, str) else list(rle.counts)
    if any(r < 0 for r in runs) or sum(runs) != h * w:
        raise ValueError(f"RLE runs add up to {sum(runs)}, not {h} x {w} = {h * w}")
    values = np.zeros(len(runs), bool)
    values[1::2] = True
    flat = np.repeat(values, runs)
    return flat.reshape(w, h).T


def polygon_mask(polygons: Polygons, width: int, height: int) -> np.ndarray:
    """The bool ``[height, width]`` mask of polygons: the pixels whose centre lies inside one of them.

    Each polygon is ``(x0, y0, x1, y1, ...)`` in pixels with edges at integers (pixel ``(i, j)`` has its
    centre at ``(i + 0.5, j + 0.5)``); inside is the even-odd rule, a centre on a left or top edge
    is inside and on a right or bottom edge outside (so a rectangle ``x0, y0, x1, y1`` with integer
    corners covers exactly the pixels ``x0 <= i < x1``, ``y0 <= j < y1``). An object's polygons are
    united. pycocotools' ``annToMask`` (its own scan conversion) differs at most on pixels whose
    centre is within a pixel of the outline.
    """
    out = np.zeros((height, width), bool)
    if not width or not height:
        return out
    yc = np.arange(height, dtype=np.float64)[:, None] + 0.5
    for poly in polygons:
        pts = np.asarray(poly[: len(poly) // 2 * 2], np.float64).reshape(-1, 2)
        if len(pts) < 3:
            continue
        x0, y0 = pts[:, 0][None, :], pts[:, 1][None, :]
        x1, y1 = np.roll(pts[:, 0], -1)[None, :], np.roll(pts[:, 1], -1)[None, :]
        crosses = (y0 <= yc) != (y1 <= yc)  # the edge spans the row's centre line (half-open in y)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = x0 + (yc - y0) * (x1 - x0) / (y1 - y0)
        rows, cols = np.nonzero(crosses)
        # a crossing at x toggles every pixel whose centre is at or right of it: i >= ceil(x - 0.5)
        start = np.clip(np.ceil(x[rows, cols] - 0.5), 0, width).astype(np.int64)
        toggles = np.zeros((height, width + 1), np.int64)
        np.add.at(toggles, (rows, start), 1)
        out |= (np.cumsum(toggles[:, :width], axis=1) & 1).astype(bool)
    return out


def segment_region(seg: Segment, width: int, height: int) -> np.ndarray:
    """The bool ``[height, width]`` pixels of one segment (:func:`rle_mask` or :func:`polygon_mask`).

    Raises:
        ValueError: an RLE whose size is not the image's, or whose runs do not fit it.
    """
    if isinstance(seg.shape, Rle):
        if tuple(seg.shape.size) != (height, width):
            raise ValueError(f"RLE of size {list(seg.shape.size)} on a {width}x{height} image")
        return rle_mask(seg.shape)
    return polygon_mask(seg.shape, width, height)


def semantic_mask(segments: Sequence[Segment], width: int, height: int) -> np.ndarray:
    """uint8 ``[height, width]``: 0 (background) painted with each segment's class (crowds IGNORE), the smaller
    segment on top where they overlap, by the rule of :func:`paint_instances` (so a pixel's class is that of the
    object the instance map names there).

    Raises:
        ValueError: an RLE whose size is not the image's, or whose runs do not fit it.
    """
    values = np.array([IGNORE if s.crowd else s.label for s in segments] + [0], np.uint8)
    rows = instance_map(segments, width, height)
    return values[rows]  # row -1 (no segment) picks the trailing background


def paint_instances(regions: Sequence[np.ndarray], width: int, height: int) -> np.ndarray:
    """int16 ``[height, width]`` object rows from each object's pixels (``regions[k]``: flat row-major indices):
    -1, painted with row ``k`` over ``regions[k]`` from the largest region to the smallest (ties: in row order),
    so the smaller object is on top."""
    order = sorted(range(len(regions)), key=lambda k: (-len(regions[k]), k))
    flat = np.full(width * height, -1, np.int16)
    for k in order:
        flat[regions[k]] = k
    return flat.reshape(height, width)


def instance_map(segments: Sequence[Segment], width: int, height: int) -> np.ndarray:
    """int16 ``[height, width]``: each pixel the row (index in ``segments``) of the smallest segment covering it,
    -1 where none does (:func:`paint_instances`). An object without a segmentation is a segment with no polygon.

    Raises:
        ValueError: an RLE whose size is not the image's, or whose runs do not fit it.
    """
    return paint_instances([np.flatnonzero(segment_region(s, width, height)) for s in segments], width, height)


def parse_segmentation(value: Any, label: int, crowd: bool) -> Segment:
    """A COCO annotation's ``segmentation`` value as a :class:`Segment`; ``ValueError`` (one line) if malformed."""
    if isinstance(value, dict):
        size, counts = value.get("size"), value.get("counts")
        if not (isinstance(size, list) and len(size) == 2 and all(isinstance(x, int) and x > 0 for x in size)):
            raise ValueError(f"RLE size {size!r} is not [height, width]")
        if isinstance(counts, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in counts):
            return Segment(label, crowd, Rle((size[0], size[1]), tuple(counts)))
        if isinstance(counts, str):
            return Segment(label, crowd, Rle((size[0], size[1]), counts))
        raise ValueError("RLE counts are neither a list of ints nor a string")
    if isinstance(value, list) and all(isinstance(p, list) for p in value):
        polys = []
        for p in value:
            if len(p) < 6 or len(p) % 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p):
                raise ValueError("a polygon is not an even list of at least 6 numbers")
            polys.append(tuple(float(x) for x in p))
        return Segment(label, crowd, tuple(polys))
    raise ValueError("segmentation is neither polygons nor an RLE")


__all__ = [
    "Polygons",
    "Rle",
    "Segment",
    "instance_map",
    "paint_instances",
    "parse_segmentation",
    "polygon_mask",
    "rle_counts",
    "rle_mask",
    "rle_of",
    "rle_string",
    "segment_region",
    "semantic_mask",
]
