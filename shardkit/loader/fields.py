"""``fields=``: the named fields a batch is a dict of, checked against the datasets once, at ``load()``.

The fields are the entries of :data:`shardkit.format.fieldtable.FIELDS` (what follows is made from it):

{table}

``M`` is the most objects any sample of that batch keeps after the crop (boxes less than ``min_visible``
of whose area stays in the output are dropped and counted: ``LoaderStats.boxes_dropped``). The targets
move with the pixels: :mod:`shardkit.loader.targetrows`. An ``instances`` pixel holds the row of its object in
that sample's ``boxes`` (``0 .. box_count - 1``): a dropped box's pixels and a crowd region's become -1
(crowd regions are not yielded as boxes, unless ``box_crowd`` is asked for: then they are rows like any other
object, marked in ``box_crowd``, moved and dropped by the same rule, and their pixels hold their row).

What a dataset stores is its manifest's ``fields`` (:mod:`shardkit.format.fields`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from shardkit.format import fieldtable
from shardkit.targets.geometry import MIN_VISIBLE

#: every field ``fields=`` may name (the table's names)
FIELD_KINDS = fieldtable.names()
#: the target fields (moved with the pixels by every crop) and the stored field each needs
TARGET_KINDS = fieldtable.target_fields()
#: the fields built per row in the worker (image, class label, key and source are every batch's own)
ROW_FIELDS = fieldtable.row_fields()
#: the fields every dataset has, whatever it stores
ALWAYS = fieldtable.always()
#: the fields asked for by ``fields=`` only, never part of a default selection
OPT_IN = tuple(f.name for f in fieldtable.FIELDS if f.opt_in)


@dataclass(frozen=True)
class RowSpec:
    """Which row fields a worker builds, and their widths (picklable).

    Attributes:
        fields: the asked-for fields among :data:`ROW_FIELDS`, in that order.
        num_classes: ``C``, the multi-hot width (the widest source's; a mixture's stage remaps to its own).
        num_targets: ``D``, the values per ``target``.
        targets: the asked-for target fields among :data:`TARGET_KINDS`, in :data:`FIELD_KINDS` order.
        num_keypoints: ``K`` (with ``keypoints``).
        min_visible: boxes keeping less of their moved area in the output are dropped (counted).
        flip_pairs: keypoint index pairs swapped when a sample is mirrored.
    """

    fields: tuple[str, ...] = ()
    num_classes: int = 0
    num_targets: int = 0
    targets: tuple[str, ...] = ()
    num_keypoints: int = 0
    min_visible: float = MIN_VISIBLE
    flip_pairs: tuple[tuple[int, int], ...] = ()


def parse_fields(value: "Sequence[str] | None") -> tuple[str, ...]:
    """``fields=`` as a tuple of known, distinct names (``None`` or ``()``: the default tuple batches)."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"fields must be a sequence of field names such as ('image', 'label'), got {value!r}")
    names = tuple(value)
    known = fieldtable.by_name()
    bad = [f for f in names if f not in known]
    if bad:
        raise ValueError(f"unknown field {bad[0]!r} in fields=; valid fields: {', '.join(known)}")
    if len(set(names)) != len(names):
        twice = next(f for f in names if names.count(f) > 1)
        raise ValueError(f"field {twice!r} is listed twice in fields={list(names)}")
    return names


def available(manifest: Any) -> tuple[str, ...]:
    """The fields ``fields=`` may name for a dataset (what it stores, plus :data:`ALWAYS`), in :data:`FIELD_KINDS` order."""
    stored = {"image", *getattr(manifest, "fields", ("image", "label"))}
    return tuple(f.name for f in fieldtable.FIELDS if f.stored is None or f.stored in stored)


