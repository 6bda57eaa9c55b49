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
(``not_in_class_folder``), not stat-able (``unreadable``), a file or class
folder name that is not valid UTF-8 (``bad_name``: it cannot be named in the
JSON manifest; it is listed there with its undecodable bytes as ``\\xNN``, and a
class folder with such a name is not a class).

A real file reached by several paths (a symlinked class folder, a symlink
loop: paths that resolve to the same file; hard links are separate files) is
one sample: the path without a symlink on its way wins, else the first in
(split, path) order; the others are ``duplicate_file``.
:data:`NOT_CANDIDATES` lists the reasons for files that were never meant to be
samples (``--strict`` ignores them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from shardkit.convert.imageproc import IMAGE_EXTENSIONS, SkipReason
from shardkit.convert.options import Layout
from shardkit.convert.scan.source import Reader, ScannedSource, SourceFile, SplitSource
from shardkit.errors import ConvertError

#: discovery skips of files that were never meant to be samples: ``strict`` does not fail on them
NOT_CANDIDATES = frozenset({SkipReason.NOT_AN_IMAGE, SkipReason.NOT_IN_CLASS_FOLDER, SkipReason.DUPLICATE_FILE})
#: folder names that ``Layout.AUTO`` treats as splits
SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "testing", "dev", "eval"})


def subdirs(path: str) -> list[str]:
    with os.scandir(path) as it:
        return sorted(e.name for e in it if e.is_dir())


def top_files(path: str) -> list[str]:
    with os.scandir(path) as it:
        return sorted(e.name for e in it if not e.is_dir())


def relative_path(root: str, path: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def walk_files(top: str) -> list[str]:
    """Every non-directory below ``top``, following symlinks once per real directory.

    The folders below ``top`` without a symlink on their way are walked first, then the symlinked
    folders in sorted order (each real folder once: a later path to it is cut), so a folder is
    reached by its own path whatever the file system's listing order or how an alias sorts.
    """
    out: list[str] = []
    seen: set[str] = set()
    links: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):  # not following symlinks: the real folders
        seen.add(os.path.realpath(dirpath))
        out.extend(os.path.join(dirpath, f) for f in filenames)
        links.extend(p for p in (os.path.join(dirpath, d) for d in dirnames) if os.path.islink(p))
    for link in sorted(links):
        for dirpath, dirnames, filenames in os.walk(link, followlinks=True):
            real = os.path.realpath(dirpath)
            if real in seen:
                dirnames[:] = []
                continue
            seen.add(real)
            dirnames.sort()
            out.extend(os.path.join(dirpath, f) for f in filenames)
    return out


def resolve_layout(root: str, layout: Layout) -> Layout:
    """The concrete layout of ``root`` for ``layout`` (``AUTO`` is resolved)."""
    if layout != Layout.AUTO:
        return layout
    subs = subdirs(root)
    if subs and all(s.lower() in SPLIT_NAMES for s in subs):
        return Layout.SPLITS
    return Layout.IMAGEFOLDER


