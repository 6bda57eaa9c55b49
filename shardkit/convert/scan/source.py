"""What every kind of SRC turns into: splits of labelled items, skips, and a reader for the bytes.

A source kind (class folders, a folder with ``--label-regex``, a CSV/TSV/JSONL
listing, existing WebDataset tars, a Hugging Face dataset) is only a way to
build a :class:`ScannedSource`; planning, encoding, the journal and merging never
look at the kind. Per item it gives:

* ``relpath``: the item's identity, unique within its split; sorting by it
  defines sample keys, and it is the ``path`` in the sample's ``.json``;
* ``label`` (index into ``ScannedSource.classes``) and ``size`` (source bytes, 0 if
  unknown without a request per file);
* ``ref``: where :class:`Reader` finds the bytes: a path or URL, a member of a
  tar (:func:`tar_ref`), or empty for ``root/relpath``;
* ``meta``: extra fields for the sample's ``.json`` (e.g. a listing's other columns).

:func:`~shardkit.convert.scan.valsplit.carve_val` splits a validation set off a source that has none
(``--val-fraction``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.segments import Segment
from shardkit.errors import ConvertError, StorageError
from shardkit.format.fields import DEFAULT_FIELDS, Objects
from shardkit.storage import fs as storage

if TYPE_CHECKING:
    from shardkit.convert.options import LabelType

_INT = re.compile(r"^\s*[+-]?\d+\s*$")
#: bounds on the extra fields a source puts into a sample's ``.json`` (well inside what shard readers accept)
MAX_EXTRA_BYTES = 256 << 10
MAX_EXTRA_DEPTH = 32


def extra_problem(extra: Mapping[str, Any]) -> str | None:
    """Why ``extra`` cannot go into a sample's ``.json`` (not JSON values, too large, too deep), or ``None``."""
    try:
        size = len(json.dumps(extra, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"extra fields are not JSON values ({type(exc).__name__})"
    if size > MAX_EXTRA_BYTES:
        return f"extra fields take {size} bytes of JSON (limit {MAX_EXTRA_BYTES})"
    stack: list[tuple[Any, int]] = [(extra, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_EXTRA_DEPTH:
            return f"extra fields nested deeper than {MAX_EXTRA_DEPTH} levels"
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((v, depth + 1) for v in children if isinstance(v, (dict, list)))
    return None


def is_index(value: Any) -> bool:
    """True for an integer label (an ``int`` or a string of digits)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and bool(_INT.match(value))
    )


def label_value(raw: Any) -> tuple[str | int | None, SkipReason | None]:
    """The one label rule of every source: ``(label, None)`` for a usable raw label, else ``(None, reason)``.

    A usable label is a string that is not empty or blank (returned stripped) or an ``int`` >= 0 (not a
    ``bool``; a negative ``int`` is ``bad_label``). ``None``, an empty or blank string and an empty list are ``no_label``; anything else
    (``bool``, ``float``, a non-empty list, a dict, bytes, ...) is ``bad_label``: until multi-label
    support lands, such a value is never turned into a class name. Whether a label is a class name
    or a class index is decided later, over all labels, by :func:`read_labels`.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()) or (isinstance(raw, (list, tuple)) and not raw):
        return None, SkipReason.NO_LABEL
    if isinstance(raw, str):
        return raw.strip(), None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return (raw, None) if raw >= 0 else (None, SkipReason.BAD_LABEL)  # a typed -1 is never a class name
    return None, SkipReason.BAD_LABEL


_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+|inf|infinity|nan)$", re.IGNORECASE)
_BOOLS = ("true", "false")


def spelled_label_value(value: Any) -> tuple[Any, SkipReason | None]:
    """A label given as text that spells a value: the value it spells, then the one label rule (:func:`label_value`).

    Used for a tar's ``.cls`` member (an integer class index by WebDataset's convention), a string
    ``--label-json-field`` and a Hugging Face string column; a listing's label column is free text instead
    (any non-empty text is a class name or index). The text is read as the JSON scalar or list it spells before the rule applies: ``null`` is
    ``None`` (``no_label``), ``[]`` an empty list (``no_label``), and ``true``, ``2.5``, ``1e3``, ``[0,1]``,
    ``-1`` are a bool, float, list or negative index (``bad_label``: multi-label and regression targets are not
    supported yet; a ``-1`` among class names is one bad sample, not a mix of names and indices). Any other text
    is a class name or index, stripped.
    """
    if isinstance(value, str):
        text = value.strip()
        if text == "null":
            return label_value(None)
        if is_index(text):
            return label_value(int(text)) if text.startswith("-") else label_value(text)
        if text.lower() in _BOOLS or _FLOAT.match(text):
            return None, SkipReason.BAD_LABEL
        if text[:1] in "[{" and text:
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return label_value(text)
            return (None, SkipReason.BAD_LABEL) if isinstance(value, dict) else label_value(value)
    return label_value(value)


#: a class index must be below ``max(MIN_INDEX_BOUND, INDEX_FACTOR * distinct labels)`` and below ``MAX_CLASSES``
MAX_CLASSES = 1_000_000
MIN_INDEX_BOUND = 1000
INDEX_FACTOR = 10


def _index(value: Any) -> int | None:
    """The class index ``value`` stands for (``MAX_CLASSES`` for any larger one), ``None`` if it is not one (negative, not an integer)."""
    if isinstance(value, bool) or not is_index(value):
        return None
    if isinstance(value, int):
        return None if value < 0 else min(value, MAX_CLASSES)
    text = value.strip()
    if text.startswith("-"):
        return None if text.lstrip("-0") else 0
    digits = text.lstrip("+").lstrip("0") or "0"
    return MAX_CLASSES if len(digits) > len(str(MAX_CLASSES)) else min(int(digits), MAX_CLASSES)


def read_labels(
    src: str, values: Sequence[tuple[str, Any]], wanted: "LabelType"
) -> tuple[list[str], list[int | None], "LabelType"]:
    """Classes and each label's index (``None``: not a valid index) from ``(where, raw label)`` pairs.

    ``name``: classes are the sorted distinct labels; ``index``: labels are class indices, classes
    ``"0"``..``"K-1"`` (``K`` = largest + 1); ``auto``: ``index`` if every label is an integer,
    ``name`` if none is, :class:`ConvertError` for a mix (naming one of each).

    Refused in one line (:class:`ConvertError`): an index that would build a class list far larger
    than the labels need (at least ``max(MIN_INDEX_BOUND, INDEX_FACTOR x distinct labels)`` or
    ``MAX_CLASSES``), and under ``auto`` integer labels without a ``0`` (e.g. 1-based labels,
    which would silently add an empty class ``"0"``): ``--label-type index`` keeps them knowingly.
    """
    from shardkit.convert.options import LabelType

    kind = LabelType(wanted)
    auto = kind == LabelType.AUTO
    if auto:
        idx = next(((w, v) for w, v in values if is_index(v)), None)
        name = next(((w, v) for w, v in values if not is_index(v)), None)
        if idx and name:
            raise ConvertError(
                f"{src}: mixed labels: {name[1]!r} ({name[0]}) is a class name and {idx[1]!r} ({idx[0]}) a class index; "
                "pass --label-type name (all are names) or --label-type index"
            )
        kind = LabelType.INDEX if idx else LabelType.NAME
    if kind == LabelType.NAME:
        classes = sorted({str(v).strip() for _, v in values})
        pos = {c: i for i, c in enumerate(classes)}
        return classes, [pos[str(v).strip()] for _, v in values], kind
    labels = [_index(v) for _, v in values]
    valid = [x for x in labels if x is not None]
    bound = min(MAX_CLASSES, max(MIN_INDEX_BOUND, INDEX_FACTOR * len(set(valid))))
    top = max(valid, default=-1)
    if top >= bound:
        w, v = next((w, v) for (w, v), x in zip(values, labels) if x == top)
        shown = repr(v) if len(str(v)) <= 24 else f"{str(v).strip()[:12]}... ({len(str(v).strip())} digits)"
        raise ConvertError(
            f"{src}: label {shown} ({w}) is a class index far above the {len(set(valid))} distinct labels "
            f"(an index must be below {bound}); pass --label-type name to read the labels as class names"
        )
    if auto and valid and min(valid) > 0:
        w, v = next((w, v) for (w, v), x in zip(values, labels) if x == min(valid))
        raise ConvertError(
            f"{src}: integer labels start at {v!r} ({w}), not 0: as class indices, class{'es' if min(valid) > 1 else ''} "
            f"{', '.join(repr(str(i)) for i in range(min(min(valid), 3)))}{', ...' if min(valid) > 3 else ''} would be empty; "
            "pass --label-type index to keep them that way (e.g. 1-based labels) or --label-type name to use the labels as class names"
        )
    return [str(i) for i in range(top + 1)], labels, kind


@dataclass(frozen=True)
class SourceFile:
    """One candidate sample (see module docstring); ``label`` is ``None`` in a source without ``label``
    (``labels``: its sorted class indices; ``target``, ``text``: its values of those fields).

    Detection and segmentation sources also give, in the source image's pixels (EXIF-oriented,
    edges at integers), before any resize: ``objects`` (boxes, box classes, crowd flags,
    keypoints; already clipped and checked at scan time), ``mask`` (where :class:`Reader` finds its
    PNG mask: a ``relpath``-like ref, read as ``reader.read(mask, "")`` or a full ref), and
    ``segments`` (COCO polygons / RLE per object, rasterised into the mask at encode time by
    :func:`shardkit.convert.segments.semantic_mask`); ``mask_size``: the mask file's bytes (0 if unknown), ``declared_size``: the ``(width, height)`` the annotations were
    drawn on, where the source says (COCO's ``images[].width/height``; the image must have it, EXIF-oriented),
    recorded in the input fingerprint so that a replaced mask is a different input."""

    relpath: str
    label: int | None
    size: int
    ref: str = ""
    meta: Mapping[str, Any] | None = None
    labels: tuple[int, ...] | None = None
    target: tuple[float, ...] | None = None
    text: str | None = None
    objects: Objects | None = None
    mask: str | None = None
    segments: tuple[Segment, ...] | None = None
    mask_size: int = 0
    declared_size: tuple[int, int] | None = None

    def class_indices(self) -> tuple[int, ...]:
        """The classes this item carries: its ``label``, or its ``labels`` (none in a source without either)."""
        return (self.label,) if self.label is not None else self.labels or ()


@dataclass
class SplitSource:
    """Everything discovered about one split."""

    name: str
    directory: str
    files: list[SourceFile]
    skipped: list[tuple[str, SkipReason, str]] = field(default_factory=list)
    class_names: list[str] = field(default_factory=list)  # classes present in this split
    #: what became of each source annotation (detection sources): ``{"kept": n, "clipped": n, <skip reason>: n}``
    annotations: dict[str, int] = field(default_factory=dict)

    def close(self, classes: Sequence[str]) -> None:
        """The end of a split's scan, the same in every source: files in ``relpath`` order (sample keys follow
        it), skips sorted, and the classes its files carry (``classes``: the source's class names): their
        labels, or the classes of their objects' boxes."""
        self.files.sort(key=lambda f: f.relpath)
        self.skipped.sort()
        self.class_names = sorted({classes[c] for f in self.files for c in (*f.class_indices(), *_box_classes(f))})


def _box_classes(f: SourceFile) -> list[int]:
    """The classes of ``f``'s boxes (none without ``objects``)."""
    return [] if f.objects is None else f.objects.labels.tolist()


#: prefix of a ``ref`` naming a member of a tar: ``tar:<offset>:<size>:<url>``
TAR_REF = "tar:"


def tar_ref(url: str, offset: int, size: int) -> str:
    """The ``ref`` of the ``size`` bytes at ``offset`` in the tar at ``url``."""
    return f"{TAR_REF}{offset}:{size}:{url}"


class MissingFile(Exception):
    """Raised by a :class:`Reader` for an item whose file is not there (skipped as ``missing_file``)."""


class UnreadableFile(OSError):
    """Raised by a :class:`Reader` for a remote file that failed on every try (an ``OSError``: skipped as ``unreadable``)."""


class Reader:
    """Reads an item's bytes: ``ref`` (a path or fsspec URL) or ``root/relpath``; picklable for worker processes.

    Raises :class:`MissingFile` for a missing file and ``OSError`` for an
    unreadable local one. A remote read that fails otherwise is tried
    :attr:`tries` times (with a short backoff; access denied is not retried),
    then raises :class:`UnreadableFile` (an ``OSError``): one dead URL is one
    ``unreadable`` skip, not the end of the conversion.
    """

    #: attempts of a remote read before the item is ``unreadable``, and the backoff before the second (doubling)
    tries = 3
    backoff_s = 0.2

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None):
        self.root = root
        self.storage_options = dict(storage_options or {})

    def read(self, relpath: str, ref: str) -> bytes:
        start = end = None
        url = ref or os.path.join(self.root, *relpath.split("/"))
        if url.startswith(TAR_REF):  # a tar member: tar:<offset>:<size>:<url>
            offset, size, url = url[len(TAR_REF) :].split(":", 2)
            start, end = int(offset), int(offset) + int(size)
        if storage.is_local(url):
            try:
                with open(storage.local_path(url), "rb") as f:
                    if start is None:
                        return f.read()
                    f.seek(start)
                    return f.read(end - start)  # type: ignore[operator]
            except FileNotFoundError:
                raise MissingFile(url) from None
        fs, path = storage.get_fs(url, **self.storage_options)
        for attempt in range(1, self.tries + 1):
            try:
                return bytes(fs.cat_file(path, start=start, end=end))
            except FileNotFoundError:
                raise MissingFile(url) from None
            except Exception as exc:  # noqa: BLE001 - backends raise their own types
                if attempt == self.tries or isinstance(exc, (PermissionError, StorageError)):
                    tried = f" (tried {attempt} times)" if attempt > 1 else ""
                    raise UnreadableFile(f"{url}: cannot read{tried}: {type(exc).__name__}: {str(exc)[:200]}") from None
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class ScannedSource:
    """A scanned SRC: classes, splits (sorted by name) and how to read items.

    Attributes:
        root: what SRC was (path, URL or description), for messages.
        classes: class names; labels index into it.
        splits: every split found, also one left with no files (``files=[]``, its ``skipped`` kept):
            the conversion reports it; a source raises only when no split has any file.
        nested: the source has splits of its own (informational: every split goes to ``DEST/<split>/``).
        reader: reads items' bytes.
        notes: facts the summary should tell (e.g. how labels were read).
        fields: the stored fields its items fill (:mod:`shardkit.format.fields`; ``("image", "label")``
            for every source before multi-label, target and text columns).
        targets: the names of the ``target`` values (``[]`` without ``target``).
        local_dir: a local folder SRC lives in (checked against DEST), if any.
        walked: ``local_dir`` is walked to find the items (then DEST may not be inside it either).
        keypoint_names: the names of the ``K`` keypoints of each object (``keypoints`` sources; ``[]``: none).
        flip_pairs: pairs of keypoint indices a horizontal flip swaps (e.g. ``left_eye``/``right_eye``).
    """

    root: str
    classes: list[str]
    splits: list[SplitSource]
    nested: bool
    reader: Reader
    notes: list[str] = field(default_factory=list)
    local_dir: str | None = None
    walked: bool = True
    fields: tuple[str, ...] = DEFAULT_FIELDS
    targets: list[str] = field(default_factory=list)
    keypoint_names: list[str] = field(default_factory=list)
    flip_pairs: list[list[int]] = field(default_factory=list)
