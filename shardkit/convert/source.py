"""What every kind of SRC turns into: splits of labelled items, skips, and a reader for the bytes.

A source kind (class folders, a folder with ``--label-regex``, a CSV/TSV/JSONL
listing, existing WebDataset tars, a Hugging Face dataset) is only a way to
build a :class:`Source`; planning, encoding, the journal and merging never
look at the kind. Per item it gives:

* ``relpath``: the item's identity, unique within its split; sorting by it
  defines sample keys, and it is the ``path`` in the sample's ``.json``;
* ``label`` (index into ``Source.classes``) and ``size`` (source bytes, 0 if
  unknown without a request per file);
* ``ref``: where :class:`Reader` finds the bytes: a path or URL, a member of a
  tar (:func:`tar_ref`), or empty for ``root/relpath``;
* ``meta``: extra fields for the sample's ``.json`` (e.g. a listing's other columns).

:func:`carve_val` splits a validation set off a source that has none
(``--val-fraction``): exactly ``round(F * n)`` of each class's ``n`` items,
chosen by a shuffle seeded with ``(seed, class name)``, so the same items
whatever the workers or tasks.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import storage
from ..errors import ConvertError, StorageError
from .imageproc import SkipReason

if TYPE_CHECKING:
    from .options import LabelType

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
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and bool(_INT.match(value)))


def read_labels(src: str, values: Sequence[tuple[str, Any]], wanted: "LabelType") -> tuple[list[str], list[int | None], "LabelType"]:
    """Classes and each label's index (``None``: not a valid index) from ``(where, raw label)`` pairs.

    ``name``: classes are the sorted distinct labels; ``index``: labels are class indices, classes
    ``"0"``..``"K-1"`` (``K`` = largest + 1); ``auto``: ``index`` if every label is an integer,
    ``name`` if none is, :class:`ConvertError` for a mix (naming one of each).
    """
    from .options import LabelType

    kind = LabelType(wanted)
    if kind == LabelType.AUTO:
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
    labels = [int(v) if is_index(v) and int(v) >= 0 else None for _, v in values]
    return [str(i) for i in range(max((x for x in labels if x is not None), default=-1) + 1)], labels, kind


@dataclass(frozen=True)
class SourceFile:
    """One candidate sample (see module docstring)."""

    relpath: str
    label: int
    size: int
    ref: str = ""
    meta: Mapping[str, Any] | None = None


@dataclass
class SplitSource:
    """Everything discovered about one split."""

    name: str
    directory: str
    files: list[SourceFile]
    skipped: list[tuple[str, SkipReason, str]] = field(default_factory=list)
    class_names: list[str] = field(default_factory=list)  # classes present in this split


#: prefix of a ``ref`` naming a member of a tar: ``tar:<offset>:<size>:<url>``
TAR_REF = "tar:"


def tar_ref(url: str, offset: int, size: int) -> str:
    """The ``ref`` of the ``size`` bytes at ``offset`` in the tar at ``url``."""
    return f"{TAR_REF}{offset}:{size}:{url}"


class MissingFile(Exception):
    """Raised by a :class:`Reader` for an item whose file is not there (skipped as ``missing_file``)."""


class Reader:
    """Reads an item's bytes: ``ref`` (a path or fsspec URL) or ``root/relpath``; picklable for worker processes.

    Raises :class:`MissingFile` for a missing file and ``OSError`` for an
    unreadable local one; a remote failure other than "not found" is a
    :class:`~shardkit.errors.StorageError` (the conversion stops and a rerun resumes).
    """

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None):
        self.root = root
        self.storage_options = dict(storage_options or {})

    def read(self, relpath: str, ref: str) -> bytes:
        start = end = None
        url = ref or os.path.join(self.root, *relpath.split("/"))
        if url.startswith(TAR_REF):  # a tar member: tar:<offset>:<size>:<url>
            offset, size, url = url[len(TAR_REF):].split(":", 2)
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
        try:
            return bytes(fs.cat_file(path, start=start, end=end))
        except FileNotFoundError:
            raise MissingFile(url) from None
        except Exception as exc:  # noqa: BLE001 - backends raise their own types
            raise StorageError(f"{url}: cannot read ({type(exc).__name__}: {exc}); rerun the same command to resume") from None


@dataclass
class Source:
    """A scanned SRC: classes, splits (sorted by name) and how to read items.

    Attributes:
        root: what SRC was (path, URL or description), for messages.
        classes: class names; labels index into it.
        splits: the splits.
        nested: each split goes to ``DEST/<split>/`` (else the one split is DEST itself).
        reader: reads items' bytes.
        notes: facts the summary should tell (e.g. how labels were read).
        local_dir: a local folder SRC lives in (checked against DEST), if any.
        walked: ``local_dir`` is walked to find the items (then DEST may not be inside it either).
    """

    root: str
    classes: list[str]
    splits: list[SplitSource]
    nested: bool
    reader: Reader
    notes: list[str] = field(default_factory=list)
    local_dir: str | None = None
    walked: bool = True


def carve_val(source: Source, fraction: float, seed: int, val_name: str = "val") -> None:
    """Move ``round(fraction * n)`` of each class's ``n`` items of the only split into a new split ``val_name``."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--val-fraction must be between 0 and 1 (exclusive), not {fraction}")
    if len(source.splits) != 1:
        names = ", ".join(s.name for s in source.splits)
        raise ValueError(f"--val-fraction needs a source with one split; this one has {names}")
    train = source.splits[0]
    if train.name == val_name:
        raise ValueError(f"--val-fraction: the source's split is already called {val_name!r}")
    by_class: dict[int, list[SourceFile]] = {}
    for f in sorted(train.files, key=lambda f: f.relpath):
        by_class.setdefault(f.label, []).append(f)
    val: set[str] = set()
    for label, files in sorted(by_class.items()):
        picked = list(files)
        random.Random(f"{seed}:val:{source.classes[label]}").shuffle(picked)
        val.update(f.relpath for f in picked[: round(fraction * len(files))])
    v = SplitSource(val_name, train.directory, [f for f in train.files if f.relpath in val], [], train.class_names)
    train.files = [f for f in train.files if f.relpath not in val]
    source.splits = sorted([train, v], key=lambda s: s.name)
    source.nested = True
