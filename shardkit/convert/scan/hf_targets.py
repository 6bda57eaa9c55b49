"""Hugging Face detection and segmentation datasets: ``--objects-col`` (boxes) and ``--mask-col`` (masks).

``--objects-col objects`` names a column of per-image objects in the common Hub layout
(``cppe-5``, ``detection-datasets/*``): ``Sequence({"bbox": Sequence(float, length=4), "category":
ClassLabel})`` (each row a dict of lists) or ``List({...})`` (each row a list of dicts). ``bbox`` is
COCO's ``[x, y, width, height]`` in the image's pixels (edges at integers) and becomes ``[x, y, x + w,
y + h]``; ``category`` is a ClassLabel index (its names are the classes), a class name, or an
integer index (classes ``"0"`` .. ``"K-1"``). Classes are ``["background", *names]`` (box label =
category index + 1: torchvision's convention). ``--mask-col mask`` names an ``Image`` column of masks
(8-bit grey or palette PNG, class index per pixel, 255 = no class) of the image's size: with
``--objects-col`` its values index the same classes (0 = background); without, the classes are
``--mask-classes FILE`` or the mask values ``"0"`` .. ``"K-1"`` (every mask is read at discovery).
No image label is read (``--label-col`` does not apply).

Accounting (``annotations`` in the manifest): a box that is not 4 finite numbers is ``bad_box``, one
with ``w <= 0`` or ``h <= 0`` ``degenerate_box``, a category that is missing or out of range
``bad_category``; the rest are ``kept`` (clipped or dropped at encode time when they reach outside the
image). A row whose ``bbox`` and ``category`` lists differ in length is skipped as ``bad_row``, its
annotations counted ``image_skipped``. A split's counts (a :class:`~shardkit.convert.scan.detection.Tally`) list
``kept`` and each other outcome that happened to at least one box.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.detection import KEPT, Tally
from shardkit.convert.scan.hf import MASK_REF, HFReader, _byte_sizes, _load, _parts
from shardkit.convert.scan.maskdir import mask_values, read_class_names
from shardkit.convert.scan.source import ScannedSource, SourceFile, SplitSource, is_index
from shardkit.errors import ConvertError
from shardkit.format.fields import IGNORE, Objects

_REF = "hf:"


def _category_feature(datasets: Any, feat: Any) -> tuple[str, Any]:
    """``(layout, category feature)``: layout ``dict`` (a dict of lists) or ``list`` (a list of dicts)."""
    if isinstance(feat, dict):
        inner = feat.get("category")
        return "dict", getattr(inner, "feature", inner)
    inner = getattr(feat, "feature", None)
    if isinstance(inner, dict):
        return "list", inner.get("category")
    return "", None


def _row_objects(value: Any, layout: str) -> tuple[list[Any], list[Any]] | None:
    """``(bboxes, categories)`` of one row's objects, or ``None`` if they do not pair up."""
    if value is None:
        return [], []
    if layout == "dict":
        boxes, cats = list(value.get("bbox") or []), list(value.get("category") or [])
    else:
        boxes = [o.get("bbox") for o in value]
        cats = [o.get("category") for o in value]
    return (boxes, cats) if len(boxes) == len(cats) else None


def _box(b: Any) -> tuple[list[float] | None, str]:
    """xyxy of a COCO ``[x, y, w, h]``, or ``(None, reason)``."""
    if not isinstance(b, (list, tuple)) or len(b) != 4:
        return None, "bad_box"
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in b):
        return None, "bad_box"
    x, y, w, h = (float(v) for v in b)
    if w <= 0 or h <= 0:
        return None, "degenerate_box"
    return [x, y, x + w, y + h], ""


