"""Segmentation folder pairs: ``shardkit convert IMAGES_DIR DEST --mask-dir MASKS_DIR``.

Images are found below ``IMAGES_DIR`` as for a folder SRC (a folder of split folders such as
``training/``, ``validation/`` is one split each; otherwise one split), recursively, in any
sub-folders (class folders are plain folders here: the dataset stores ``image`` and ``mask``, no
``label``, since a manifest has one class space and the mask's classes own it). The mask of
``IMAGES_DIR/<rel>/<stem>.<ext>`` is ``MASKS_DIR/<rel>/<stem>.png``: an 8-bit grey (or palette) PNG
of the image's (EXIF-oriented) size whose pixel values are class indices, 255 for "no class".

* An image without its mask file is skipped as ``missing_mask`` at discovery; a mask that is
  unreadable, of another size, or holds a value that is not a class index (and not 255) skips its
  sample as ``bad_mask`` when it is encoded (the detail names the mask file).
* A mask file without an image is reported in one note (how many, and the first).
* Classes: ``--mask-classes FILE`` names them (one name per line, line ``i`` is class ``i``); without it
  every mask is read at discovery and the classes are ``"0"`` .. ``"K-1"``, ``K - 1`` the largest value
  other than 255 in any mask (pixel value = class index, whatever values are absent).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from shardkit.convert.imageproc import IMAGE_EXTENSIONS, SkipReason
from shardkit.convert.options import Layout, ScanConfig
from shardkit.convert.scan.folders import (
    Candidate,
    add_files,
    bad_name,
    json_safe,
    outside_splits,
    relative_path,
    resolve_layout,
    subdirs,
    walk_files,
)
from shardkit.convert.scan.source import Reader, ScannedSource, SplitSource
from shardkit.errors import ConvertError
from shardkit.format.fields import IGNORE

#: prefix of a mask ref: ``mask:<path relative to MASKS_DIR>``
MASK_REF = "mask:"


class PairReader(Reader):
    """Reads images below ``root`` and masks (refs ``mask:<rel>``) below ``mask_root``."""

    def __init__(self, root: str, mask_root: str):
        super().__init__(root)
        self.mask_root = mask_root

    def read(self, relpath: str, ref: str) -> bytes:
        if ref.startswith(MASK_REF):
            return super().read("", os.path.join(self.mask_root, *ref[len(MASK_REF) :].split("/")))
        return super().read(relpath, ref)


def mask_relpath(image_rel: str) -> str:
    """The mask of an image: the same relative path and stem, ``.png``."""
    return os.path.splitext(image_rel)[0] + ".png"


def read_class_names(path: str) -> list[str]:
    """``--mask-classes FILE``: one class name per line (line ``i`` is class ``i``; trailing blank lines ignored)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConvertError(f"--mask-classes {path}: cannot read the class names ({exc})") from None
    while lines and not lines[-1].strip():
        lines.pop()
    names = [line.strip() for line in lines]
    blank = next((i for i, n in enumerate(names) if not n), None)
    if blank is not None:
        raise ConvertError(f"--mask-classes {path}: line {blank + 1} is blank (line i names class i)")
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise ConvertError(f"--mask-classes {path}: class {dup!r} is named twice")
    if not names or len(names) > IGNORE:
        raise ConvertError(f"--mask-classes {path}: {len(names)} class names (a mask holds 1 to {IGNORE} classes)")
    return names


def mask_values(data: bytes) -> set[int] | None:
    """The distinct pixel values of a mask PNG (``None`` if it is not a readable 8-bit mask)."""
    import io
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data)) as im:
                if im.format != "PNG" or im.mode not in ("L", "P"):
                    return None
                hist = im.histogram()  # of the pixel values (of a palette image: its indices, the classes)
        except (OSError, SyntaxError, ValueError):
            return None
    return {v for v, n in enumerate(hist[:256]) if n}


