"""A Hugging Face dataset as SRC: ``hf:PATH`` (a ``save_to_disk`` folder, a ``.parquet`` or ``.arrow`` file,
or a local dataset repository: a folder of data files such as ``data/train-00000-of-00002.parquet``, read with
``datasets.load_dataset``, which caches it in the usual Hugging Face cache) or a ``datasets.Dataset`` /
``DatasetDict`` given to :func:`shardkit.convert.convert`.

Needs the optional ``datasets`` package (``pip install 'shardkit[hf]'``). A
``DatasetDict`` gives one split per entry (``DEST/<split>/``); a single
dataset is one split. Rows are items in row order: the identity of row ``i``
is ``row-<i>`` (zero-padded), its image the ``image_col`` column (an
``Image`` feature: stored bytes, or the file its path names), its label the
``label_col`` column. Labels, by the column's feature type:

* ``ClassLabel``: its names, in its order, are the classes; ``-1`` (or none) is ``no_label``;
* ``Value`` of ints or strings: read as names or indices like a listing's, by the one label-value rule
  (:func:`shardkit.convert.scan.source.spelled_label_value`: empty is ``no_label``; a string such as ``'[0, 1]'``, ``'2.5'``
  or ``'True'`` is ``bad_label``);
* ``Sequence(ClassLabel)`` (a list of ClassLabel indices): multi-label (field ``labels``); the inner
  ClassLabel's names are the classes; ``[]`` is a sample with no class, ``None`` ``no_label``, a ``-1`` in the
  list ``bad_label``; every split must then be multi-label alike;
* another list (``List``/``Sequence`` of ints or strings): an empty list is ``no_label``; any non-empty list
  refuses the dataset in one line;
* a float, bool or any other type: refused in one line naming the column and its feature type
  (float targets go in ``--target-col``).

``--target-col`` columns must be int or float ``Value`` columns (a row with ``None``, ``nan`` or ``inf`` there is
``bad_target``), the ``--text-col`` column a string one (``None`` or ``""`` is ``no_text``); both are left out of
the sample's ``.json``. ``--no-label``: no label column is read.

A ``DatasetDict`` has one class space: ClassLabel splits must share their names; a split of string labels
maps names onto the ClassLabel's indices (names only it has come after them, sorted); a split of integer labels
next to a ClassLabel split, or of digit strings that are not ClassLabel names, is refused in one line naming
both splits. Every split is returned, also one whose every row is skipped (e.g. a Hub ``test`` split of
``-1`` labels: no files, its skips); only when no split has a usable row is the dataset refused.
Each split's skips stay with that split. Other scalar columns are kept
in each sample's ``.json`` (a row whose columns are too large for it is ``bad_metadata``).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Any

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ScanConfig
from shardkit.convert.scan.listing import RESERVED_FIELDS
from shardkit.convert.scan.source import (
    MissingFile,
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    extra_problem,
    is_index,
    read_labels,
)
from shardkit.convert.scan.values import fields_of, target_values, text_value
from shardkit.errors import ConvertError

_REF = "hf:"
#: files that mark a ``save_to_disk`` folder (a Dataset, a DatasetDict)
_SAVED_MARKERS = ("state.json", "dataset_dict.json")
#: ``Value`` dtypes kept in the sample's ``.json`` (others, e.g. timestamps, are not JSON values)
_JSON_DTYPES = ("string", "large_string", "bool", "int", "uint", "float")


def _load(path: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise ConvertError(
            f"hf:{path}: the Hugging Face source needs the datasets package: pip install 'shardkit[hf]'"
        ) from None
    if not os.path.exists(path):
        raise ConvertError(
            f"hf:{path}: does not exist (expected a save_to_disk folder, a folder of data files, or a .parquet or .arrow file)"
        )
    try:
        if path.endswith(".parquet"):
            return datasets.Dataset.from_parquet(path)
        if path.endswith(".arrow"):
            return datasets.Dataset.from_file(path)
        if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, m)) for m in _SAVED_MARKERS):
            return datasets.load_dataset(
                path
            )  # a local dataset repository: data files (parquet, ...) with splits in their names
        return datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ConvertError(f"hf:{path}: not a dataset saved by datasets ({exc})") from None


def _parts(ds: Any, split: str, image_col: str, mask_col: str | None = None) -> dict[str, Any]:
    """``{split: dataset with image_col (and mask_col) undecoded}``."""
    import datasets

    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    out = {}
    for name, p in parts.items():
        for col in (image_col, mask_col):
            if col is not None and col in p.column_names:
                p = p.cast_column(col, datasets.Image(decode=False))
        out[name] = p
    return out


@functools.lru_cache(maxsize=4)
def _opened(path: str, split: str, image_col: str, mask_col: str | None = None) -> dict[str, Any]:
    """The dataset at ``path`` opened once per process (worker processes get the path, not the data)."""
    return _parts(_load(path), split, image_col, mask_col)


#: prefix of the ref of a row's mask image (``--mask-col``): ``hfmask:<split>:<row>``
MASK_REF = "hfmask:"


class HFReader(Reader):
    """Reads a row's image bytes (``ref`` = ``hf:<split>:<row>``) or its mask's (``hfmask:<split>:<row>``, the
    ``mask_col`` column); pickles as the path when there is one."""

    def __init__(
        self, path: str | None, splits: dict[str, Any] | None, split: str, image_col: str, mask_col: str | None = None
    ):
        super().__init__("")
        self.path, self.splits, self.split, self.image_col = path, splits, split, image_col
        self.mask_col = mask_col

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "splits": None} if self.path is not None else dict(self.__dict__)

    def read(self, relpath: str, ref: str) -> bytes:
        col = self.image_col
        if ref.startswith(MASK_REF) and self.mask_col is not None:
            ref, col = _REF + ref[len(MASK_REF) :], self.mask_col
        if not ref.startswith(_REF):
            return super().read(relpath, ref)
        split, row = ref[len(_REF) :].rsplit(":", 1)
        if self.splits is None:
            self.splits = _opened(self.path, self.split, self.image_col, getattr(self, "mask_col", None))
        value = self.splits[split][int(row)][col]
        if value and value.get("bytes") is not None:
            return bytes(value["bytes"])
        if not value or not value.get("path"):
            raise MissingFile(f"split {split} row {row}: no {'mask' if col != self.image_col else 'image'}")
        return super().read(relpath, value["path"])


def _label_kind(datasets: Any, what: str, split: str, col: str, feat: Any) -> str:
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


def _class_space(what: str, kinds: dict[str, tuple[str, Any]], opts: ScanConfig) -> list[str] | None:
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


def scan_hf(src: Any, opts: ScanConfig, split: str = "train") -> ScannedSource:
    """The :class:`ScannedSource` of a dataset object or of the dataset saved at path ``src``."""
    import datasets

    from shardkit.convert.scan.source import spelled_label_value as label_value

    what = f"hf:{src}" if isinstance(src, str) else type(src).__name__
    ds = _load(src) if isinstance(src, str) else src
    if not isinstance(ds, (datasets.Dataset, datasets.DatasetDict)):
        raise ConvertError(f"{what}: not a datasets.Dataset or DatasetDict")
    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    splits: list[SplitSource] = []
    kinds: dict[str, tuple[str, Any]] = {}
    # split, row, label, extra, image bytes, (target, text, skip)
    raw: list[tuple[str, int, Any, dict[str, Any], int, tuple[Any, Any, Any]]] = []
    field_cols = [*opts.target_cols, *([opts.text_col] if opts.text_col else [])]
    for name, part in sorted(parts.items()):
        cols = list(part.column_names)
        wanted = [("--image-col", opts.image_col)] + ([("--label-col", opts.label_col)] if opts.labelled else [])
        for flag, col in wanted + [("--target-col", c) for c in opts.target_cols] + [("--text-col", opts.text_col)]:
            if col is not None and col not in cols:
                raise ConvertError(f"{what}: no column {col!r} ({flag}); its columns are: {', '.join(cols)}")
        _check_field_columns(datasets, what, name, part.features, opts)
        feat = part.features[opts.label_col] if opts.labelled else None
        kinds[name] = (
            (_label_kind(datasets, what, name, opts.label_col, feat), feat) if opts.labelled else ("none", None)
        )
        part = part.cast_column(opts.image_col, datasets.Image(decode=False))
        sizes = _byte_sizes(part, opts.image_col)
        extra_cols = [
            c
            for c, f in part.features.items()
            if c not in (opts.image_col, opts.label_col, *field_cols)
            and isinstance(f, datasets.Value)
            and f.dtype.startswith(_JSON_DTYPES)
            and c not in RESERVED_FIELDS
        ]
        table = part.select_columns([*([opts.label_col] if opts.labelled else []), *field_cols, *extra_cols]).to_dict()
        labels = table.pop(opts.label_col) if opts.labelled else [None] * len(part)
        row_fields = [_row_fields(table, i, opts) for i in range(len(part))]
        if kinds[name][0] == "list":
            full = next((i for i, v in enumerate(labels) if v), None)
            if full is not None:
                raise ConvertError(
                    f"{what}: label column {opts.label_col!r} of split {name!r} is {feat!r}: not a class label "
                    f"(row {full} holds {str(labels[full])[:40]}; for multi-label cast it to Sequence(ClassLabel); an empty list is no_label)"
                )
        for i, label in enumerate(labels):
            raw.append((name, i, label, {c: table[c][i] for c in extra_cols}, sizes[i], row_fields[i]))
        splits.append(SplitSource(name=name, directory=what, files=[]))
    by_name = {s.name: s for s in splits}
    classes = _class_space(what, kinds, opts)
    width = max(8, len(str(max((r[1] for r in raw), default=0))))
    ident = [f"row-{r[1]:0{width}d}" for r in raw]
    usable: list[int] = []
    values: list[Any] = []
    indices: list[Any]
    for k, r in enumerate(raw):
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
            value, bad = (
                (None, SkipReason.NO_LABEL) if kind == "classlabel" and r[2] in (None, -1) else label_value(r[2])
            )
        if bad is None and r[5][2] is not None:  # the label is fine, a target or the text is not
            by_name[r[0]].skipped.append((ident[k], r[5][2][0], f"split {r[0]} row {r[1]}: {r[5][2][1]}"))
        elif bad is not None:
            detail = (
                "no label"
                if bad == SkipReason.NO_LABEL
                else f"{str(r[2])[:80]!r} is not a class name or index (a list, number or bool)"
            )
            by_name[r[0]].skipped.append((ident[k], bad, f"split {r[0]} row {r[1]}: {detail}"))
        else:
            usable.append(k)
            values.append(value)
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
    for k, index in zip(usable, indices):
        name, row, label, extra, size, (target, text, _) = raw[k]
        problem = extra_problem(extra)
        if index is None and opts.labelled:
            by_name[name].skipped.append(
                (ident[k], SkipReason.BAD_LABEL, f"split {name} row {row}: {label!r} is not a class index")
            )
        elif problem:
            by_name[name].skipped.append((ident[k], SkipReason.BAD_METADATA, f"split {name} row {row}: {problem}"))
        else:
            single, labels = (None, index) if multi else (index, None)
            ref = f"{_REF}{name}:{row}"
            by_name[name].files.append(SourceFile(ident[k], single, size, ref, extra or None, labels, target, text))
    if not any(s.files for s in splits):

        def why(s: SplitSource) -> str:
            reasons = Counter(r.value for _, r, _ in s.skipped)
            return (
                f"{s.name} ({len(s.skipped)} skipped: "
                + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
                + ")"
            )

        raise ConvertError(
            f"{what}: no split has a sample to convert (no labelled image): {'; '.join(why(s) for s in splits)}; "
            f"check --label-col {opts.label_col!r} and --image-col {opts.image_col!r}"
        )
    for s in splits:
        s.files.sort(key=lambda f: f.relpath)
        s.skipped.sort()
        s.class_names = sorted({classes[c] for f in s.files for c in f.class_indices()})
    return ScannedSource(
        root=what,
        classes=classes,
        splits=splits,
        nested=isinstance(ds, datasets.DatasetDict),
        reader=HFReader(
            src if isinstance(src, str) else None,
            None if isinstance(src, str) else _parts(ds, split, opts.image_col),
            split,
            opts.image_col,
        ),
        notes=[note],
        fields=fields_of(opts.labelled, multi, bool(opts.target_cols), opts.text_col is not None),
        targets=list(opts.target_cols),
    )


def _check_field_columns(datasets: Any, what: str, split: str, features: Any, opts: ScanConfig) -> None:
    """Refuse (one line) a ``--target-col`` that is not a numeric ``Value`` or a ``--text-col`` that is not a string one."""
    for col in opts.target_cols:
        f = features[col]
        if not (isinstance(f, datasets.Value) and f.dtype.startswith(("int", "uint", "float", "double"))):
            raise ConvertError(
                f"{what}: target column {col!r} of split {split!r} is {f!r}, not a number (--target-col takes int or float columns)"
            )
    if opts.text_col is not None:
        f = features[opts.text_col]
        if not (isinstance(f, datasets.Value) and f.dtype in ("string", "large_string")):
            raise ConvertError(
                f"{what}: text column {opts.text_col!r} of split {split!r} is {f!r}, not a string (--text-col)"
            )


def _row_fields(table: dict[str, list[Any]], i: int, opts: ScanConfig) -> tuple[Any, Any, Any]:
    """``(target, text, None)`` of row ``i``, or ``(None, None, (reason, why))`` when a target or the text is not usable."""
    target, why = target_values(lambda c: table[c][i], opts.target_cols) if opts.target_cols else (None, "")
    if why:
        return None, None, (SkipReason.BAD_TARGET, why)
    text = None
    if opts.text_col is not None:
        text, reason, why = text_value(table[opts.text_col][i])
        if reason is not None:
            return None, None, (reason, f"{why} in column {opts.text_col!r}")
    return target, text, None


def _byte_sizes(part: Any, image_col: str) -> list[int]:
    """Stored image bytes per row (0 where the image is a path), without copying the images."""
    import pyarrow.compute as pc

    try:
        col = part.with_format("arrow")[image_col]
        lengths = pc.binary_length(pc.struct_field(col, "bytes")).to_pylist()
    except (KeyError, ValueError, TypeError, AttributeError):
        return [0] * len(part)
    return [n or 0 for n in lengths]
