"""Existing WebDataset tars as SRC: re-shard, re-size, re-encode (or ``--copy``) someone else's shards.

SRC is one ``.tar`` path or fsspec URL, or a brace pattern such as
``s3://bucket/laion/{00000..00099}.tar`` (every tar it names must exist).
Members form samples by the one member rule of :mod:`shardkit.format.members`
(webdataset's): the key is the member name up to the first dot of its base
name; consecutive members with the same key are one sample, and a field that
repeats (extensions compared case-insensitively) starts a new sample; a name
without a dot or starting with ``__`` belongs to no sample (counted in a note).
A sample's identity (its ``path`` in the new ``.json``) is ``<tar name>/<key>``,
where the tar name is its URL below the folder the tars share. Per sample, in
this order:

* a member name that is absolute, has ``..`` or is too long: ``bad_name``;
* a key seen before in the same tar (adjacent or not): ``duplicate_path``
  (identity ``<tar name>/<key> (again)``, ``(again 2)``, ...): the first
  sample of a key is the one converted, a later one is never paired with its label;
* the image is the first member whose extension is in ``image_key``
  (``jpg;jpeg;png;webp``); none: ``missing_file``;
* the fields of the ``.json`` member are kept in the new ``.json``
  (except ``path``, ``class``, ``width`` and ``height``, which shardkit writes);
  a ``.json`` that is not valid JSON, or too large or deep
  (:func:`~shardkit.convert.scan.source.extra_problem`), is ``bad_metadata``;
* the label is the ``label_key`` member (``cls``), or the ``label_json_field``
  field of the ``.json`` member (any field, ``class`` included); none, empty,
  ``null`` or ``[]``: ``no_label``; a list, float, bool or object (``[0,1]``,
  ``2.5``, ``true``): ``bad_label`` (:func:`label_value`); otherwise read as names or
  indices like a listing's (:func:`shardkit.convert.scan.source.read_labels`); not a
  valid index: ``bad_label``. With ``multi_label`` (``--multi-label``) the label is a set
  of classes (:func:`shardkit.convert.scan.values.label_items`): a JSON list such as
  ``[0, 2]``, or one class; present but empty (``[]``, ``null``, ``""``) is a sample
  with no class; a missing label member or field is ``no_label``;
* with ``text_key`` (``--text-key txt``) the text is that member, kept byte for byte:
  missing or empty is ``no_text``, not UTF-8 or over 1 MiB ``bad_text``;
  ``labelled=False`` (``--no-label``) reads no label at all.

shardkit's own shards keep their class names: when a ``manifest.json`` next to
the tars lists them, its classes (names and order) are the classes and ``.cls``
is an index into them; without one, when every labelled sample's ``.json`` has a
``"class"`` name that matches its ``.cls`` one to one, those names are the
labels, in ``.cls`` order.

Only member headers and the small label/metadata members are read while
scanning (:data:`SCAN_THREADS` tars at a time; a remote tar is read in large
blocks, so about its size), and images again by byte range when encoded.
"""

from __future__ import annotations

import json
import os
import posixpath
import tarfile
from dataclasses import dataclass
from typing import Any, NamedTuple

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.listing import RESERVED_FIELDS
from shardkit.convert.scan.source import (
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    extra_problem,
    tar_ref,
)
from shardkit.convert.scan.source import spelled_label_value as label_value
from shardkit.convert.scan.tar_classes import tar_classes
from shardkit.convert.scan.values import fields_of, label_items, text_value
from shardkit.errors import ConvertError
from shardkit.format.members import MemberGroup, group_members
from shardkit.storage import fs as storage

_SMALL = 1 << 20  # label / metadata members larger than this are not read
#: tars scanned at once (their headers and small members; I/O bound, so threads)
SCAN_THREADS = 8


def is_tar_source(src: str) -> bool:
    """True if ``src`` names tars (a ``.tar`` path, URL or brace pattern)."""
    return src.lower().rstrip("/").endswith(".tar")


def expand(src: str) -> list[str]:
    """The tar URLs of ``src`` (brace patterns expanded), in order."""
    from braceexpand import braceexpand

    return list(braceexpand(src))


