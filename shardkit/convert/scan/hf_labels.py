"""How the label columns of a Hugging Face dataset become classes (see :mod:`shardkit.convert.scan.hf`): each
split's label kind (a ClassLabel, a Sequence(ClassLabel), integers, strings), the class space the splits share,
each row's label by its kind, and the classes and indices of the usable rows.
"""

from __future__ import annotations

from typing import Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.source import is_index, read_labels
from shardkit.errors import ConvertError

#: a row of a split: split, row, label, extra, image bytes, (target, text, skip)
Row = tuple[str, int, Any, dict[str, Any], int, tuple[Any, Any, Any]]


def label_kind(datasets: Any, what: str, split: str, col: str, feat: Any) -> str:
    """``classlabel``, ``int``, ``str``, ``list`` (only empty lists are accepted: ``no_label``) or ``null``; refuses others."""
    lists = tuple(
        c for c in (getattr(datasets, n, None) for n in ("List", "LargeList", "Sequence")) if isinstance(c, type)
    )
    if isinstance(feat, datasets.ClassLabel):
        return "classlabel"
    if isinstance(feat, lists) and isinstance(getattr(feat, "feature", None), datasets.ClassLabel):
        return "classlabels"  # Sequence(ClassLabel): a multi-label column
    if isinstance(feat, datasets.Value) and feat.dtype.startswith(("int", "uint")):
        return "int"
    if isinstance(feat, datasets.Value) and feat.dtype in ("string", "large_string"):
        return "str"
    if isinstance(feat, datasets.Value) and feat.dtype == "null":
        return "null"
    if isinstance(feat, lists):
        return "list"
    raise ConvertError(
        f"{what}: label column {col!r} of split {split!r} is {feat!r}: not a class label (a float, bool or other value; "
        "float targets go in --target-col, multi-label needs a Sequence(ClassLabel)); pass --label-col naming a column of "
        "class names or indices, or a ClassLabel"
    )


def class_space(what: str, kinds: dict[str, tuple[str, Any]], opts: ScanConfig) -> list[str] | None:
    """The ClassLabel names every split shares (``None``: no ClassLabel split); refuses splits that cannot share them."""
    multi = {n for n, (k, _) in kinds.items() if k == "classlabels"}
    if multi and len(multi) != len(kinds):
        one, other = sorted(multi)[0], sorted(set(kinds) - multi)[0]
        raise ConvertError(
            f"{what}: split {one!r} labels {opts.label_col!r} with {kinds[one][1]!r} (multi-label) but split {other!r} "
            f"with {kinds[other][1]!r}; give every split the same Sequence(ClassLabel) (datasets' cast_column)"
        )
    named = {
        n: f.feature if k == "classlabels" else f for n, (k, f) in kinds.items() if k in ("classlabel", "classlabels")
    }
    if not named:
        return None
    first, feat = next(iter(named.items()))
    for n, f in named.items():
        if list(f.names) != list(feat.names):
            raise ConvertError(
                f"{what}: split {first!r} has ClassLabel names {list(feat.names)[:10]} but split {n!r} has "
                f"{list(f.names)[:10]}; give every split the same ClassLabel (datasets' cast_column)"
            )
    for n, (k, f) in kinds.items():
        if k == "int":
            raise ConvertError(
                f"{what}: split {first!r} labels {opts.label_col!r} with {feat!r} but split {n!r} with {f!r} "
                "(class indices of which classes?); cast that split's column to the same ClassLabel"
            )
    return list(feat.names)


def row_label(kinds: dict[str, tuple[str, Any]], r: Row) -> tuple[Any, SkipReason | None]:
    """A row's label by its split's label kind: ``(value, None)`` (a class name or index, a set of ClassLabel
    indices, ``None`` without labels) or ``(None, reason)``."""
    from shardkit.convert.scan.source import spelled_label_value as label_value

    kind = kinds[r[0]][0]
    if kind == "none":
        value, bad = None, None
    elif kind == "classlabels":  # a list of ClassLabel indices: a set of classes ([]: none; -1 or beyond: bad)
        n = len(kinds[r[0]][1].feature.names)
        value, bad = (
            (None, SkipReason.NO_LABEL)
            if r[2] is None
            else (tuple(sorted(set(r[2]))), None)
            if all(0 <= x < n for x in r[2])
            else (None, SkipReason.BAD_LABEL)
        )
    else:
        value, bad = (None, SkipReason.NO_LABEL) if kind == "classlabel" and r[2] in (None, -1) else label_value(r[2])
    return value, bad


def hf_classes(
    what: str,
    kinds: dict[str, tuple[str, Any]],
    raw: list[Row],
    usable: list[int],
    values: list[Any],
    classes: list[str] | None,
    opts: ScanConfig,
) -> tuple[list[str], list[Any], str]:
    """The classes, each usable row's class index (or indices; ``None``: not a valid one) and a note: the
    ClassLabel names (``classes``) and names from string-labelled splits after them, or the labels read as
    names or indices (:func:`read_labels`)."""
    indices: list[Any]
    multi = any(k == "classlabels" for k, _ in kinds.values())
    if not opts.labelled:
        classes, indices, note = [], [None] * len(usable), "no labels (--no-label)"
    elif multi:
        assert classes is not None
        indices = values
        note = f"{len(classes)} classes from the Sequence(ClassLabel) feature {opts.label_col!r} (multi-label)"
    elif classes is not None:  # ClassLabel indices; names from string splits join the ClassLabel's names, after them
        names = [v for k, v in zip(usable, values) if kinds[raw[k][0]][0] == "str"]
        extra_names = sorted(set(names) - set(classes))
        digits = next((v for v in extra_names if is_index(v)), None)
        if digits is not None:
            cl = next(n for n, (kd, _) in kinds.items() if kd == "classlabel")
            st = next(raw[k][0] for k, v in zip(usable, values) if v == digits)
            raise ConvertError(
                f"{what}: split {cl!r} has a ClassLabel but split {st!r} labels {digits!r}, not one of its names "
                f"{classes[:10]} (a class index?); cast that split's column to the same ClassLabel"
            )
        classes = classes + extra_names
        pos = {c: i for i, c in enumerate(classes)}
        n_cl = len(classes) - len(extra_names)
        indices = [pos[v] if isinstance(v, str) else v if 0 <= v < n_cl else None for v in values]
        note = f"{n_cl} classes from the ClassLabel feature {opts.label_col!r}"
        if extra_names:
            note += f", {len(extra_names)} more named only in string-labelled splits: {', '.join(extra_names[:5])}"
    else:
        classes, indices, kind = read_labels(
            what, [(f"split {raw[k][0]} row {raw[k][1]}", v) for k, v in zip(usable, values)], opts.label_type
        )
        note = f"labels read as {'class names' if kind.value == 'name' else 'class indices'} (--label-type {kind.value}): {len(classes)} classes"
    return classes, indices, note
