"""``coco:ANNOTATIONS.json`` as SRC: a COCO detection / keypoint / segmentation annotation file.

Images come from ``images`` (``id``, ``file_name`` relative to ``--root``, default the json's
folder, ``width``, ``height``), one sample each, sorted by ``file_name``; an image without any
annotation is kept with no box. Classes are ``["background", *names]`` with the categories sorted
by ``id`` (category id ``c`` is the class at its rank + 1, whatever gaps the ids have: COCO's 80
categories have ids 1..90). Each annotation's ``bbox`` ``[x, y, w, h]`` becomes the box
``(x, y, x + w, y + h)`` in the image's pixels (edges at integers), with its ``iscrowd`` flag; when
categories declare ``keypoints`` (their names; every such category must declare the same list),
each object gets ``K`` ``(x, y, v)`` (all zero for an object of a category without keypoints; ``v``
set to 0 for a point outside the image), and the flip pairs are found by the names (``left_eye`` /
``right_eye``). With ``--masks``, each kept annotation's ``segmentation`` (polygons or RLE) is
painted into the sample's semantic mask, the smaller on top where they overlap (as in the instance map),
crowd regions as ``255`` (ignore). With
``--instances`` (either or both), each stored object's segmentation is painted into the sample's instance map
(one object per pixel, the smaller on top where they overlap, crowd regions included; an object without a
segmentation has an empty mask): :func:`shardkit.convert.segments.instance_map`.

Every annotation is counted in ``SplitSource.annotations``: ``kept``, ``clipped`` (its box reached
outside the image and was cut to it), or skipped: ``no_image`` (its ``image_id`` is not in
``images``), ``bad_category`` (its ``category_id`` is not in ``categories``), ``degenerate_box``
(``w`` or ``h`` <= 0), ``outside_image`` (no part of the box on the image). An image listed but
missing on disk is the conversion's ``missing_file`` skip. A malformed file (a key missing or of
the wrong type) is a one-line :class:`~shardkit.errors.ConvertError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
from typing import Any

from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.detection import (
    BAD_CATEGORY,
    DEGENERATE_BOX,
    NO_IMAGE,
    Tally,
    describe,
    finish,
    objects_of,
    place_box,
)
from shardkit.convert.scan.source import Reader, ScannedSource, SourceFile, SplitSource
from shardkit.convert.segments import Rle, Segment, parse_segmentation, rle_counts
from shardkit.errors import ConvertError, StorageError
from shardkit.storage import fs as storage


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _id(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


class _File:
    """The annotation file, for one-line errors naming it and the key."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, what: str) -> ConvertError:
        return ConvertError(f"{self.path}: {where}: {what}")

    def items(self, data: dict[str, Any], key: str, required: bool = True) -> list[dict[str, Any]]:
        v = data.get(key)
        if v is None and not required:
            return []
        if not isinstance(v, list):
            raise self.fail(key, "missing or not a list" if v is None else f"is a {type(v).__name__}, not a list")
        bad = next((i for i, x in enumerate(v) if not isinstance(x, dict)), None)
        if bad is not None:
            raise self.fail(f"{key}[{bad}]", "is not an object")
        return v


