"""``yolo:DIR`` as SRC: a YOLO (ultralytics) detection folder.

Layout: ``DIR/images/<split>/**/<image>`` with ``DIR/labels/<split>/**/<stem>.txt`` beside it
(``images/`` without split folders: one split), or ``DIR/<split>/images`` + ``DIR/<split>/labels``
(Roboflow's export). A label file holds one object per line, ``class cx cy w h``, the centre and size
normalised by the image's width and height (a segmentation line ``class x1 y1 x2 y2 ...`` gives the
box around its points). An image without a label file has no object.

Class names: the ``names`` key of ``DIR/data.yaml`` (else the first ``DIR/*.yaml`` that has one), a
list or a ``{index: name}`` mapping, read with PyYAML when installed and otherwise with a small reader
of that one key (:func:`yaml_names`); else ``DIR/classes.txt`` (one name per line). Classes are
``["background", *names]``: YOLO class ``k`` is class ``k + 1``.

Boxes need the image's size, read from its header at scan time (upright: EXIF orientations 5 to 8
swap width and height, as ultralytics does). Every line is counted in ``SplitSource.annotations``:
``kept``, ``clipped``, or skipped: ``bad_line`` (not numbers, a class that is not an integer, a
number of values that is neither 5 nor a polygon), ``bad_category`` (class index outside
``names``), ``degenerate_box`` (``w`` or ``h`` <= 0), ``outside_image``, ``no_image`` (a label file
without its image, or an image whose header cannot be read: that image is skipped as ``corrupt``).
Pose labels (``kpt_shape``) are refused in one line (not supported yet).
"""

from __future__ import annotations

import json
import math
import os
import re