def _members(
    url: str, small: frozenset[str], **storage_options: Any
) -> tuple[list[tuple[int, int, bytes | None]], list[MemberGroup], int]:
    """``(data offset, size, content)`` of each regular file in the tar at ``url``, its samples and how many members
    belong to none; content only for extensions in ``small`` (labels, metadata) up to :data:`_SMALL` bytes.

    One open file serves headers and small members, so a remote tar is read in a few large requests.
    """
    out: list[tuple[int, int, bytes | None]] = []
    with storage.open_read(url, **storage_options) as f:
        try:
            with tarfile.open(fileobj=f, mode="r:") as tf:
                members = [m for m in tf.getmembers() if m.isfile()]
        except tarfile.TarError as exc:
            raise ConvertError(f"{url}: not a readable tar ({exc}); check the file, or leave it out of SRC") from None
        groups, ignored = group_members([m.name for m in members], fold_case=True)
        wanted = {i for g in groups for e, i in g.fields.items() if e in small}
        for i, m in enumerate(members):
            data = None
            if i in wanted and m.size <= _SMALL:
                f.seek(m.offset_data)
                data = f.read(m.size)
            out.append((m.offset_data, m.size, data))
    return out, groups, ignored


class _Found(NamedTuple):
    """A tar sample with an image and a usable label (and text), before its label is read as a class."""

    ident: str
    url: str
    offset: int
    size: int
    label: Any  # the raw label (with multi_label: its class items)
    extra: dict[str, Any]
    class_field: Any  # the ``"class"`` field of its ``.json``
    text: str | None


@dataclass(frozen=True)
class _Keys:
    """Which members of a sample are its image (the first of ``image``), label and text (lower case)."""

    image: tuple[str, ...]
    label: str
    text: str | None

    @classmethod
    def of(cls, opts: ScanConfig) -> _Keys:
        return cls(
            tuple(e.strip().lower() for e in opts.image_key.split(";") if e.strip()),
            opts.label_key.lower(),
            opts.text_key.lower() if opts.text_key else None,
        )

    def small(self) -> frozenset[str]:
        """The members read while scanning: ``.json``, the label and the text."""
        return frozenset({"json", self.label} | ({self.text} if self.text else set()))


#: a sample not kept: its reason, the detail, and whether it was skipped for its text only
_Skip = tuple[SkipReason, str, bool]


def _tar_urls(src: str, **storage_options: Any) -> tuple[list[str], str]:
    """The tars of ``src`` and the folder they share; every tar must exist."""
    urls = expand(src)
    missing = [u for u in urls if not storage.exists(u, **storage_options)]
    if len(missing) == len(urls):
        raise ConvertError(
            f"{src}: matches no tar (looked for {len(urls)}: {urls[0]}{' ...' if len(urls) > 1 else ''})"
        )
    if missing:
        raise ConvertError(
            f"{src}: {len(missing)} of {len(urls)} tars do not exist, e.g. {missing[0]}; fix the pattern"
        )
    prefix = posixpath.commonprefix(urls)
    return urls, prefix[: prefix.rfind("/") + 1]  # the folder the tars share


def scan_tars(src: str, opts: ScanConfig, split: str = "train", **storage_options: Any) -> ScannedSource:
    """Scan the tars of ``src`` (see module docstring)."""
    urls, base = _tar_urls(src, **storage_options)
    keys = _Keys.of(opts)
    multi = opts.is_multi_label
    out = SplitSource(name=split, directory=src, files=[])
    found: list[_Found] = []
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(SCAN_THREADS) as pool:  # tars are scanned concurrently, results taken in order
        listed = pool.map(lambda u: _members(u, keys.small(), **storage_options), urls)
        scanned = list(zip(urls, listed))
    ignored = 0
    text_skips: dict[str, tuple[SkipReason, str]] = {}  # samples with a usable image and label but not text
    for url, (members, groups, n_ignored) in scanned:
        name = url[len(base) :]
        ignored += n_ignored
        for g in groups:
            ident = f"{name}/{g.key}" + ("" if not g.again else " (again)" if g.again == 1 else f" (again {g.again})")
            if g.unsafe:
                out.skipped.append((ident, SkipReason.BAD_NAME, g.unsafe))
                continue
            if g.again:
                out.skipped.append(
                    (ident, SkipReason.DUPLICATE_PATH, "this key appears again in the tar (a repeated or later member)")
                )
                continue
            got = _sample(ident, url, {e: members[i] for e, i in g.fields.items()}, opts, keys)
            if isinstance(got, _Found):
                found.append(got)
                continue
            out.skipped.append((ident, got[0], got[1]))
            if got[2]:
                text_skips[ident] = (got[0], got[1])
    if not found and text_skips:
        ident, (_, why) = min(text_skips.items())
        raise ConvertError(f"{src}: no sample has usable text (--text-key {opts.text_key}); e.g. {ident}: {why}")
    if not found:
        raise ConvertError(
            f"{src}: no sample with both an image ({opts.image_key}) and a usable label ({len(out.skipped)} skipped)"
        )
    classes, indices, what, note = tar_classes(src, found, text_skips, base, urls, opts, storage_options)
    for (ident, url, offset, size, label, extra, _, text), index in zip(found, indices):
        if index is None and opts.labelled:
            out.skipped.append(
                (ident, SkipReason.BAD_LABEL, f"{label!r} is not a class index (0 .. {len(classes) - 1})")
            )
        else:
            single, labels = (None, index) if multi else (index, None)
            ref = tar_ref(url, offset, size)
            out.files.append(SourceFile(ident, single, size, ref, extra or None, labels, None, text))
    out.close(classes)
    local = [storage.local_path(u) for u in urls if storage.is_local(u)]
    notes = [f"{len(urls)} tars; labels read as {what}: {len(classes)} classes"]
    notes += [n for n in (note,) if n]
    if ignored:
        notes.append(
            f"{ignored} tar members belong to no sample (no extension, or a name starting with '__'): not read"
        )
    return ScannedSource(
        root=src,
        classes=classes,
        splits=[out],
        nested=False,
        reader=Reader("", storage_options),
        local_dir=os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in local]) if local else None,
        walked=False,
        notes=notes,
        fields=fields_of(opts.labelled, multi, False, keys.text is not None),
    )


