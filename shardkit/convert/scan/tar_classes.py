"""How the labels of a tar source become classes (see :mod:`shardkit.convert.scan.tars`).

shardkit's own shards keep their class names: a ``manifest.json`` next to the tars that lists them gives the
classes (``.cls`` indexes them); without one, ``.json`` ``"class"`` names that match ``.cls`` one to one are the
labels, in ``.cls`` order; otherwise the labels are read as names or indices like a listing's
(:func:`~shardkit.convert.scan.source.read_labels`), or as sets of them with ``multi_label``.

A found sample is a tuple ``(identity, url, offset, size, label, extra, .json "class" field, text)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.source import is_index, read_labels
from shardkit.convert.scan.values import read_label_sets
from shardkit.errors import ConvertError
from shardkit.storage import fs as storage


def tar_classes(
    src: str,
    found: Sequence[tuple[Any, ...]],
    text_skips: dict[str, tuple[SkipReason, str]],
    base: str,
    urls: list[str],
    opts: ScanConfig,
    storage_options: dict[str, Any],
) -> tuple[list[str], list[Any], str, str | None]:
    """The classes, each found sample's class index (or indices; ``None``: not a valid one), how the labels were
    read and a note: a shardkit manifest's classes, the ``.json`` ``"class"`` names of shardkit's shards, or
    the labels read as names or indices (:func:`read_labels`)."""
    multi = opts.is_multi_label
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
    return classes, indices, what, note


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


def _class_field_names(found: Sequence[tuple[Any, ...]]) -> dict[str, str] | None:
    """``{.cls index: name}`` when every sample's ``.json`` has a ``"class"`` name matching its ``.cls`` index one to one."""
    pairs = {(str(int(f[4])), f[6]) for f in found if is_index(f[4]) and int(f[4]) >= 0}
    if not found or len(pairs) != len({p[0] for p in pairs}) or len(pairs) != len({p[1] for p in pairs}):
        return None
    if not all(isinstance(f[6], str) and f[6].strip() and is_index(f[4]) and int(f[4]) >= 0 for f in found):
        return None
    return dict(pairs)


def _label_sets(
    src: str, found: Sequence[tuple[Any, ...]], known: list[str] | None, opts: ScanConfig
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
