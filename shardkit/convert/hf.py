"""A Hugging Face dataset as SRC: ``hf:PATH`` (a ``save_to_disk`` folder, a ``.parquet`` or ``.arrow`` file,
or a local dataset repository: a folder of data files such as ``data/train-00000-of-00002.parquet``, read with
``datasets.load_dataset``, which caches it in the usual Hugging Face cache) or a ``datasets.Dataset`` /
``DatasetDict`` given to :func:`shardkit.convert.convert`.

Needs the optional ``datasets`` package (``pip install 'shardkit[hf]'``). A
``DatasetDict`` gives one split per entry (``DEST/<split>/``); a single
dataset is one split. Rows are items in row order: the identity of row ``i``
is ``row-<i>`` (zero-padded), its image the ``image_col`` column (an
``Image`` feature: stored bytes, or the file its path names), its label the
``label_col`` column. Class names come from a ``ClassLabel`` feature
(its order is the class index, ``-1`` is ``no_label``); other labels are
read as names or indices like a listing's. Other scalar columns are kept
in each sample's ``.json`` (a row whose columns are too large for it is ``bad_metadata``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..errors import ConvertError
from .imageproc import SkipReason
from .listing import RESERVED_FIELDS
from .options import SourceOptions
from .source import MissingFile, Reader, Source, SourceFile, SplitSource, extra_problem, read_labels

_REF = "hf:"
#: files that mark a ``save_to_disk`` folder (a Dataset, a DatasetDict)
_SAVED_MARKERS = ("state.json", "dataset_dict.json")
#: ``Value`` dtypes kept in the sample's ``.json`` (others, e.g. timestamps, are not JSON values)
_JSON_DTYPES = ("string", "large_string", "bool", "int", "uint", "float")


def _load(path: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise ConvertError(f"hf:{path}: the Hugging Face source needs the datasets package: pip install 'shardkit[hf]'") from None
    if not os.path.exists(path):
        raise ConvertError(f"hf:{path}: does not exist (expected a save_to_disk folder, a folder of data files, or a .parquet or .arrow file)")
    try:
        if path.endswith(".parquet"):
            return datasets.Dataset.from_parquet(path)
        if path.endswith(".arrow"):
            return datasets.Dataset.from_file(path)
        if os.path.isdir(path) and not any(os.path.isfile(os.path.join(path, m)) for m in _SAVED_MARKERS):
            return datasets.load_dataset(path)  # a local dataset repository: data files (parquet, ...) with splits in their names
        return datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as exc:
        raise ConvertError(f"hf:{path}: not a dataset saved by datasets ({exc})") from None


def _parts(ds: Any, split: str, image_col: str) -> dict[str, Any]:
    """``{split: dataset with image_col undecoded}``."""
    import datasets

    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    return {name: p.cast_column(image_col, datasets.Image(decode=False)) if image_col in p.column_names else p for name, p in parts.items()}


@functools.lru_cache(maxsize=4)
def _opened(path: str, split: str, image_col: str) -> dict[str, Any]:
    """The dataset at ``path`` opened once per process (worker processes get the path, not the data)."""
    return _parts(_load(path), split, image_col)


class HFReader(Reader):
    """Reads a row's image bytes (``ref`` = ``hf:<split>:<row>``); pickles as the path when there is one."""

    def __init__(self, path: str | None, splits: dict[str, Any] | None, split: str, image_col: str):
        super().__init__("")
        self.path, self.splits, self.split, self.image_col = path, splits, split, image_col

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "splits": None} if self.path is not None else dict(self.__dict__)

    def read(self, relpath: str, ref: str) -> bytes:
        if not ref.startswith(_REF):
            return super().read(relpath, ref)
        split, row = ref[len(_REF):].rsplit(":", 1)
        if self.splits is None:
            self.splits = _opened(self.path, self.split, self.image_col)  # type: ignore[arg-type]
        value = self.splits[split][int(row)][self.image_col]
        if value and value.get("bytes") is not None:
            return bytes(value["bytes"])
        if not value or not value.get("path"):
            raise MissingFile(f"split {split} row {row}: no image")
        return super().read(relpath, value["path"])


