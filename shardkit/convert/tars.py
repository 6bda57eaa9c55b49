"""Existing WebDataset tars as SRC: re-shard, re-size, re-encode (or ``--copy``) someone else's shards.

SRC is one ``.tar`` path or fsspec URL, or a brace pattern such as
``s3://bucket/laion/{00000..00099}.tar`` (every tar it names must exist).
Members form samples by WebDataset's rule: the key is the member name up to
the first dot of its base name, and consecutive members with the same key are
one sample. A sample's identity (its ``path`` in the new ``.json``) is
``<tar name>/<key>``, where the tar name is its URL below the folder the
tars share. Per sample:

* the image is the first member whose extension is in ``image_key``
  (``jpg;jpeg;png;webp``); none: ``missing_file``;
* the label is the ``label_key`` member (``cls``), or the ``label_json_field``
  field of the ``.json`` member; none: ``no_label``; read as names or indices
  like a listing's (:func:`shardkit.convert.source.read_labels`); not a
  valid index: ``bad_label``;
* the fields of the ``.json`` member are kept in the new ``.json``
  (except ``path``, ``class``, ``width`` and ``height``, which shardkit writes);
  a ``.json`` that is not valid JSON, or too large or deep
  (:func:`~shardkit.convert.source.extra_problem`), is ``bad_metadata``;
* a key that appears again later in the tars is ``duplicate_path``.

Only member headers and the small label/metadata members are read while
scanning (:data:`SCAN_THREADS` tars at a time; a remote tar is read in large
blocks, so about its size), and images again by byte range when encoded.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tarfile
from typing import Any

from .. import storage
from ..errors import ConvertError
from .imageproc import SkipReason
from .listing import RESERVED_FIELDS
from .options import SourceOptions
from .source import Reader, Source, SourceFile, SplitSource, extra_problem, read_labels, tar_ref

_KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # webdataset's base_plus_ext
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


def _members(url: str, small: frozenset[str], **storage_options: Any) -> list[tuple[str, str, int, int, bytes | None]]:
    """``(key, extension, data offset, size, content)`` of each regular file in the tar at ``url``, in order;
    content only for extensions in ``small`` (labels, metadata) up to :data:`_SMALL` bytes.

    One open file serves headers and small members, so a remote tar is read in a few large requests.
    """
    out = []
    with storage.open_read(url, **storage_options) as f:
        try:
            with tarfile.open(fileobj=f, mode="r:") as tf:
                members = [m for m in tf.getmembers() if m.isfile()]
        except tarfile.TarError as exc:
            raise ConvertError(f"{url}: not a readable tar ({exc}); check the file, or leave it out of SRC") from None
        for m in members:
            km = _KEY.match(m.name)
            key, ext = (km.group(1), km.group(2).lower()) if km else (m.name, "")
            data = None
            if ext in small and m.size <= _SMALL:
                f.seek(m.offset_data)
                data = f.read(m.size)
            out.append((key, ext, m.offset_data, m.size, data))
    return out


def scan_tars(src: str, opts: SourceOptions, split: str = "train", **storage_options: Any) -> Source:
    """Scan the tars of ``src`` (see module docstring)."""
    urls = expand(src)
    missing = [u for u in urls if not storage.exists(u, **storage_options)]
    if len(missing) == len(urls):
        raise ConvertError(f"{src}: matches no tar (looked for {len(urls)}: {urls[0]}{' ...' if len(urls) > 1 else ''})")
    if missing:
        raise ConvertError(f"{src}: {len(missing)} of {len(urls)} tars do not exist, e.g. {missing[0]}; fix the pattern")
    prefix = posixpath.commonprefix(urls)
    base = prefix[: prefix.rfind("/") + 1]  # the folder the tars share
    image_exts = [e.strip().lower() for e in opts.image_key.split(";") if e.strip()]
    label_ext = opts.label_key.lower()
    small = frozenset({"json", label_ext})
    out = SplitSource(name=split, directory=src, files=[])
    found: list[tuple[str, str, int, int, Any, dict[str, Any]]] = []  # identity, url, offset, size, label, extra
    seen: set[str] = set()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(SCAN_THREADS) as pool:  # tars are scanned concurrently, results taken in order
        listed = pool.map(lambda u: _members(u, small, **storage_options), urls)
        scanned = list(zip(urls, listed))
    for url, members in scanned:
        name = url[len(base):]
        groups: list[tuple[str, dict[str, tuple[int, int, bytes | None]]]] = []
        for key, ext, offset, size, data in members:
            if not groups or groups[-1][0] != key:
                groups.append((key, {}))
            groups[-1][1][ext] = (offset, size, data)
        for key, g in groups:
            ident = f"{name}/{key}"
            if ident in seen:
                out.skipped.append((f"{ident} (again)", SkipReason.DUPLICATE_PATH, "this key appears twice in the tar"))
                continue
            seen.add(ident)
            image = next((e for e in image_exts if e in g), None)
            meta: Any = None
            problem = None
            if "json" in g:
                try:
                    if g["json"][2] is None:
                        raise ValueError(f"{g['json'][1]} bytes")
                    meta = json.loads(g["json"][2])
                except (ValueError, RecursionError) as exc:
                    problem = f"its .json member is not usable JSON ({type(exc).__name__}: {str(exc)[:80]})"
            extra = {k: v for k, v in meta.items() if k not in RESERVED_FIELDS} if isinstance(meta, dict) else {}
            problem = problem or extra_problem(extra)
            label: Any = None
            if opts.label_json_field is not None:
                label = extra.pop(opts.label_json_field, None)
            elif label_ext in g and g[label_ext][2] is not None:
                label = g[label_ext][2].decode("utf-8", "replace").strip()  # type: ignore[union-attr]
            if image is None:
                exts = ", ".join("." + e for e in sorted(g) if e) or "none"
                out.skipped.append((ident, SkipReason.MISSING_FILE, f"no image member ({opts.image_key}); members: {exts}"))
            elif problem:
                out.skipped.append((ident, SkipReason.BAD_METADATA, problem))
            elif label is None or label == "":
                where = f"field {opts.label_json_field!r} of .json" if opts.label_json_field else f".{opts.label_key}"
                out.skipped.append((ident, SkipReason.NO_LABEL, f"no label ({where})"))
            else:
                found.append((ident, url, g[image][0], g[image][1], label, extra))
    if not found:
        raise ConvertError(f"{src}: no sample with both an image ({opts.image_key}) and a label")
    classes, indices, kind = read_labels(src, [(f"sample {f[0]}", f[4]) for f in found], opts.label_type)
    for (ident, url, offset, size, label, extra), index in zip(found, indices):
        if index is None:
            out.skipped.append((ident, SkipReason.BAD_LABEL, f"{label!r} is not a class index (0, 1, ...)"))
        else:
            out.files.append(SourceFile(ident, index, size, tar_ref(url, offset, size), extra or None))
    out.files.sort(key=lambda f: f.relpath)
    out.skipped.sort()
    out.class_names = sorted({classes[f.label] for f in out.files})
    what = "class names" if kind.value == "name" else "class indices"
    local = [storage.local_path(u) for u in urls if storage.is_local(u)]
    return Source(
        root=src, classes=classes, splits=[out], nested=False, reader=Reader("", storage_options),
        local_dir=os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in local]) if local else None, walked=False,
        notes=[f"{len(urls)} tars; labels read as {what} (--label-type {kind.value}): {len(classes)} classes"],
    )