def scan_mask_pairs(
    src: str, opts: ScanConfig, layout: Layout = Layout.AUTO, split: str = "train", **_: Any
) -> ScannedSource:
    """The :class:`ScannedSource` of image/mask folder pairs (see module docstring)."""
    mask_dir = opts.mask_dir
    assert mask_dir is not None
    for what, path in (("source folder", src), ("--mask-dir", mask_dir)):
        if not os.path.isdir(path):
            raise ConvertError(f"{path}: {what} {'is not a folder' if os.path.exists(path) else 'does not exist'}")
    if opts.label_regex is not None:
        raise ConvertError("--label-regex does not apply with --mask-dir (the masks give the classes); leave it out")
    resolved = resolve_layout(src, Layout(layout))
    split_dirs = [(s, os.path.join(src, s)) for s in subdirs(src)] if resolved == Layout.SPLITS else [(split, src)]
    masks_real = os.path.realpath(mask_dir)
    splits: list[SplitSource] = []
    candidates: list[Candidate] = []
    mask_of: dict[str, tuple[str, int]] = {}
    try:
        for n, (name, directory) in enumerate(split_dirs):
            s = SplitSource(name=name, directory=directory, files=[])
            splits.append(s)
            for path in walk_files(directory):
                real = os.path.realpath(path)
                if real == masks_real or real.startswith(masks_real + os.sep):
                    continue  # MASKS_DIR inside IMAGES_DIR: its PNGs are masks, not images
                rel = relative_path(src, path)
                if bad_name(rel):
                    s.skipped.append((json_safe(rel), SkipReason.BAD_NAME, "file name is not valid UTF-8; rename it"))
                elif not path.lower().endswith(IMAGE_EXTENSIONS):
                    s.skipped.append((rel, SkipReason.NOT_AN_IMAGE, "file name extension is not an image type"))
                elif (mask := _mask_of(s, rel, mask_dir)) is not None:
                    mask_of[rel] = mask
                    candidates.append(Candidate(n, rel, path, 0))
        add_files(src, splits, candidates)
        if resolved == Layout.SPLITS:
            splits[0].skipped += outside_splits(src)
    except PermissionError as exc:
        raise ConvertError(f"{src}: cannot list the source folder ({exc})") from None
    for s in splits:
        s.files = [
            replace(f, label=None, mask=MASK_REF + mask_of[f.relpath][0], mask_size=mask_of[f.relpath][1])
            for f in s.files
        ]
    orphans = _orphans(mask_dir, splits, mask_of)
    if not any(s.files for s in splits):
        raise ConvertError(
            f"{src}: no image has a mask in {mask_dir} (the mask of IMAGES_DIR/a/b.jpg is MASKS_DIR/a/b.png)"
        )
    classes, notes = _classes(opts, splits, src, mask_dir)
    if orphans:
        notes.append(f"{len(orphans)} masks in {mask_dir} have no image (not converted), e.g. {orphans[0]}")
    for s in splits:
        s.close(classes)
    return ScannedSource(
        root=src,
        classes=classes,
        splits=splits,
        nested=resolved == Layout.SPLITS,
        reader=PairReader(src, mask_dir),
        notes=notes,
        local_dir=src,
        fields=("image", "mask"),
    )


def _mask_of(s: SplitSource, rel: str, mask_dir: str) -> tuple[str, int] | None:
    """The mask of the image ``rel`` (its path below ``mask_dir`` and its bytes), or ``None`` with the image
    skipped in ``s`` as ``missing_mask``."""
    mrel = mask_relpath(rel)
    mpath = os.path.join(mask_dir, *mrel.split("/"))
    try:
        msize = os.stat(mpath).st_size if os.path.isfile(mpath) else -1
    except OSError:
        msize = -1
    if msize < 0:
        s.skipped.append((rel, SkipReason.MISSING_MASK, f"no mask {mpath} for this image"))
        return None
    return mrel, msize


def _orphans(mask_dir: str, splits: list[SplitSource], mask_of: dict[str, tuple[str, int]]) -> list[str]:
    """The PNGs in ``mask_dir`` that are no image's mask (an image kept, or skipped as a duplicate or unreadable)."""
    used = {mask_of[f.relpath][0] for s in splits for f in s.files}
    used |= {
        mask_relpath(p)
        for s in splits
        for p, r, _ in s.skipped
        if r in (SkipReason.DUPLICATE_FILE, SkipReason.UNREADABLE)
    }
    orphans = sorted(
        r
        for r in (relative_path(mask_dir, p) for p in walk_files(mask_dir))
        if r.lower().endswith(".png") and r not in used
    )
    return orphans


def _classes(opts: ScanConfig, splits: list[SplitSource], src: str, mask_dir: str) -> tuple[list[str], list[str]]:
    """The classes and a note: ``--mask-classes``, or ``0..K`` from the largest value in the masks."""
    notes = []
    if opts.mask_classes is not None:
        classes = read_class_names(opts.mask_classes)
        notes.append(f"{len(classes)} classes from --mask-classes {opts.mask_classes}")
    else:
        reader = PairReader(src, mask_dir)
        seen: set[int] = set()
        for s in splits:
            for item in s.files:
                assert item.mask is not None
                values = mask_values(reader.read(item.relpath, item.mask))
                seen |= values or set()  # an unreadable mask is skipped as bad_mask when encoded
        top = max((v for v in seen if v != IGNORE), default=0)
        classes = [str(i) for i in range(top + 1)]
        notes.append(
            f"{len(classes)} classes 0..{top} from the mask values ({len(seen - {IGNORE})} distinct"
            + (f", and {IGNORE} = no class" if IGNORE in seen else "")
            + "); --mask-classes FILE names them"
        )
    return classes, notes


__all__ = ["MASK_REF", "PairReader", "mask_relpath", "mask_values", "read_class_names", "scan_mask_pairs"]