def scan_hf(src: Any, opts: SourceOptions, split: str = "train") -> Source:
    """The :class:`Source` of a dataset object or of the dataset saved at path ``src``."""
    import datasets

    what = f"hf:{src}" if isinstance(src, str) else type(src).__name__
    ds = _load(src) if isinstance(src, str) else src
    if not isinstance(ds, (datasets.Dataset, datasets.DatasetDict)):
        raise ConvertError(f"{what}: not a datasets.Dataset or DatasetDict")
    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {split: ds}
    splits: list[SplitSource] = []
    classes: list[str] | None = None
    raw: list[tuple[str, int, Any, dict[str, Any], int]] = []  # split, row, label, extra, image bytes
    for name, part in sorted(parts.items()):
        cols = list(part.column_names)
        for flag, col in (("--image-col", opts.image_col), ("--label-col", opts.label_col)):
            if col not in cols:
                raise ConvertError(f"{what}: no column {col!r} ({flag}); its columns are: {', '.join(cols)}")
        feat = part.features[opts.label_col]
        if isinstance(feat, datasets.ClassLabel):
            classes = classes or list(feat.names)
            if list(feat.names) != classes:
                raise ConvertError(f"{what}: split {name!r} has other ClassLabel names than the others")
        part = part.cast_column(opts.image_col, datasets.Image(decode=False))
        sizes = _byte_sizes(part, opts.image_col)
        extra_cols = [c for c, f in part.features.items() if c not in (opts.image_col, opts.label_col)
                      and isinstance(f, datasets.Value) and f.dtype.startswith(_JSON_DTYPES) and c not in RESERVED_FIELDS]
        table = part.select_columns([opts.label_col, *extra_cols]).to_dict()
        labels = table.pop(opts.label_col)
        for i, label in enumerate(labels):
            raw.append((name, i, label, {c: table[c][i] for c in extra_cols}, sizes[i]))
        splits.append(SplitSource(name=name, directory=what, files=[]))
    by_name = {s.name: s for s in splits}
    width = max(8, len(str(max((r[1] for r in raw), default=0))))
    ident = [f"row-{r[1]:0{width}d}" for r in raw]
    usable = [k for k, r in enumerate(raw) if r[2] is not None and r[2] != "" and not (classes is not None and r[2] == -1)]
    usable_set = set(usable)
    for k, r in enumerate(raw):
        if k not in usable_set:
            by_name[r[0]].skipped.append((ident[k], SkipReason.NO_LABEL, f"split {r[0]} row {r[1]}: no label"))
    if classes is not None:
        indices: list[int | None] = [raw[k][2] if 0 <= raw[k][2] < len(classes) else None for k in usable]
        note = f"{len(classes)} classes from the ClassLabel feature {opts.label_col!r}"
    else:
        classes, indices, kind = read_labels(what, [(f"split {raw[k][0]} row {raw[k][1]}", raw[k][2]) for k in usable], opts.label_type)
        note = f"labels read as {'class names' if kind.value == 'name' else 'class indices'} (--label-type {kind.value}): {len(classes)} classes"
    for k, index in zip(usable, indices):
        name, row, label, extra, size = raw[k]
        problem = extra_problem(extra)
        if index is None:
            by_name[name].skipped.append((ident[k], SkipReason.BAD_LABEL, f"{label!r} is not a class index"))
        elif problem:
            by_name[name].skipped.append((ident[k], SkipReason.BAD_METADATA, f"split {name} row {row}: {problem}"))
        else:
            by_name[name].files.append(SourceFile(ident[k], index, size, f"{_REF}{name}:{row}", extra or None))
    for s in splits:
        s.files.sort(key=lambda f: f.relpath)
        s.skipped.sort()
        s.class_names = sorted({classes[f.label] for f in s.files})
    return Source(
        root=what, classes=classes, splits=splits, nested=isinstance(ds, datasets.DatasetDict),
        reader=HFReader(src if isinstance(src, str) else None, None if isinstance(src, str) else _parts(ds, split, opts.image_col),
                        split, opts.image_col),
        notes=[note],
    )


def _byte_sizes(part: Any, image_col: str) -> list[int]:
    """Stored image bytes per row (0 where the image is a path), without copying the images."""
    import pyarrow.compute as pc

    try:
        col = part.with_format("arrow")[image_col]
        lengths = pc.binary_length(pc.struct_field(col, "bytes")).to_pylist()
    except (KeyError, ValueError, TypeError, AttributeError):
        return [0] * len(part)
    return [n or 0 for n in lengths]