from shardkit.convert.imageproc import IMAGE_EXTENSIONS, SkipReason
from shardkit.convert.options import ScanConfig, valid_split_name
from shardkit.convert.scan.detection import (
    BAD_CATEGORY,
    BAD_LINE,
    DEGENERATE_BOX,
    NO_IMAGE,
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

_KEY = re.compile(r"^(names|kpt_shape)\s*:(.*)$")


def _scalar(text: str) -> str:
    """A YAML plain or quoted scalar as text (a trailing `` # comment`` dropped)."""
    t = text.strip()
    if t.startswith('"'):
        end = re.match(r'"(?:[^"\\]|\\.)*"', t)
        return str(json.loads(end.group(0))) if end else t.strip('"')
    if t.startswith("'"):
        end = re.match(r"'(?:[^']|'')*'", t)
        return end.group(0)[1:-1].replace("''", "'") if end else t.strip("'")
    return re.split(r"\s#", t, maxsplit=1)[0].strip()


def _flow_items(body: str) -> list[str]:
    """The comma-separated items of a YAML flow collection's inside (quotes respected)."""
    items, cur, quote = [], "", ""
    for ch in body:
        if quote:
            cur += ch
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            cur, quote = cur + ch, ch
        elif ch == ",":
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [i for i in items if i.strip()]


def yaml_names(text: str) -> tuple[list[str] | dict[int, str] | None, bool]:
    """The ``names`` value of a YOLO data yaml (a list, or ``{index: name}``) and whether it has ``kpt_shape``.

    Uses PyYAML when installed; otherwise reads only the top-level ``names`` key: a flow list
    (``[a, 'b c']``), a flow mapping (``{0: a, 1: b}``), or a block list (``- a``) or mapping (``0: a``).
    """
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dev dependency
        return tiny_yaml_names(text)
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(d, dict):
        return None, False
    names = d.get("names")
    if isinstance(names, list):
        return [str(n) for n in names], "kpt_shape" in d
    if isinstance(names, dict):
        try:
            return {int(k): str(v) for k, v in names.items()}, "kpt_shape" in d
        except (TypeError, ValueError):
            raise ValueError("names maps a key that is not a class index") from None
    return None, "kpt_shape" in d


def tiny_yaml_names(text: str) -> tuple[list[str] | dict[int, str] | None, bool]:
    """:func:`yaml_names` without PyYAML (the ``names`` and ``kpt_shape`` keys only)."""
    lines = text.splitlines()
    names: list[str] | dict[int, str] | None = None
    pose = False
    for n, line in enumerate(lines):
        m = _KEY.match(line)
        if not m:
            continue
        if m.group(1) == "kpt_shape":
            pose = True
            continue
        rest = m.group(2).strip()
        if rest.startswith(("[", "{")):
            close = "]" if rest[0] == "[" else "}"
            body, k = rest[1:], n + 1
            while close not in _outside_quotes(body) and k < len(lines):
                body, k = body + " " + lines[k].strip(), k + 1
            body = body[: _outside_quotes(body).rindex(close)] if close in _outside_quotes(body) else body
            items = _flow_items(body)
            if close == "]":
                names = [_scalar(i) for i in items]
            else:
                names = {int(_scalar(i.split(":", 1)[0])): _scalar(i.split(":", 1)[1]) for i in items}
            continue
        if rest and not rest.startswith("#"):
            raise ValueError(f"names: {rest[:40]!r} is neither a list nor a mapping")
        block: list[str] = []
        for nxt in lines[n + 1 :]:
            if nxt.strip() and not nxt.strip().startswith("#") and not nxt[:1].isspace() and not nxt.startswith("-"):
                break
            if nxt.strip() and not nxt.strip().startswith("#"):
                block.append(nxt.strip())
        if block and all(b.startswith("-") for b in block):
            names = [_scalar(b[1:]) for b in block]
        else:
            names = {int(_scalar(b.split(":", 1)[0])): _scalar(b.split(":", 1)[1]) for b in block if ":" in b}
    return names, pose


def _outside_quotes(text: str) -> str:
    """``text`` with every quoted part blanked (to find brackets and commas that are syntax)."""
    return re.sub(r"'(?:[^']|'')*'|\"(?:[^\"\\]|\\.)*\"", lambda m: " " * len(m.group(0)), text)


def yolo_class_names(root: str) -> tuple[list[str], str]:
    """The YOLO class names of ``root`` and the file they came from; :class:`ConvertError` if none."""
    yamls = sorted(n for n in os.listdir(root) if n.endswith((".yaml", ".yml")))
    yamls.sort(key=lambda n: n not in ("data.yaml", "data.yml"))
    for name in yamls:
        path = os.path.join(root, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
        try:
            names, pose = yaml_names(text)
        except ValueError as exc:
            raise ConvertError(f"{path}: {exc}") from None
        if pose:
            raise ConvertError(f"{path}: pose labels (kpt_shape) are not supported by yolo: sources yet")
        if names is None:
            continue
        if isinstance(names, dict):
            if sorted(names) != list(range(len(names))):
                raise ConvertError(f"{path}: names has indices {sorted(names)[:8]}, not 0..{len(names) - 1}")
            names = [names[i] for i in range(len(names))]
        if not names:
            raise ConvertError(f"{path}: names is empty")
        return [str(n) for n in names], path
    for path in (os.path.join(root, "classes.txt"), os.path.join(root, "labels", "classes.txt")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                names = [line.strip() for line in f if line.strip()]
            if names:
                return names, path
    raise ConvertError(f"yolo:{root}: no class names: add data.yaml with 'names: [...]' or classes.txt (one per line)")


def _layout(root: str, split: str) -> list[tuple[str, str, str]]:
    """``[(split, images folder, labels folder)]`` of a YOLO folder."""
    images = os.path.join(root, "images")
    if os.path.isdir(images):
        subs = sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))
        loose = any(n.lower().endswith(IMAGE_EXTENSIONS) for n in os.listdir(images))
        if subs and not loose:
            return [(s, os.path.join(images, s), os.path.join(root, "labels", s)) for s in subs]
        return [(split, images, os.path.join(root, "labels"))]
    kids = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, "images")))
    if kids:
        return [(s, os.path.join(root, s, "images"), os.path.join(root, s, "labels")) for s in kids]
    raise ConvertError(f"yolo:{root}: no images/ folder (expected images/<split>/ and labels/<split>/)")


def _walk(top: str) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        out.extend(os.path.join(dirpath, f) for f in filenames)
    return sorted(out)


def printed_precision(tokens: list[str]) -> float:
    """One unit in the last printed decimal of the finest of ``tokens`` (``0.902954``: ``1e-6``; ``1.5e-3``:
    ``1e-4``; ``1``: ``1.0``): how far apart two values printed like these can be."""
    places = 0
    for t in tokens:
        mantissa, _, exp = t.lower().partition("e")
        decimals = len(mantissa.partition(".")[2])
        try:
            places = max(places, decimals - (int(exp) if exp else 0))
        except ValueError:
            continue
    return 10.0 ** -min(places, 30)


def _snap(lo: float, hi: float, tol: float) -> tuple[float, float]:
    """``(lo, hi)`` (normalised) with an edge within ``tol`` outside ``[0, 1]`` moved onto the border."""
    return (0.0 if -tol <= lo < 0.0 else lo), (1.0 if 1.0 < hi <= 1.0 + tol else hi)