def _load(path: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    try:
        raw = storage.read_bytes(path, **storage_options)
    except StorageError as exc:
        raise ConvertError(f"coco:{exc}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConvertError(f"{path}: not a COCO annotation file: not JSON ({str(exc)[:120]})") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: not a COCO annotation file: the top level is not an object with 'images'")
    return data


def _categories(f: _File, data: dict[str, Any]) -> tuple[list[str], dict[Any, int], list[str], set[Any]]:
    """Class names (background first), category id -> class index, keypoint names, ids with keypoints."""
    cats = f.items(data, "categories")
    seen: dict[Any, int] = {}
    for i, c in enumerate(cats):
        if not _id(c.get("id")):
            raise f.fail(f"categories[{i}].id", f"{c.get('id')!r} is not an integer id")
        if not isinstance(c.get("name"), str) or not c["name"].strip():
            raise f.fail(f"categories[{i}].name", f"{c.get('name')!r} is not a name")
        if c["id"] in seen:
            raise f.fail(f"categories[{i}].id", f"id {c['id']!r} is also categories[{seen[c['id']]}]")
        seen[c["id"]] = i
    order = sorted(cats, key=lambda c: (isinstance(c["id"], str), c["id"]))
    names = [c["name"].strip() for c in order]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise f.fail("categories", f"two categories are named {twice!r}; give each its own name")
    kp_names: list[str] = []
    with_kp: set[Any] = set()
    for c in order:
        kp = c.get("keypoints")
        if kp in (None, []):
            continue
        where = f"categories[{seen[c['id']]}].keypoints"
        if not isinstance(kp, list) or not all(isinstance(k, str) for k in kp):
            raise f.fail(where, "is not a list of keypoint names")
        if kp_names and kp != kp_names:
            raise f.fail(where, f"differs from another category's {kp_names[:3]}...: one keypoint list per dataset")
        kp_names = list(kp)
        with_kp.add(c["id"])
    return ["background", *names], {c["id"]: i + 1 for i, c in enumerate(order)}, kp_names, with_kp


def _images(f: _File, data: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    names: dict[str, int] = {}
    for i, im in enumerate(f.items(data, "images")):
        if not _id(im.get("id")):
            raise f.fail(f"images[{i}].id", f"{im.get('id')!r} is not an image id")
        name = im.get("file_name")
        if not isinstance(name, str) or not name:
            raise f.fail(f"images[{i}].file_name", f"{name!r} is not a file name")
        norm = posixpath.normpath(name.replace("\\", "/"))
        if norm.startswith(("/", "../")) or norm == ".." or "://" in name:
            raise f.fail(f"images[{i}].file_name", f"{name!r} is not a path relative to --root")
        for key in ("width", "height"):
            if not _positive_int(im.get(key)):
                raise f.fail(f"images[{i}].{key}", f"{im.get(key)!r} is not a positive integer")
        if im["id"] in out:
            raise f.fail(f"images[{i}].id", f"id {im['id']!r} is listed twice")
        if norm in names:
            raise f.fail(f"images[{i}].file_name", f"{name!r} is also images[{names[norm]}]")
        names[norm] = i
        out[im["id"]] = {"id": im["id"], "file": norm, "width": im["width"], "height": im["height"], "objs": []}
    return out


#: COCO keypoint (pixel index) -> shardkit's edge coordinates: the centre of that pixel
KEYPOINT_SHIFT = 0.5


def _keypoints(f: _File, where: str, raw: Any, k: int, width: int, height: int) -> list[list[float]]:
    if raw is None:
        return [[0.0, 0.0, 0.0]] * k
    if not isinstance(raw, list) or len(raw) != 3 * k or not all(_number(x) for x in raw):
        raise f.fail(where, f"is not {3 * k} numbers (x, y, v for each of the {k} keypoints)")
    out = []
    for j in range(k):
        x, y, v = (float(t) for t in raw[3 * j : 3 * j + 3])
        if v not in (0.0, 1.0, 2.0):
            raise f.fail(where, f"visibility {raw[3 * j + 2]!r} of keypoint {j} is not 0, 1 or 2")
        if v:  # COCO keypoints are pixel indices (detectron2 reads them so too): + 0.5 is the pixel's centre in edges
            x, y = x + KEYPOINT_SHIFT, y + KEYPOINT_SHIFT
        if not (0.0 <= x <= width and 0.0 <= y <= height):
            v = 0.0
        out.append([x, y, v])
    return out


def _segment(f: _File, where: str, raw: Any, label: int, crowd: bool, width: int, height: int) -> Segment | None:
    if raw is None or raw == []:
        return None
    try:
        seg = parse_segmentation(raw, label, crowd)
    except ValueError as exc:
        raise f.fail(where, str(exc)) from None
    if isinstance(seg.shape, Rle):
        if tuple(seg.shape.size) != (height, width):
            raise f.fail(
                where, f"RLE size {list(seg.shape.size)} is not the image's [height, width] [{height}, {width}]"
            )
        try:
            runs = rle_counts(seg.shape.counts) if isinstance(seg.shape.counts, str) else list(seg.shape.counts)
        except ValueError as exc:
            raise f.fail(where, str(exc)) from None
        if min(runs, default=0) < 0 or sum(runs) != height * width:
            raise f.fail(where, f"RLE runs add up to {sum(runs)}, not {height} x {width} = {height * width}")
    return seg


def scan_coco(path: str, options: ScanConfig, split: str, **storage_options: Any) -> ScannedSource:
    """The :class:`ScannedSource` of a COCO annotation file (see module docstring).

    Args:
        path: the annotation json (a path or URL).
        options: ``root`` (the images' folder; default: the json's folder) and ``masks``.
        split: the name of the one split.
    """
    f = _File(path)
    data = _load(path, storage_options)
    classes, index, kp_names, with_kp = _categories(f, data)
    images = _images(f, data)
    k = len(kp_names)
    tally = Tally()
    for i, a in enumerate(f.items(data, "annotations", required=False)):
        where = f"annotations[{i}]" + (f" (id {a['id']!r})" if "id" in a else "")
        im = images.get(a.get("image_id")) if _id(a.get("image_id")) else None
        if im is None:
            tally.add(NO_IMAGE)
            continue
        cat = a.get("category_id")
        if not _id(cat) or cat not in index:
            tally.add(BAD_CATEGORY)
            continue
        bbox = a.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(_number(x) for x in bbox):
            raise f.fail(f"{where}.bbox", f"{bbox!r} is not [x, y, width, height] numbers")
        x, y, w, h = (float(v) for v in bbox)
        if w <= 0 or h <= 0:
            tally.add(DEGENERATE_BOX)
            continue
        outcome, box = place_box(x, y, x + w, y + h, im["width"], im["height"])
        tally.add(outcome)
        if box is None:
            continue
        crowd = a.get("iscrowd", 0)
        if crowd not in (0, 1) or isinstance(crowd, float):
            raise f.fail(f"{where}.iscrowd", f"{crowd!r} is not 0 or 1")
        kp = None
        if k:
            raw = a.get("keypoints") if cat in with_kp else None
            kp = _keypoints(f, f"{where}.keypoints", raw, k, im["width"], im["height"])
        seg = None
        if options.masks or options.instances:
            seg = _segment(
                f, f"{where}.segmentation", a.get("segmentation"), index[cat], bool(crowd), im["width"], im["height"]
            )
        im["objs"].append((box, index[cat], bool(crowd), kp, seg))
    root = options.root
    if root is None:
        root = os.path.dirname(os.path.abspath(path)) if storage.is_local(path) else posixpath.dirname(path)
    files = _files(images, root, k, options)
    counts = tally.as_dict()
    out = SplitSource(split, root, files, annotations=counts)
    out.close(classes)
    if not files:
        raise ConvertError(f"{path}: 'images' is empty: no image to convert")
    source = ScannedSource(
        root=f"coco:{path}",
        classes=classes,
        splits=[out],
        nested=False,
        reader=Reader(root, storage_options),
        notes=[f"COCO {os.path.basename(path)}: {describe(classes, counts)}"],
        local_dir=storage.local_path(root) if storage.is_local(root) else None,
        walked=False,
    )
    return finish(source, kp_names, options.masks, options.instances)


def _files(images: dict[Any, dict[str, Any]], root: str, k: int, options: ScanConfig) -> list[SourceFile]:
    """One item per image with its objects, ``k`` keypoints each, and segments; an image's bytes are its file's
    size below a local ``root`` (0 for a remote one)."""
    files = []
    for im in images.values():
        objs = im["objs"]
        size = 0  # a remote root: the bytes are counted as the conversion reads them
        if storage.is_local(root):
            try:
                size = os.stat(os.path.join(storage.local_path(root), *im["file"].split("/"))).st_size
            except OSError:
                pass  # the conversion skips it as missing_file
        files.append(
            SourceFile(
                im["file"],
                None,
                size,
                meta={"image_id": im["id"]},
                declared_size=(int(im["width"]), int(im["height"])),
                objects=objects_of(
                    [o[0] for o in objs], [o[1] for o in objs], [o[2] for o in objs], [o[3] for o in objs], k
                ),
                segments=_segments(objs, options),
            )
        )
    return files


def _segments(objs: list[tuple[Any, ...]], options: ScanConfig) -> tuple[Segment, ...] | None:
    """An image's segments: with ``instances``, one per object (an object without a segmentation: no polygon, no
    pixel), else (``masks``) those of the objects that have one; ``None`` without either option."""
    if options.instances:
        return tuple(o[4] if o[4] is not None else Segment(o[1], o[2], ()) for o in objs)
    return tuple(o[4] for o in objs if o[4] is not None) if options.masks else None
