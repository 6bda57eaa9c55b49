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
from typing import Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.listing import RESERVED_FIELDS
from shardkit.convert.scan.source import (
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    extra_problem,
    is_index,
    read_labels,
    tar_ref,
)
from shardkit.convert.scan.source import spelled_label_value as label_value
from shardkit.convert.scan.values import fields_of, label_items, read_label_sets, text_value
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


def _manifest_classes(base: str, names: list[str], **storage_options: Any) -> tuple[list[str] | None, str | None]:
    """The classes of a shardkit ``manifest.json`` in the folder ``base`` that lists every tar of ``names``, and a note."""
    from shardkit.format.manifest import MANIFEST_NAME, load_manifest

    url = (base or "./") + MANIFEST_NAME
    try:
        if not storage.exists(url, **storage_options):
            return None, None
        m = load_manifest(url, **storage_options)
    except Exception as exc:  # noqa: BLE001 - any unreadable manifest: say so, read .cls as indices
        return None, f"{url} is not a readable shardkit manifest ({type(exc).__name__}); its class names are not used"
    if not set(names) <= {s.name for s in m.shards}:
        return None, f"{url} does not list these tars; its class names are not used"
    return list(m.classes), f"class names and order from {url}"


def _class_field_names(found: list[tuple[Any, ...]]) -> dict[str, str] | None:
    """``{.cls index: name}`` when every sample's ``.json`` has a ``"class"`` name matching its ``.cls`` index one to one."""
    pairs = {(str(int(f[4])), f[6]) for f in found if is_index(f[4]) and int(f[4]) >= 0}
    if not found or len(pairs) != len({p[0] for p in pairs}) or len(pairs) != len({p[1] for p in pairs}):
        return None
    if not all(isinstance(f[6], str) and f[6].strip() and is_index(f[4]) and int(f[4]) >= 0 for f in found):
        return None
    return dict(pairs)