def _line_box(tokens: list[str], k: int) -> tuple[str, int, tuple[float, float, float, float]] | tuple[str, None, None]:
    """``(outcome, class, (x0, y0, x1, y1))`` of a label line's tokens (normalised), or ``(reason, None, None)``.

    An edge outside the image by no more than the rounding of the line's printed values is on the border: a value
    printed with ``d`` decimals is within half a unit ``u = 10**-d`` of the true one, so an edge ``cx +- w / 2`` is
    within ``0.75 u`` and a polygon vertex within ``0.5 u``; ``0.902954 + 0.194093 / 2 = 1.0000005`` is the border.
    """
    try:
        nums = [float(t) for t in tokens]
    except ValueError:
        return BAD_LINE, None, None
    if not all(math.isfinite(x) for x in nums) or nums[0] != int(nums[0]):
        return BAD_LINE, None, None
    u = printed_precision(tokens[1:])
    if len(nums) == 5:
        cx, cy, w, h = nums[1:]
        x0, x1, y0, y1 = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
        tol = 0.75 * u * (1 + 1e-9)
    elif len(nums) >= 7 and len(nums) % 2:
        xs, ys = nums[1::2], nums[2::2]
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)  # the box around the points: their extent
        tol = 0.5 * u * (1 + 1e-9)
    else:
        return BAD_LINE, None, None
    cls = int(nums[0])
    if not 0 <= cls < k:
        return BAD_CATEGORY, None, None
    if x1 <= x0 or y1 <= y0:
        return DEGENERATE_BOX, None, None
    (x0, x1), (y0, y1) = _snap(x0, x1, tol), _snap(y0, y1, tol)
    return "", cls, (x0, y0, x1, y1)


def parse_label_file(text: str, k: int, width: int, height: int, tally: Tally) -> tuple[list[list[float]], list[int]]:
    """Boxes (pixels) and class indices (``+ 1``: background first) of a label file's text; every line counted."""
    boxes, labels = [], []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        reason, cls, nbox = _line_box(tokens, k)
        if cls is None or nbox is None:
            tally.add(reason)
            continue
        x0, y0, x1, y1 = nbox
        outcome, box = place_box(x0 * width, y0 * height, x1 * width, y1 * height, width, height)
        tally.add(outcome)
        if box is not None:
            boxes.append(box)
            labels.append(cls + 1)
    return boxes, labels


def _count_lines(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.strip())


def scan_yolo(path: str, options: ScanConfig, split: str) -> ScannedSource:
    """The :class:`ScannedSource` of a YOLO folder (see module docstring)."""
    if not os.path.isdir(path):
        raise ConvertError(f"yolo:{path}: not a folder" if os.path.exists(path) else f"yolo:{path}: no such folder")
    names, names_file = yolo_class_names(path)
    classes = ["background", *names]
    layout = _layout(path, split)
    splits = []
    for s, images, labels in layout:
        if not valid_split_name(s):
            raise ConvertError(f"yolo:{path}: split folder name {s!r} must use letters, digits, '_', '-' and '.'")
        tally = Tally()
        out = SplitSource(s, images, [])
        used: set[str] = set()
        for img in _walk(images):
            rel = os.path.relpath(img, path).replace(os.sep, "/")
            if not img.lower().endswith(IMAGE_EXTENSIONS):
                out.skipped.append((rel, SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"))
                continue
            label = os.path.join(labels, os.path.splitext(os.path.relpath(img, images))[0] + ".txt")
            used.add(os.path.normpath(label))
            text = ""
            if os.path.isfile(label):
                with open(label, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            size = image_size(img)
            if size is None:
                tally.add(NO_IMAGE, sum(1 for line in text.splitlines() if line.strip()))
                out.skipped.append((rel, SkipReason.CORRUPT, "cannot read the image header for its size"))
                continue
            boxes, cls = parse_label_file(text, len(names), size[0], size[1], tally)
            out.files.append(
                SourceFile(rel, None, os.stat(img).st_size, objects=objects_of(boxes, cls, [False] * len(cls)))
            )
        if os.path.isdir(labels):
            for lab in _walk(labels):
                if (
                    lab.endswith(".txt")
                    and os.path.basename(lab) != "classes.txt"
                    and os.path.normpath(lab) not in used
                ):
                    tally.add(NO_IMAGE, _count_lines(lab))
        out.annotations = tally.as_dict()
        out.close(classes)
        splits.append(out)
    if not any(s.files for s in splits):
        raise ConvertError(f"yolo:{path}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)} below images/)")
    total = total_annotations(splits)
    source = ScannedSource(
        root=f"yolo:{path}",
        classes=classes,
        splits=splits,
        nested=len(layout) > 1 or layout[0][0] != split,
        reader=Reader(path),
        notes=[f"YOLO, names from {os.path.basename(names_file)}: {describe(classes, total)}"],
        local_dir=path,
        walked=True,
    )
    return finish(source, (), False)