def json_safe(text: str) -> str:
    """``text`` as valid Unicode: bytes of a name that is not UTF-8 (``surrogateescape``) become ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def bad_name(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


@dataclass(frozen=True)
class Candidate:
    split: int
    rel: str
    path: str
    label: int


def scan_split(
    root: str, name: str, directory: str, class_index: dict[str, int], n: int, out: list[Candidate]
) -> SplitSource:
    """The split's discovery-time skips; its image candidates are appended to ``out``."""
    split = SplitSource(name=name, directory=directory, files=[])
    for f in top_files(directory):
        split.skipped.append(
            (
                json_safe(relative_path(root, os.path.join(directory, f))),
                SkipReason.NOT_IN_CLASS_FOLDER,
                "file outside any class folder",
            )
        )
    for cls in subdirs(directory):
        bad_class = bad_name(cls)
        for path in walk_files(os.path.join(directory, cls)):
            rel = relative_path(root, path)
            if bad_class:
                split.skipped.append(
                    (
                        json_safe(rel),
                        SkipReason.BAD_NAME,
                        "class folder name is not valid UTF-8; rename the folder to convert it",
                    )
                )
            elif bad_name(rel):
                split.skipped.append(
                    (json_safe(rel), SkipReason.BAD_NAME, "file name is not valid UTF-8; rename the file to convert it")
                )
            elif not path.lower().endswith(IMAGE_EXTENSIONS):
                split.skipped.append((rel, SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"))
            else:
                out.append(Candidate(n, rel, path, class_index[cls]))
    return split


def outside_splits(src: str) -> list[tuple[str, SkipReason, str]]:
    """The skips of the files beside the split folders of ``src`` (no split's: reported with the first split)."""
    return [(json_safe(f), SkipReason.NOT_IN_CLASS_FOLDER, "file outside any split folder") for f in top_files(src)]


def is_real(root_real: str, c: Candidate) -> bool:
    """True if ``c`` is the file's own location below SRC (no symlink on its way)."""
    return os.path.realpath(c.path) == os.path.join(root_real, *c.rel.split("/"))


def add_files(root: str, splits: list[SplitSource], candidates: list[Candidate]) -> None:
    """Stat each candidate; a real file reached by several paths is a sample once (see module docstring)."""
    groups: dict[tuple[int, int], list[tuple[Candidate, int]]] = {}
    for c in sorted(candidates, key=lambda c: (c.split, c.rel)):
        try:
            st = os.stat(c.path)
        except OSError as exc:
            splits[c.split].skipped.append((c.rel, SkipReason.UNREADABLE, f"cannot stat: {exc.strerror or exc}"))
            continue
        groups.setdefault((st.st_dev, st.st_ino), []).append((c, st.st_size))
    root_real = os.path.realpath(root)
    by_path: list[list[tuple[Candidate, int]]] = []
    for group in groups.values():  # same inode; the same resolved path is the same file (hard links are not)
        if len(group) == 1:
            by_path.append(group)
            continue
        real: dict[str, list[tuple[Candidate, int]]] = {}
        for c, size in group:
            real.setdefault(os.path.realpath(c.path), []).append((c, size))
        by_path.extend(real.values())
    for group in by_path:
        first = 0
        if len(group) > 1:
            first = min(
                range(len(group)),
                key=lambda i: (not is_real(root_real, group[i][0]), group[i][0].split, group[i][0].rel),
            )
        winner = group[first][0]
        for i, (c, size) in enumerate(group):
            if i == first:
                splits[c.split].files.append(SourceFile(c.rel, c.label, size))
            else:
                where = winner.rel if winner.split == c.split else f"{winner.rel} in split {splits[winner.split].name}"
                splits[c.split].skipped.append(
                    (c.rel, SkipReason.DUPLICATE_FILE, f"the same file as {where} (through a symlink)")
                )


def scan(src: str, layout: Layout = Layout.AUTO, split: str = "train") -> ScannedSource:
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
            split_dirs = [(s, os.path.join(src, s)) for s in subdirs(src)]
            if not split_dirs:
                raise ConvertError(f"{src}: no split folders (expected {src}/train/<class>/...)")
        else:
            split_dirs = [(split, src)]
        folders = {c for _, d in split_dirs for c in subdirs(d)}
        classes = sorted(c for c in folders if not bad_name(c))
        if not folders:
            raise ConvertError(f"{src}: no class folders (expected one subfolder per class, e.g. {src}/cat/1.jpg)")
        index = {c: i for i, c in enumerate(classes)}
        candidates: list[Candidate] = []
        splits = [scan_split(src, name, d, index, n, candidates) for n, (name, d) in enumerate(split_dirs)]
        add_files(src, splits, candidates)
    except PermissionError as exc:
        raise ConvertError(f"{src}: cannot list the source folder ({exc})") from None
    if resolved == Layout.SPLITS:
        splits[0].skipped += outside_splits(src)
    for s in splits:
        s.close(classes)
    if not any(s.files for s in splits):
        raise ConvertError(
            f"{src}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)} in any case below the class folders)"
        )
    return ScannedSource(
        root=src, classes=classes, splits=splits, nested=resolved == Layout.SPLITS, reader=Reader(src), local_dir=src
    )


def compile_label_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; :class:`ConvertError` if it is invalid or has no capture group."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ConvertError(f"--label-regex {pattern!r}: not a valid regular expression ({exc})") from None
    if rx.groups < 1:
        raise ConvertError(
            f"--label-regex {pattern!r} has no capture group; put the class name in one, e.g. '^(cat|dog)\\.'"
        )
    return rx


def scan_regex(src: str, pattern: str, split: str = "train") -> ScannedSource:
    """Scan the folder ``src`` (flat or nested): the class of a file is the first capture group of ``pattern``
    searched in its path relative to ``src``; files that do not match are ``no_label``. Classes are the sorted names.
    """
    rx = compile_label_regex(pattern)
    if not os.path.isdir(src):
        raise ConvertError(
            f"{src}: source folder does not exist" if not os.path.exists(src) else f"{src}: source is not a folder"
        )
    out = SplitSource(name=split, directory=src, files=[])
    named: list[tuple[str, str, str]] = []
    try:
        paths = walk_files(src)
    except PermissionError as exc:
        raise ConvertError(f"{src}: cannot list the source folder ({exc})") from None
    for path in paths:
        rel = relative_path(src, path)
        bad = bad_name(rel)
        m = None if bad else rx.search(rel)
        if bad:
            out.skipped.append(
                (json_safe(rel), SkipReason.BAD_NAME, "file name is not valid UTF-8; rename the file to convert it")
            )
        elif not path.lower().endswith(IMAGE_EXTENSIONS):
            out.skipped.append((rel, SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"))
        elif m is None or not m.group(1):
            out.skipped.append((rel, SkipReason.NO_LABEL, f"path does not match --label-regex {pattern!r}"))
        else:
            named.append((rel, path, m.group(1)))
    classes = sorted({c for _, _, c in named})
    if not classes:
        raise ConvertError(
            f"{src}: no image path matches --label-regex {pattern!r} (paths are relative to SRC, '/'-separated)"
        )
    index = {c: i for i, c in enumerate(classes)}
    add_files(src, [out], [Candidate(0, rel, path, index[c]) for rel, path, c in named])
    out.close(classes)
    return ScannedSource(
        root=src,
        classes=classes,
        splits=[out],
        nested=False,
        reader=Reader(src),
        local_dir=src,
        notes=[
            f"{len(classes)} classes from --label-regex: {', '.join(classes[:8])}{' ...' if len(classes) > 8 else ''}"
        ],
    )


#: the Hugging Face options of detection and segmentation datasets