def _sample(
    ident: str, url: str, fields: dict[str, tuple[int, int, bytes | None]], opts: ScanConfig, keys: _Keys
) -> _Found | _Skip:
    """One sample's image, metadata, label and text (``fields``: its members by extension), or why it is skipped."""
    multi = opts.is_multi_label
    label_ext, text_ext = keys.label, keys.text
    image = next((e for e in keys.image if e in fields), None)
    meta: Any = None
    problem = None
    if "json" in fields:
        try:
            if fields["json"][2] is None:
                raise ValueError(f"{fields['json'][1]} bytes")
            meta = json.loads(fields["json"][2])
        except (ValueError, RecursionError) as exc:
            problem = f"its .json member is not usable JSON ({type(exc).__name__}: {str(exc)[:80]})"
    meta = meta if isinstance(meta, dict) else {}
    extra = {k: v for k, v in meta.items() if k not in RESERVED_FIELDS}
    problem = problem or extra_problem(extra)
    raw: Any = None
    present = False
    if opts.label_json_field is not None:
        present = opts.label_json_field in meta
        raw = meta.get(opts.label_json_field)
        extra.pop(opts.label_json_field, None)
    elif label_ext in fields and fields[label_ext][2] is not None:
        present = True
        raw = fields[label_ext][2].decode("utf-8", "replace")  # type: ignore[union-attr]
    if not opts.labelled:
        label, bad = None, None
    elif multi:  # a set of classes: a JSON list (or one class); present but empty: no class
        label, bad = label_items(raw, None, spelled=True) if present else (None, SkipReason.NO_LABEL)
    else:
        label, bad = label_value(raw)
    where = f"field {opts.label_json_field!r} of .json" if opts.label_json_field else f".{opts.label_key}"
    text, text_bad, text_why = None, None, ""
    if text_ext is not None:
        data = fields[text_ext][2] if text_ext in fields else None
        if text_ext not in fields:
            text_bad, text_why = SkipReason.NO_TEXT, f"the sample has no .{text_ext} member (--text-key)"
        elif data is None:
            text_bad, text_why = SkipReason.BAD_TEXT, f"its .{text_ext} member has {fields[text_ext][1]} bytes"
        else:
            text, text_bad, text_why = text_value(data)
            text_why = f"{text_why} (.{text_ext})"
    if image is None:
        exts = ", ".join("." + e for e in sorted(fields) if e) or "none"
        return SkipReason.MISSING_FILE, f"no image member ({opts.image_key}); members: {exts}", False
    if problem:
        return SkipReason.BAD_METADATA, problem, False
    if bad == SkipReason.NO_LABEL:
        return SkipReason.NO_LABEL, f"no label ({where})", False
    if bad is not None:
        what = "a list of class names or indices" if multi else "a class name or index (a list, number or bool)"
        return bad, f"{str(raw)[:80]!r} ({where}) is not {what}", False
    if text_bad is not None:
        return text_bad, text_why, True
    return _Found(ident, url, fields[image][0], fields[image][1], label, extra, meta.get("class"), text)