def scan_hf_targets(src: Any, opts: ScanConfig, split: str = "train") -> ScannedSource:
    """The :class:`ScannedSource` of a Hugging Face dataset with ``--objects-col`` and/or ``--mask-col``."""
    import datasets

    what = f"hf:{src}" if isinstance(src, str) else type(src).__name__
    _check_options(opts)
    ds = _load(src) if isinstance(src, str) else src
    if not isinstance(ds, (datasets.Dataset, datasets.DatasetDict)):
        raise ConvertError(f"{what}: not a datasets.Dataset or DatasetDict")
    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    rows, layouts, names = _read_parts(datasets, what, parts, opts)
    index = {n: i for i, n in enumerate(names or [])}
    width = max(8, len(str(max((r[1] for r in rows), default=0))))
    splits = {name: SplitSource(name=name, directory=what, files=[]) for name in sorted(parts)}
    tallies = {name: Tally() for name in splits}
    for name, row, size, value in rows:
        s = splits[name]
        ident = f"row-{row:0{width}d}"
        objects = None
        if opts.objects_col is not None:
            objects = _objects(s, tallies[name], ident, row, value, layouts[name], index, names or [])
            if objects is None:
                continue
        mask = f"{MASK_REF}{name}:{row}" if opts.mask_col is not None else None
        s.files.append(SourceFile(ident, None, size, f"{_REF}{name}:{row}", None, objects=objects, mask=mask))
    reader = HFReader(
        src if isinstance(src, str) else None,
        None if isinstance(src, str) else _parts(ds, split, opts.image_col, opts.mask_col),
        split,
        opts.image_col,
        opts.mask_col,
    )
    classes, notes = _classes(opts, names, splits, reader)
    if not any(s.files for s in splits.values()):
        raise ConvertError(f"{what}: no split has a row to convert")
    for name, s in splits.items():
        if opts.objects_col is not None:
            s.annotations = tallies[name].as_dict(always=(KEPT,))
        s.close(classes)
    fields = ("image",) + (("boxes",) if opts.objects_col is not None else ()) + (("mask",) if opts.mask_col else ())
    return ScannedSource(
        root=what,
        classes=classes,
        splits=list(splits.values()),
        nested=isinstance(ds, datasets.DatasetDict),
        reader=reader,
        notes=notes,
        fields=fields,
    )


def _check_options(opts: ScanConfig) -> None:
    """Refuse the options that read an image label, and ``--mask-classes`` beside ``--objects-col``."""
    for flag, bad in (
        ("--label-col", opts.label_col != "label"),
        ("--target-col", bool(opts.target_cols)),
        ("--text-col", opts.text_col is not None),
    ):
        if bad:
            raise ConvertError(
                f"{flag} does not apply with --objects-col/--mask-col (no image label is read); leave it out"
            )
    if opts.mask_classes is not None and opts.objects_col is not None:
        raise ConvertError("--mask-classes does not apply with --objects-col (the categories name the classes)")


def _read_parts(
    datasets: Any, what: str, parts: dict[str, Any], opts: ScanConfig
) -> tuple[list[tuple[str, int, int, Any]], dict[str, str], list[str] | None]:
    """Every split's rows ``(split, row, image bytes, objects value)``, each split's objects layout and the
    category names (``None``: neither a ClassLabel nor any category); refuses a missing or non-objects column."""
    rows: list[tuple[str, int, int, Any]] = []  # split, row, image bytes, objects value
    layouts: dict[str, str] = {}
    names: list[str] | None = None
    for name, part in sorted(parts.items()):
        cols = list(part.column_names)
        for flag, col in (
            ("--image-col", opts.image_col),
            ("--objects-col", opts.objects_col),
            ("--mask-col", opts.mask_col),
        ):
            if col is not None and col not in cols:
                raise ConvertError(f"{what}: no column {col!r} ({flag}); its columns are: {', '.join(cols)}")
        part = part.cast_column(opts.image_col, datasets.Image(decode=False))
        sizes = _byte_sizes(part, opts.image_col)
        values: list[Any] = [None] * len(part)
        if opts.objects_col is not None:
            layout, cat = _category_feature(datasets, part.features[opts.objects_col])
            if not layout:
                raise ConvertError(
                    f"{what}: column {opts.objects_col!r} of split {name!r} is {part.features[opts.objects_col]!r}, "
                    "not objects (a Sequence of {'bbox': [x, y, w, h], 'category': ...})"
                )
            layouts[name] = layout
            if isinstance(cat, datasets.ClassLabel):
                if names is not None and names != list(cat.names):
                    raise ConvertError(f"{what}: split {name!r} has other category names than the first split")
                names = list(cat.names)
            values = part.select_columns([opts.objects_col]).to_dict()[opts.objects_col]
        rows += [(name, i, sizes[i], values[i]) for i in range(len(part))]
    if opts.objects_col is not None and names is None:  # categories given as names or as integer indices
        cats = [c for n, _, _, v in rows for c in (_row_objects(v, layouts[n]) or ([], []))[1] if c is not None]
        if cats and all(is_index(c) for c in cats):
            names = [str(i) for i in range(max(int(c) for c in cats) + 1)]
        else:
            names = sorted({str(c) for c in cats if not is_index(c)})
    return rows, layouts, names