def scan_tars(src: str, opts: ScanConfig, split: str = "train", **storage_options: Any) -> ScannedSource:
    """Scan the tars of ``src`` (see module docstring)."""
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
    base = prefix[: prefix.rfind("/") + 1]  # the folder the tars share
    image_exts = [e.strip().lower() for e in opts.image_key.split(";") if e.strip()]
    label_ext = opts.label_key.lower()
    text_ext = opts.text_key.lower() if opts.text_key else None
    small = frozenset({"json", label_ext} | ({text_ext} if text_ext else set()))
    multi = opts.is_multi_label
    out = SplitSource(name=split, directory=src, files=[])
    # identity, url, offset, size, label (class items if multi), extra, the .json "class" field, text
    found: list[tuple[str, str, int, int, Any, dict[str, Any], Any, str | None]] = []
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(SCAN_THREADS) as pool:  # tars are scanned concurrently, results taken in order
        listed = pool.map(lambda u: _members(u, small, **storage_options), urls)
        scanned = list(zip(urls, listed))
    ignored = 0
    text_skips: dict[str, tuple[SkipReason, str]] = {}  # samples with a usable image and label but not text
    for url, (members, groups, n_ignored) in scanned:
        name = url[len(base) :]
        ignored += n_ignored
        for g in groups:
            ident = f"{name}/{g.key}" + ("" if not g.again else " (again)" if g.again == 1 else f" (again {g.again})")
            fields = {e: members[i] for e, i in g.fields.items()}
            if g.unsafe:
                out.skipped.append((ident, SkipReason.BAD_NAME, g.unsafe))
                continue
            if g.again:
                out.skipped.append(
                    (ident, SkipReason.DUPLICATE_PATH, "this key appears again in the tar (a repeated or later member)")
                )
                continue
            image = next((e for e in image_exts if e in fields), None)
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
                out.skipped.append(
                    (ident, SkipReason.MISSING_FILE, f"no image member ({opts.image_key}); members: {exts}")
                )
            elif problem:
                out.skipped.append((ident, SkipReason.BAD_METADATA, problem))
            elif bad == SkipReason.NO_LABEL:
                out.skipped.append((ident, SkipReason.NO_LABEL, f"no label ({where})"))
            elif bad is not None:
                what = "a list of class names or indices" if multi else "a class name or index (a list, number or bool)"
                out.skipped.append((ident, bad, f"{str(raw)[:80]!r} ({where}) is not {what}"))
            elif text_bad is not None:
                out.skipped.append((ident, text_bad, text_why))
                text_skips[ident] = (text_bad, text_why)
            else:
                found.append((ident, url, fields[image][0], fields[image][1], label, extra, meta.get("class"), text))
    if not found and text_skips:
        ident, (_, why) = min(text_skips.items())
        raise ConvertError(f"{src}: no sample has usable text (--text-key {opts.text_key}); e.g. {ident}: {why}")
    if not found:
        raise ConvertError(
            f"{src}: no sample with both an image ({opts.image_key}) and a usable label ({len(out.skipped)} skipped)"
        )
    known, note = (
        (None, None)
        if not opts.labelled or (opts.label_json_field is not None and opts.label_json_field != "class")
        else _manifest_classes(base, [u[len(base) :] for u in urls], **storage_options)
    )
    indices: list[Any]
    classes: list[str]
    by_field = (
        None
        if multi or not opts.labelled or known is not None or opts.label_json_field is not None
        else _class_field_names(found)
    )
    if not opts.labelled:
        classes, indices, what = [], [None] * len(found), "none (--no-label)"
    elif multi:
        classes, indices, what = _label_sets(src, found, known if opts.label_json_field is None else None, opts)
    elif known is not None and opts.label_json_field is None:  # shardkit's shards: .cls indexes the manifest's classes
        classes = known
        indices = [int(f[4]) if is_index(f[4]) and 0 <= int(f[4]) < len(known) else None for f in found]
        what = f"class indices into the manifest's {len(known)} classes"
    elif by_field is not None:  # shardkit's shards without a manifest: the .json "class" names, in .cls order
        classes = [by_field[i] for i in sorted(by_field, key=int)]
        pos = {c: i for i, c in enumerate(classes)}
        indices = [pos[f[6]] for f in found]
        what = 'the .json "class" names of shardkit shards, ordered by their .cls index'
    else:
        try:
            classes, indices, kind = read_labels(src, [(f"sample {f[0]}", f[4]) for f in found], opts.label_type)
        except ConvertError as exc:
            if not text_skips:
                raise
            ident, (_, why) = min(text_skips.items())
            raise ConvertError(
                f"{exc} (the labels read are those of the samples with text: {len(text_skips)} samples were "
                f"skipped for their text first, e.g. {ident}: {why})"
            ) from None
        if known is not None and kind.value == "name":  # names also keep the manifest's order
            order = known + sorted(set(classes) - set(known))
            pos = {c: i for i, c in enumerate(order)}
            classes, indices = order, [None if i is None else pos[classes[i]] for i in indices]
        what = f"{'class names' if kind.value == 'name' else 'class indices'} (--label-type {kind.value})"
    for (ident, url, offset, size, label, extra, _, text), index in zip(found, indices):
        if index is None and opts.labelled:
            out.skipped.append(
                (ident, SkipReason.BAD_LABEL, f"{label!r} is not a class index (0 .. {len(classes) - 1})")
            )
        else:
            single, labels = (None, index) if multi else (index, None)
            ref = tar_ref(url, offset, size)
            out.files.append(SourceFile(ident, single, size, ref, extra or None, labels, None, text))
    out.files.sort(key=lambda f: f.relpath)
    out.skipped.sort()
    out.class_names = sorted({classes[c] for f in out.files for c in f.class_indices()})
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
        fields=fields_of(opts.labelled, multi, False, text_ext is not None),
    )


def _label_sets(
    src: str, found: list[tuple[Any, ...]], known: list[str] | None, opts: ScanConfig
) -> tuple[list[str], list[tuple[int, ...] | None], str]:
    """Classes and each sample's class indices of a multi-label tar source; ``known``: a shardkit manifest's classes
    (the items are indices into them, e.g. ``--label-key labels.json`` on shardkit's own multi-label shards)."""
    if known is not None:
        out: list[tuple[int, ...] | None] = []
        for f in found:
            ok = all(is_index(i) and 0 <= int(i) < len(known) for i in f[4])
            out.append(tuple(sorted({int(i) for i in f[4]})) if ok else None)
        return known, out, f"sets of class indices into the manifest's {len(known)} classes (multi-label)"
    classes, indices, kind = read_label_sets(src, [(f"sample {f[0]}", f[4]) for f in found], opts.label_type)
    return (
        classes,
        indices,
        f"sets of {'class names' if kind.value == 'name' else 'class indices'} (multi-label, --label-type {kind.value})",
    )
