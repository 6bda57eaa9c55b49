"""Scan a source folder: layout, splits, classes, candidate images and odd files.

Two layouts are understood (:class:`Layout`):

* ``imagefolder``: ``SRC/<class>/**/<image>``, one split (named ``train``
  unless told otherwise), converted to ``DEST/`` itself.
* ``splits``: ``SRC/<split>/<class>/**/<image>``, each split converted to
  ``DEST/<split>/``.

``auto`` picks ``splits`` when SRC has no files of its own in class position
and every subfolder name is a usual split name (:data:`SPLIT_NAMES`), and
``imagefolder`` otherwise; force the layout when a class is called ``train``.

Classes are the sorted union of class folder names over all splits, which is
``torchvision.datasets.ImageFolder(split_dir).class_to_idx`` whenever every
split has every class. Files are listed recursively below each class folder
(symlinks followed, loops cut), in sorted order of their path relative to SRC
(forward slashes); that order, not the file system's, defines sample keys.
Files that can never be samples are reported with a :class:`SkipReason`:
wrong extension (``not_an_image``), outside a class folder
(``not_in_class_folder``), or not stat-able (``unreadable``).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from ..errors import ConvertError
from .imageproc import IMAGE_EXTENSIONS, SkipReason

#: folder names that ``Layout.AUTO`` treats as splits
SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "testing", "dev", "eval"})


class Layout(str, enum.Enum):
    """How SRC is organised (see module docstring)."""

    AUTO = "auto"
    IMAGEFOLDER = "imagefolder"
    SPLITS = "splits"


@dataclass(frozen=True)
class SourceFile:
    """One candidate image: path relative to SRC (``/``-separated), class index, size in bytes."""

    relpath: str
    label: int
    size: int


@dataclass
class SplitSource:
    """Everything discovered about one split."""

    name: str
    directory: str
    files: list[SourceFile]
    skipped: list[tuple[str, SkipReason, str]] = field(default_factory=list)
    class_names: list[str] = field(default_factory=list)  # classes present in this split


@dataclass
class Source:
    """A scanned SRC: resolved layout, class list and splits (sorted by name)."""

    root: str
    layout: Layout
    classes: list[str]
    splits: list[SplitSource]


def _subdirs(path: str) -> list[str]:
    with os.scandir(path) as it:
        return sorted(e.name for e in it if e.is_dir())


def _top_files(path: str) -> list[str]:
    with os.scandir(path) as it:
        return sorted(e.name for e in it if not e.is_dir())


def _rel(root: str, path: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _walk_files(top: str) -> list[str]:
    """Every non-directory below ``top``, following symlinks once per real directory."""
    out: list[str] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        out.extend(os.path.join(dirpath, f) for f in filenames)
    return out


def resolve_layout(root: str, layout: Layout) -> Layout:
    """The concrete layout of ``root`` for ``layout`` (``AUTO`` is resolved)."""
    if layout != Layout.AUTO:
        return layout
    subs = _subdirs(root)
    if subs and all(s.lower() in SPLIT_NAMES for s in subs):
        return Layout.SPLITS
    return Layout.IMAGEFOLDER


def _scan_split(root: str, name: str, directory: str, class_index: dict[str, int]) -> SplitSource:
    split = SplitSource(name=name, directory=directory, files=[], class_names=_subdirs(directory))
    for f in _top_files(directory):
        split.skipped.append((_rel(root, os.path.join(directory, f)), SkipReason.NOT_IN_CLASS_FOLDER, "file outside any class folder"))
    for cls in split.class_names:
        for path in _walk_files(os.path.join(directory, cls)):
            rel = _rel(root, path)
            if not path.lower().endswith(IMAGE_EXTENSIONS):
                split.skipped.append((rel, SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"))
                continue
            try:
                size = os.stat(path).st_size
            except OSError as exc:
                split.skipped.append((rel, SkipReason.UNREADABLE, f"cannot stat: {exc.strerror or exc}"))
                continue
            split.files.append(SourceFile(rel, class_index[cls], size))
    split.files.sort(key=lambda s: s.relpath)
    split.skipped.sort()
    return split


def scan(src: str, layout: Layout = Layout.AUTO, split: str = "train") -> Source:
    """Scan ``src``; :class:`ConvertError` if it is missing, not a folder, or holds no class folders or images.

    Args:
        src: the local source folder.
        layout: how ``src`` is organised; ``AUTO`` guesses (see module docstring).
        split: split name used for the ``imagefolder`` layout.
    """
    if not os.path.exists(src):
        raise ConvertError(f"{src}: source folder does not exist")
    if not os.path.isdir(src):
        raise ConvertError(f"{src}: source is not a folder (expected an ImageFolder root: one subfolder per class)")
    try:
        resolved = resolve_layout(src, Layout(layout))
        if resolved == Layout.SPLITS:
            split_dirs = [(s, os.path.join(src, s)) for s in _subdirs(src)]
            if not split_dirs:
                raise ConvertError(f"{src}: no split folders (expected {src}/train/<class>/...)")
        else:
            split_dirs = [(split, src)]
        classes = sorted({c for _, d in split_dirs for c in _subdirs(d)})
        if not classes:
            raise ConvertError(f"{src}: no class folders (expected one subfolder per class, e.g. {src}/cat/1.jpg)")
        index = {c: i for i, c in enumerate(classes)}
        splits = [_scan_split(src, name, d, index) for name, d in split_dirs]
    except PermissionError as exc:
        raise ConvertError(f"{src}: cannot list the source folder ({exc})") from None
    if resolved == Layout.SPLITS:
        for f in _top_files(src):
            splits[0].skipped.insert(0, (f, SkipReason.NOT_IN_CLASS_FOLDER, "file outside any split folder"))
    if not any(s.files for s in splits):
        raise ConvertError(
            f"{src}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)} in any case below the class folders)"
        )
    return Source(root=src, layout=resolved, classes=classes, splits=splits)
