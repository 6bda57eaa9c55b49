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
from shardkit.convert.scan.hf_labels import Row as _Row
from shardkit.convert.scan.hf_labels import class_space, hf_classes, label_kind, row_label
from shardkit.convert.scan.listing import RESERVED_FIELDS
from shardkit.convert.scan.source import (
    MissingFile,
    Reader,
    ScannedSource,
    SourceFile,
    SplitSource,
    extra_problem,
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


def scan_hf(src: Any, opts: ScanConfig, split: str = "train") -> ScannedSource:
    """The :class:`ScannedSource` of a dataset object or of the dataset saved at path ``src``."""
    import datasets

    what = f"hf:{src}" if isinstance(src, str) else type(src).__name__
    ds = _load(src) if isinstance(src, str) else src
    if not isinstance(ds, (datasets.Dataset, datasets.DatasetDict)):
        raise ConvertError(f"{what}: not a datasets.Dataset or DatasetDict")
    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    splits: list[SplitSource] = []
    kinds: dict[str, tuple[str, Any]] = {}
    raw: list[_Row] = []
    for name, part in sorted(parts.items()):
        kinds[name], rows = _read_part(datasets, what, name, part, opts)
        raw += rows
        splits.append(SplitSource(name=name, directory=what, files=[]))
    by_name = {s.name: s for s in splits}
    classes = class_space(what, kinds, opts)
    width = max(8, len(str(max((r[1] for r in raw), default=0))))
    ident = [f"row-{r[1]:0{width}d}" for r in raw]
    usable: list[int] = []
    values: list[Any] = []
    for k, r in enumerate(raw):
        value, bad = row_label(kinds, r)
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
    classes, indices, note = hf_classes(what, kinds, raw, usable, values, classes, opts)
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
        _refuse_empty(what, splits, opts)
    for s in splits:
        s.close(classes)
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


def _read_part(datasets: Any, what: str, name: str, part: Any, opts: ScanConfig) -> tuple[tuple[str, Any], list[_Row]]:
    """One split's label kind and feature (:func:`label_kind`) and its rows; refuses a missing column."""
    field_cols = [*opts.target_cols, *([opts.text_col] if opts.text_col else [])]
    cols = list(part.column_names)
    wanted = [("--image-col", opts.image_col)] + ([("--label-col", opts.label_col)] if opts.labelled else [])
    for flag, col in wanted + [("--target-col", c) for c in opts.target_cols] + [("--text-col", opts.text_col)]:
        if col is not None and col not in cols:
            raise ConvertError(f"{what}: no column {col!r} ({flag}); its columns are: {', '.join(cols)}")
    _check_field_columns(datasets, what, name, part.features, opts)
    feat = part.features[opts.label_col] if opts.labelled else None
    kind = (label_kind(datasets, what, name, opts.label_col, feat), feat) if opts.labelled else ("none", None)
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
    if kind[0] == "list":
        full = next((i for i, v in enumerate(labels) if v), None)
        if full is not None:
            raise ConvertError(
                f"{what}: label column {opts.label_col!r} of split {name!r} is {feat!r}: not a class label "
                f"(row {full} holds {str(labels[full])[:40]}; for multi-label cast it to Sequence(ClassLabel); an empty list is no_label)"
            )
    return kind, [
        (name, i, label, {c: table[c][i] for c in extra_cols}, sizes[i], row_fields[i])
        for i, label in enumerate(labels)
    ]


def _refuse_empty(what: str, splits: list[SplitSource], opts: ScanConfig) -> None:
    """Refuse a dataset none of whose splits has a usable row, counting each split's skips by reason."""

    def why(s: SplitSource) -> str:
        reasons = Counter(r.value for _, r, _ in s.skipped)
        return f"{s.name} ({len(s.skipped)} skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) + ")"

    raise ConvertError(
        f"{what}: no split has a sample to convert (no labelled image): {'; '.join(why(s) for s in splits)}; "
        f"check --label-col {opts.label_col!r} and --image-col {opts.image_col!r}"
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