def _objects(
    s: SplitSource, tally: Tally, ident: str, row: int, value: Any, layout: str, index: dict[str, int], names: list[str]
) -> Objects | None:
    """A row's objects, each box counted in ``tally`` (kept, or the reason it is not); ``None``: the row is
    skipped (``bad_row``, recorded in split ``s``), its boxes counted ``image_skipped``."""
    pair = _row_objects(value, layout)
    if pair is None:
        n = len((value or {}).get("bbox") or []) if isinstance(value, dict) else len(value or [])
        s.skipped.append(
            (ident, SkipReason.BAD_ROW, f"split {s.name} row {row}: bbox and category lists differ in length")
        )
        tally.add("image_skipped", n)
        return None
    boxes, labels = [], []
    for b, c in zip(*pair):
        xyxy, why = _box(b)
        label = _label(c, index, names)
        if xyxy is not None and label is None:
            why = "bad_category"
        if xyxy is None or label is None:
            tally.add(why)
            continue
        boxes.append(xyxy)
        labels.append(label + 1)
        tally.add(KEPT)
    return Objects(np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64), np.zeros(len(labels), bool))


def _classes(
    opts: ScanConfig, names: list[str] | None, splits: dict[str, SplitSource], reader: HFReader
) -> tuple[list[str], list[str]]:
    """The classes and a note: ``background`` and the categories (objects), ``--mask-classes``, or ``0..K`` from
    the largest value in the masks."""
    notes = []
    if opts.objects_col is not None:
        classes = ["background", *(names or [])]
        if "background" in classes[1:]:
            raise ConvertError(
                f"{opts.objects_col!r}: a category is named 'background', the name of class 0 (no object; "
                "torchvision's convention): rename it, or remove it if no object uses it"
            )
        notes.append(f"{len(classes) - 1} categories from {opts.objects_col!r} (class 0 is background)")
    elif opts.mask_classes is not None:
        classes = read_class_names(opts.mask_classes)
        notes.append(f"{len(classes)} classes from --mask-classes {opts.mask_classes}")
    else:
        seen: set[int] = set()
        for s in splits.values():
            for f in s.files:
                try:
                    seen |= mask_values(reader.read(f.relpath, f.mask or "")) or set()
                except Exception:  # noqa: BLE001 - a missing or bad mask is skipped when encoded
                    continue
        top = max((v for v in seen if v != IGNORE), default=0)
        classes = [str(i) for i in range(top + 1)]
        notes.append(f"{len(classes)} classes 0..{top} from the mask values; --mask-classes FILE names them")
    return classes, notes


def _label(c: Any, index: dict[str, int], names: list[str]) -> int | None:
    """The category index of ``c`` (an index into ``names``, or a name), ``None`` if it is neither."""
    if c is None or isinstance(c, bool):
        return None
    if isinstance(c, int):
        return c if 0 <= c < len(names) else None
    return index.get(str(c))


__all__ = ["scan_hf_targets"]
