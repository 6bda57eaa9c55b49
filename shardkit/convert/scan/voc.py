"""``voc:DIR`` as SRC: a Pascal VOC folder (``VOC2012/``, or a ``VOCdevkit/`` holding one such folder).

Layout: ``Annotations/<id>.xml`` (one per image), ``JPEGImages/<filename>``, optional
``ImageSets/Main/{train,val,trainval,test}.txt`` (image ids, one per line) and, with ``--masks``,
``SegmentationClass/<id>.png`` (palette PNGs whose index is the class, 255 the void border).

Splits: the ``ImageSets/Main`` lists ``train``, ``val`` and ``test`` that exist (``trainval`` only
when neither ``train`` nor ``val`` does: it is their union); with ``--masks``, the
``ImageSets/Segmentation`` lists instead when that folder exists (the images that have masks);
without any list, every annotation file is one split. An id listed without its annotation file is
skipped as ``missing_file``.

Classes: ``["background", *VOC's 20 names]`` (:data:`VOC_CLASSES`, already sorted) when every
object's ``<name>`` is one of them, so that class ``c`` is ``SegmentationClass`` value ``c``;
otherwise the sorted names found (refused with ``--masks``: the PNGs' values would name other classes).

Boxes: VOC's ``<bndbox>`` holds 1-based pixel indices, both ends included: the box covering
pixels ``xmin..xmax`` (1-based) has the edges ``(xmin - 1, ymin - 1, xmax, ymax)`` in shardkit's
coordinates (edges at integers, from 0), so a box ``1, 1, W, H`` is the whole image. Boxes are
checked against the ``<size>`` of the annotation (the image header when ``<size>`` is missing or 0):
``kept``, ``clipped``, or skipped as ``degenerate_box`` / ``outside_image``.

``<difficult>1</difficult>`` objects are kept as crowd regions (``iscrowd`` 1): COCO-style evaluation
ignores them, as VOC's does, and a training step may drop or keep them by that flag. Each sample's
``.json`` records its ``voc_id``.

XML is parsed with :mod:`xml.etree.ElementTree` after refusing a document type declaration
(``<!DOCTYPE``/``<!ENTITY``: no entity expansion) and any file above :data:`MAX_XML_BYTES`; a
malformed file is a one-line :class:`~shardkit.errors.ConvertError` naming the file and the element.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig, valid_split_name
from shardkit.convert.scan.detection import (
    NO_MASK,
    Tally,
    describe,
    finish,
    image_size,
    objects_of,
    place_box,
    total_annotations,
)
from shardkit.convert.scan.source import Reader, ScannedSource, SourceFile, SplitSource
from shardkit.errors import ConvertError

#: Pascal VOC's 20 classes (sorted, as the ``SegmentationClass`` PNGs number them from 1)
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)  # fmt: skip
#: the largest annotation file read (VOC's are a few KiB)
MAX_XML_BYTES = 1 << 20
_SPLIT_LISTS = ("train", "val", "test")


def voc_root(path: str) -> str:
    """The folder holding ``Annotations/``: ``path`` itself, or its only ``VOC*`` child holding one."""
    if not os.path.isdir(path):
        raise ConvertError(f"voc:{path}: not a folder" if os.path.exists(path) else f"voc:{path}: no such folder")
    if os.path.isdir(os.path.join(path, "Annotations")):
        return path
    kids = sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d, "Annotations")))
    if len(kids) == 1:
        return os.path.join(path, kids[0])
    found = f" (found {', '.join(kids)}: name one)" if kids else ""
    raise ConvertError(f"voc:{path}: no Annotations/ folder{found}; expected a VOC folder like VOCdevkit/VOC2012")


def read_xml(path: str) -> ET.Element:
    """The root element of a VOC annotation file; :class:`ConvertError` naming it if unsafe or malformed."""
    with open(path, "rb") as f:
        data = f.read(MAX_XML_BYTES + 1)
    if len(data) > MAX_XML_BYTES:
        raise ConvertError(f"{path}: annotation file larger than {MAX_XML_BYTES} bytes; is it a VOC annotation?")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ConvertError(f"{path}: annotation file declares a DOCTYPE or ENTITY; refused (remove the declaration)")
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise ConvertError(f"{path}: not valid XML ({exc})") from None


def _text(path: str, el: ET.Element, tag: str, where: str) -> str:
    child = el.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise ConvertError(f"{path}: {where}<{tag}> is missing or empty")
    return child.text.strip()


def _num(path: str, el: ET.Element, tag: str, where: str) -> float:
    text = _text(path, el, tag, where)
    try:
        return float(text)
    except ValueError:
        raise ConvertError(f"{path}: {where}<{tag}> is {text!r}, not a number") from None


def _size(path: str, root: ET.Element, image: str) -> tuple[int, int]:
    """``(width, height)`` from ``<size>``, else from the image header (EXIF-oriented)."""
    size = root.find("size")
    if size is not None:
        try:
            w, h = (
                int(float((size.findtext("width") or "0").strip())),
                int(float((size.findtext("height") or "0").strip())),
            )
        except ValueError:
            raise ConvertError(f"{path}: <size> holds a width or height that is not a number") from None
        if w > 0 and h > 0:
            return w, h
    got = image_size(image)
    if got is None:
        raise ConvertError(f"{path}: no <size> and the image {image} cannot be read for its size")
    return got


def _split_ids(root: str, masks: bool) -> list[tuple[str, list[str]]] | None:
    """``[(split, ids)]`` from the ``ImageSets`` lists, or ``None`` without lists."""
    seg = os.path.join(root, "ImageSets", "Segmentation")
    folder = seg if masks and os.path.isdir(seg) else os.path.join(root, "ImageSets", "Main")
    names = [s for s in _SPLIT_LISTS if os.path.isfile(os.path.join(folder, s + ".txt"))]
    if not names or names == ["test"]:
        names += ["trainval"] if os.path.isfile(os.path.join(folder, "trainval.txt")) else []
    if not names:
        return None
    out = []
    for s in names:
        with open(os.path.join(folder, s + ".txt"), encoding="utf-8") as f:
            ids = [line.split()[0] for line in f if line.strip()]
        out.append((s, sorted(set(ids))))
    return out


def scan_voc(path: str, options: ScanConfig, split: str) -> ScannedSource:
    """The :class:`ScannedSource` of a Pascal VOC folder (see module docstring)."""
    root = voc_root(path)
    ann = os.path.join(root, "Annotations")
    lists = _split_ids(root, options.masks)
    nested = lists is not None
    if lists is None:
        ids = sorted(n[:-4] for n in os.listdir(ann) if n.endswith(".xml"))
        lists = [(split, ids)]
    for s, _ in lists:
        if not valid_split_name(s):
            raise ConvertError(f"voc:{path}: split name {s!r} must use letters, digits, '_', '-' and '.'")
    parsed: dict[str, tuple[str, int, int, list[tuple[str, list[float], bool]]]] = {}
    for _, ids in lists:
        for i in ids:
            xml = os.path.join(ann, i + ".xml")
            if i in parsed or not os.path.isfile(xml):
                continue
            parsed[i] = _annotation(root, xml, i)
    names = sorted({o[0] for v in parsed.values() for o in v[3]})
    standard = set(names) <= set(VOC_CLASSES)
    if options.masks and not standard:
        other = next(n for n in names if n not in VOC_CLASSES)
        raise ConvertError(f"voc:{path}: class {other!r} is not one of VOC's 20; --masks needs VOC's class numbering")
    classes = ["background", *(VOC_CLASSES if standard else names)]
    index = {c: i for i, c in enumerate(classes)}
    splits = []
    for s, ids in lists:
        tally = Tally()
        out = SplitSource(s, root, [])
        for i in ids:
            if i not in parsed:
                out.skipped.append((f"JPEGImages/{i}.jpg", SkipReason.MISSING_FILE, f"no Annotations/{i}.xml"))
                continue
            filename, w, h, objs = parsed[i]
            rel = f"JPEGImages/{filename}"
            mask = f"SegmentationClass/{i}.png" if options.masks else None
            if mask and not os.path.isfile(os.path.join(root, mask)):
                out.skipped.append((rel, SkipReason.MISSING_FILE, f"no {mask} (--masks)"))
                tally.add(NO_MASK, len(objs))
                continue
            boxes, labels, crowd = [], [], []
            for name, (x0, y0, x1, y1), difficult in objs:
                outcome, box = place_box(x0, y0, x1, y1, w, h)
                tally.add(outcome)
                if box is not None:
                    boxes.append(box)
                    labels.append(index[name])
                    crowd.append(difficult)
            try:
                size = os.stat(os.path.join(root, rel)).st_size
            except OSError:
                size = 0  # the conversion skips it as missing_file
            out.files.append(
                SourceFile(rel, None, size, meta={"voc_id": i}, objects=objects_of(boxes, labels, crowd), mask=mask)
            )
        out.annotations = tally.as_dict()
        out.close(classes)
        splits.append(out)
    if not any(s.files for s in splits):
        raise ConvertError(f"voc:{path}: no image with an annotation file (looked in {ann})")
    total = total_annotations(splits)
    source = ScannedSource(
        root=f"voc:{path}",
        classes=classes,
        splits=sorted(splits, key=lambda s: s.name),
        nested=nested,
        reader=Reader(root),
        notes=[f"Pascal VOC {os.path.basename(root)}: {describe(classes, total)}"],
        local_dir=root,
        walked=False,
    )
    return finish(source, (), options.masks)


def _annotation(root: str, xml: str, i: str) -> tuple[str, int, int, list[tuple[str, list[float], bool]]]:
    """The image file, size and objects ``(class name, box with edges at integers, difficult)`` of the annotation
    file ``xml`` of image id ``i``."""
    top = read_xml(xml)
    filename = (top.findtext("filename") or "").strip() or i + ".jpg"
    image = os.path.join(root, "JPEGImages", filename)
    w, h = _size(xml, top, image)
    objs = []
    for n, o in enumerate(top.iter("object")):
        where = f"<object> {n}: "
        name = _text(xml, o, "name", where)
        bb = o.find("bndbox")
        if bb is None:
            raise ConvertError(f"{xml}: {where}<bndbox> is missing")
        edges = [_num(xml, bb, t, where) for t in ("xmin", "ymin", "xmax", "ymax")]
        difficult = (o.findtext("difficult") or "0").strip() not in ("0", "")
        objs.append((name, [edges[0] - 1, edges[1] - 1, edges[2], edges[3]], difficult))
    return filename, w, h, objs