def check_fields(
    names: tuple[str, ...],
    manifests: Sequence[Any],
    urls: Sequence[str],
    *,
    raw: bool = False,
    min_visible: Optional[float] = None,
    flip_pairs: "Sequence[Sequence[int]] | None" = None,
) -> RowSpec:
    """The row fields a worker builds for ``fields=names`` over ``manifests`` (one per source; ``raw``: the loader
    yields raw samples, which need no ``label``). ``min_visible`` (default :data:`MIN_VISIBLE`) and ``flip_pairs``
    (default: the first manifest's) go to the target fields.

    Raises:
        ValueError: one line: a field a source does not have (naming the fields it has), sources whose
            ``target`` names differ, a ``labels`` dataset without class names, or (``names`` empty: the
            default ``(images, labels)`` batches) a dataset without ``label``.
    """
    mixed = len(manifests) > 1

    def who(i: int) -> str:
        return f"source {i} ({urls[i]})" if mixed else f"the dataset {urls[i]}"

    if not names:
        for i, m in enumerate(manifests if not raw else ()):
            if "label" not in getattr(m, "fields", ("image", "label")):
                has = available(m)
                raise ValueError(
                    f"{who(i)} has no 'label' field (it has {', '.join(has)}): pass fields=, e.g. "
                    f"fields={tuple(f for f in has if f in ('image', 'labels', 'target', 'text'))!r}"
                )
        return RowSpec()
    for i, m in enumerate(manifests):
        has = available(m)
        missing = [f for f in names if f not in has]
        if missing:
            raise ValueError(f"{who(i)} has no {missing[0]!r} field; it has {', '.join(has)}")
        if "labels" in names and not m.classes:
            raise ValueError(f"{who(i)} stores 'labels' but its manifest lists no class names (the multi-hot width)")
    if "target" in names:
        first = list(manifests[0].targets)
        for i, m in enumerate(manifests[1:], 1):
            if list(m.targets) != first:
                raise ValueError(
                    f"{who(i)} names its targets {list(m.targets)}, source 0 {first}: sources must agree on 'target'"
                )
    targets = tuple(f for f in fieldtable.target_fields() if f in names)
    kp = len(getattr(manifests[0], "keypoint_names", [])) if "keypoints" in names else 0
    if kp:
        for i, m in enumerate(manifests[1:], 1):
            if list(m.keypoint_names) != list(manifests[0].keypoint_names):
                raise ValueError(
                    f"{who(i)} names its keypoints {list(m.keypoint_names)}, source 0 "
                    f"{list(manifests[0].keypoint_names)}: sources must agree on 'keypoints'"
                )
    pairs = getattr(manifests[0], "flip_pairs", []) if flip_pairs is None else flip_pairs
    visible = MIN_VISIBLE if min_visible is None else float(min_visible)
    if not 0.0 <= visible <= 1.0:
        raise ValueError(f"min_visible must lie in [0, 1] (a share of each box's area), got {min_visible!r}")
    checked: list[tuple[int, int]] = []
    for p in pairs if kp else ():
        if len(p) != 2 or not all(isinstance(i, int) and 0 <= i < kp for i in p) or p[0] == p[1]:
            raise ValueError(f"flip pair {list(p)} is not two distinct keypoint indices in [0, {kp})")
        twice = {int(p[0]), int(p[1])} & {i for q in checked for i in q}
        if twice:
            raise ValueError(f"flip_pairs name keypoint {min(twice)} twice: each keypoint is in one pair at most")
        checked.append((int(p[0]), int(p[1])))
    return RowSpec(
        tuple(f for f in fieldtable.row_fields() if f in names),
        max((len(m.classes) for m in manifests), default=0) if "labels" in names else 0,
        len(manifests[0].targets) if "target" in names else 0,
        targets,
        kp,
        visible,
        tuple(checked),
    )


def _table() -> str:
    """The fields as a reStructuredText table (this module's docstring)."""
    rows = [(f"``{f.name}``", f"{f.dtype} ``{f.shape}`` {f.doc}".strip(), _where(f)) for f in fieldtable.FIELDS]
    widths = [max(len(r[i]) for r in rows + [("field", "the batch holds", "available")]) for i in range(3)]
    rule = " ".join("=" * w for w in widths)
    head = " ".join(t.ljust(w) for t, w in zip(("field", "the batch holds", "available"), widths))
    body = [" ".join(t.ljust(w) for t, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join([rule, head.rstrip(), rule, *body, rule])


def _where(f: fieldtable.Field) -> str:
    if f.stored is None or f.stored == "image":
        return "always"
    return f"datasets that store ``{f.stored}``" + (" (asked for by name only)" if f.opt_in else "")


__doc__ = (__doc__ or "").replace("{table}", _table())
