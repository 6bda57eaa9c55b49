"""Detection and segmentation sources made of demo scenes, in the layouts ``shardkit convert`` reads.

``shardkit sample-data DIR --format coco|voc|yolo|masks`` writes ``images`` scenes of
:mod:`shardkit.demo.scenes` (coloured rectangles on grey, exact targets) as a source a user would have:

* ``coco``: ``DIR/annotations.json`` (boxes, rectangle polygons as segmentations) + ``DIR/images/``;
* ``voc``: a VOC2012-style folder: ``DIR/Annotations/``, ``DIR/JPEGImages/``, ``DIR/ImageSets/Main/train.txt``;
* ``yolo``: ``DIR/images/``, ``DIR/labels/`` (``class cx cy w h``, normalised) and ``DIR/data.yaml`` (``names``);
* ``masks``: ``DIR/images/``, ``DIR/masks/`` (PNG, pixel value = class index) and ``DIR/classes.txt``.

Image ``i`` is :func:`shardkit.demo.scenes.scene` ``(seed, i, size)`` under the name ``{i:06d}.jpg``, so every
converted box and mask can be checked against the scene. :func:`convert_command` is the command that converts
the source (every split to ``DEST/<split>/``; here one split, ``train``).
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, Literal, get_args

from shardkit.demo.scenes import CLASSES, Scene, scene, scene_jpeg

SourceFormat = Literal["coco", "voc", "yolo", "masks"]
#: the detection/segmentation layouts :func:`write_source` writes
SOURCE_FORMATS: tuple[str, ...] = get_args(SourceFormat)


def image_name(index: int) -> str:
    """The file name of scene ``index`` in every layout."""
    return f"{index:06d}.jpg"


def convert_command(root: str, fmt: SourceFormat, dest: str | None = None) -> list[str]:
    """The ``shardkit convert`` arguments (``argv``, without the program name) that convert the ``fmt`` source
    written at ``root`` to ``dest`` (default ``root`` + ``-shards``)."""
    dest = dest or root.rstrip("/") + "-shards"
    if fmt == "coco":
        return ["convert", f"coco:{os.path.join(root, 'annotations.json')}", dest, "--masks"]
    if fmt == "voc":
        return ["convert", f"voc:{root}", dest]
    if fmt == "yolo":
        return ["convert", f"yolo:{root}", dest]
    if fmt == "masks":
        images, masks, classes = (os.path.join(root, p) for p in ("images", "masks", "classes.txt"))
        return ["convert", images, dest, "--mask-dir", masks, "--mask-classes", classes]
    raise ValueError(f"format must be one of {', '.join(SOURCE_FORMATS)}, not {fmt!r}")


def shell_command(argv: list[str]) -> str:
    """``argv`` as one ``shardkit ...`` line to paste into a shell."""
    return shlex.join(["shardkit", *argv])


def write_source(
    root: str,
    fmt: SourceFormat,
    *,
    images: int = 64,
    size: tuple[int, int] = (160, 120),
    seed: int = 0,
    quality: int = 95,
) -> int:
    """Write ``images`` scenes as a ``fmt`` source at ``root`` (created); returns the number of objects written."""
    if fmt not in SOURCE_FORMATS:
        raise ValueError(f"format must be one of {', '.join(SOURCE_FORMATS)}, not {fmt!r}")
    if images < 1:
        raise ValueError(f"images must be at least 1, not {images}")
    folder = {"voc": "JPEGImages"}.get(fmt, "images")
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    scenes = [scene(seed, i, size) for i in range(images)]
    for i, s in enumerate(scenes):
        with open(os.path.join(root, folder, image_name(i)), "wb") as f:
            f.write(scene_jpeg(s, quality))
    writer = {"coco": _coco, "voc": _voc, "yolo": _yolo, "masks": _masks}[fmt]
    writer(root, scenes, size)
    return sum(len(s.objects.boxes) for s in scenes)


def _boxes(s: Scene) -> list[tuple[list[int], int]]:
    """The scene's ``([x0, y0, x1, y1], class)`` pairs (whole pixels, edges at integers)."""
    return [([int(v) for v in b], int(c)) for b, c in zip(s.objects.boxes.tolist(), s.objects.labels.tolist())]


def _coco(root: str, scenes: list[Scene], size: tuple[int, int]) -> None:
    """``annotations.json``: categories ``1..6`` = the scene classes, a rectangle polygon per box."""
    w, h = size
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for i, s in enumerate(scenes):
        images.append({"id": i + 1, "file_name": f"images/{image_name(i)}", "width": w, "height": h})
        for (x0, y0, x1, y1), c in _boxes(s):
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": c,
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]],
                    "iscrowd": 0,
                }
            )
    categories = [{"id": c, "name": name, "supercategory": "shape"} for c, name in enumerate(CLASSES) if c > 0]
    doc = {"images": images, "annotations": annotations, "categories": categories}
    with open(os.path.join(root, "annotations.json"), "w") as f:
        json.dump(doc, f)


def _voc(root: str, scenes: list[Scene], size: tuple[int, int]) -> None:
    """``Annotations/<id>.xml`` (1-based boxes, both ends included) and ``ImageSets/Main/train.txt``."""
    w, h = size
    os.makedirs(os.path.join(root, "Annotations"), exist_ok=True)
    os.makedirs(os.path.join(root, "ImageSets", "Main"), exist_ok=True)
    for i, s in enumerate(scenes):
        parts = [
            f"<annotation><folder>VOC2012</folder><filename>{image_name(i)}</filename>"
            f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>"
        ]
        for (x0, y0, x1, y1), c in _boxes(s):
            parts.append(
                f"<object><name>{CLASSES[c]}</name><pose>Unspecified</pose><truncated>0</truncated>"
                f"<difficult>0</difficult><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
                f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            )
        with open(os.path.join(root, "Annotations", f"{i:06d}.xml"), "w") as f:
            f.write("".join(parts) + "</annotation>\n")
    with open(os.path.join(root, "ImageSets", "Main", "train.txt"), "w") as f:
        f.write("".join(f"{i:06d}\n" for i in range(len(scenes))))


def _yolo(root: str, scenes: list[Scene], size: tuple[int, int]) -> None:
    """``labels/<stem>.txt`` (YOLO class ``k`` is scene class ``k + 1``) and ``data.yaml``."""
    w, h = size
    os.makedirs(os.path.join(root, "labels"), exist_ok=True)
    for i, s in enumerate(scenes):
        lines = [
            f"{c - 1} {(x0 + x1) / 2 / w:.8f} {(y0 + y1) / 2 / h:.8f} {(x1 - x0) / w:.8f} {(y1 - y0) / h:.8f}\n"
            for (x0, y0, x1, y1), c in _boxes(s)
        ]
        with open(os.path.join(root, "labels", f"{i:06d}.txt"), "w") as f:
            f.write("".join(lines))
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write("path: .\ntrain: images\nnames: [" + ", ".join(CLASSES[1:]) + "]\n")


def _masks(root: str, scenes: list[Scene], size: tuple[int, int]) -> None:
    """``masks/<stem>.png`` (the scene's class mask) and ``classes.txt`` (line ``i`` is class ``i``)."""
    from PIL import Image

    os.makedirs(os.path.join(root, "masks"), exist_ok=True)
    for i, s in enumerate(scenes):
        Image.fromarray(s.mask).save(os.path.join(root, "masks", f"{i:06d}.png"))
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("".join(name + "\n" for name in CLASSES))


__all__ = ["SOURCE_FORMATS", "SourceFormat", "convert_command", "image_name", "shell_command", "write_source"]
