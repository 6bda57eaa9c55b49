"""What every kind of SRC turns into: splits of labelled items, skips, and a reader for the bytes.

A source kind (class folders, a folder with ``--label-regex``, a CSV/TSV/JSONL
listing, existing WebDataset tars, a Hugging Face dataset) is only a way to
build a :class:`Source`; planning, encoding, the journal and merging never
look at the kind. Per item it gives:

* ``relpath``: the item's identity, unique within its split; sorting by it
  defines sample keys, and it is the ``path`` in the sample's ``.json``;
* ``label`` (index into ``Source.classes``) and ``size`` (source bytes, 0 if
  unknown without a request per file);
* ``ref``: where :class:`Reader` finds the bytes (empty: ``root/relpath``);
* ``meta``: extra fields for the sample's ``.json`` (e.g. a listing's other columns).

:func:`carve_val` splits a validation set off a source that has none
(``--val-fraction``): exactly ``round(F * n)`` of each class's ``n`` items,
chosen by a shuffle seeded with ``(seed, class name)``, so the same items
whatever the workers or tasks.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import storage
from ..errors import StorageError
from .imageproc import SkipReason


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
        url = ref or os.path.join(self.root, *relpath.split("/"))
        if storage.is_local(url):
            try:
                with open(storage.local_path(url), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                raise MissingFile(url) from None
        fs, path = storage.get_fs(url, **self.storage_options)
        try:
            return bytes(fs.cat_file(path))
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
    """

    root: str
    classes: list[str]
    splits: list[SplitSource]
    nested: bool
    reader: Reader
    notes: list[str] = field(default_factory=list)
    local_dir: str | None = None


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
