"""Conversion options (what decides the output bytes) and results."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from shardkit.convert.imageproc import EncodeConfig
from shardkit.format.manifest import Manifest, SkippedFile
from shardkit.format.prefixes import DEFAULT_PREFIXES, check_prefixes

#: default ``shard_bytes``: a comfortable object-storage object size
DEFAULT_SHARD_BYTES = 256 * 1024 * 1024
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def valid_split_name(name: str) -> bool:
    """True for a usable split name (letters, digits, ``_``, ``-``, ``.``; not starting with ``-`` or ``.``)."""
    return bool(_SPLIT_NAME.match(name))


class Layout(str, enum.Enum):
    """How SRC is organised (see module docstring)."""

    AUTO = "auto"
    IMAGEFOLDER = "imagefolder"
    SPLITS = "splits"


class LabelType(str, enum.Enum):
    """How a listing's labels are read: class ``name``, class ``index``, or ``auto`` (detect; mixed is an error)."""

    AUTO = "auto"
    NAME = "name"
    INDEX = "index"


@dataclass(frozen=True)
class ScanConfig:
    """How to read a SRC that is not plain class folders (defaults fit the usual column names).

    Attributes:
        path_col: listing column holding the image path (relative to ``root``, absolute, or a URL).
        label_col: listing column (or Hugging Face column) holding the label.
        split_col: listing column holding each row's split (``None``: one split).
        root: folder the listing's relative paths start from (``None``: the listing's folder).
        label_type: how listing labels are read (:class:`LabelType`).
        label_regex: for a folder SRC: the first capture group of this regex, searched in the
            file's path relative to SRC, is its class name (instead of class folders).
        image_col: Hugging Face column holding the image.
        image_key: WebDataset tar source: image member extensions, tried in order (``;``-separated).
        label_key: WebDataset tar source: member extension holding the label (e.g. ``cls``).
        label_json_field: WebDataset tar source: read the label from this field of the
            ``.json`` member instead of ``label_key``.
        label_sep: listing: the label column holds several classes separated by this
            (``"cat;dog"``): a multi-label source (field ``labels``).
        multi_label: the label is a set of classes (field ``labels``): a listing's JSONL lists
            (or cells split at ``label_sep``), a tar label that is a JSON list (``[0, 2]``).
            Implied by ``label_sep``; a Hugging Face ``Sequence(ClassLabel)`` column needs neither.
        target_cols: listing / Hugging Face columns holding the float targets (field ``target``),
            in this order (a ``"a,b"`` string is split at commas).
        text_col: listing / Hugging Face column holding each sample's text (field ``text``).
        text_key: WebDataset tar source: member extension holding the text (e.g. ``txt``).
        labelled: ``False``: the source has no class labels (e.g. image-text pairs): no
            ``label`` field is read or stored.
        mask_dir: folder SRC (segmentation pairs): the folder of PNG masks, one per image with the
            same relative path and stem (pixel value = class index): field ``mask``.
        masks: ``coco:``/``voc:`` SRC: also store each image's semantic mask (COCO polygons/RLE
            rasterised; VOC's ``SegmentationClass`` PNGs): field ``mask``.
        instances: ``coco:`` SRC: also store each image's instance map (one object per pixel, from each
            annotation's polygons/RLE, the smaller object on top where they overlap): field ``instances``.
        objects_col: Hugging Face column of per-image objects (``bbox`` + ``category`` lists): field ``boxes``.
        mask_col: Hugging Face column holding each image's mask image: field ``mask``.
        mask_classes: with ``mask_dir`` or ``mask_col``: a text file naming the mask's classes, one per
            line (line ``i`` is class ``i``); without it the classes are the mask values ``"0"`` .. ``"K-1"``.
    """

    path_col: str = "path"
    label_col: str = "label"
    split_col: str | None = None
    root: str | None = None
    label_type: LabelType = LabelType.AUTO
    label_regex: str | None = None
    image_col: str = "image"
    image_key: str = "jpg;jpeg;png;webp"
    label_key: str = "cls"
    label_json_field: str | None = None
    label_sep: str | None = None
    multi_label: bool = False
    target_cols: tuple[str, ...] = ()
    text_col: str | None = None
    text_key: str | None = None
    labelled: bool = True
    mask_dir: str | None = None
    masks: bool = False
    instances: bool = False
    objects_col: str | None = None
    mask_col: str | None = None
    mask_classes: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "label_type", LabelType(self.label_type))
        except ValueError:
            raise ValueError(
                f"label_type must be one of {', '.join(t.value for t in LabelType)}, not {self.label_type!r}"
            ) from None
        cols = self.target_cols
        if isinstance(cols, str):
            cols = tuple(c.strip() for c in cols.split(","))
        object.__setattr__(self, "target_cols", tuple(cols))
        if any(not isinstance(c, str) or not c for c in self.target_cols):
            raise ValueError(f"target_cols (--target-col) must name columns, e.g. 'a,b', not {self.target_cols!r}")
        if len(set(self.target_cols)) != len(self.target_cols):
            raise ValueError(f"target_cols (--target-col) names a column twice: {', '.join(self.target_cols)}")
        if self.label_sep == "":
            raise ValueError("label_sep must not be empty (e.g. ';')")
        if not self.labelled and self.is_multi_label:
            raise ValueError(
                "labelled=False (--no-label) and a multi-label option (--label-sep, --multi-label) exclude each other"
            )
        if self.mask_classes is not None and self.mask_dir is None and self.mask_col is None:
            raise ValueError(
                "mask_classes (--mask-classes) names the classes of --mask-dir or --mask-col masks; give one"
            )
        taken = {self.label_col if self.labelled else None, self.text_col, *self.target_cols} - {None}
        if len(taken) != (1 if self.labelled else 0) + (self.text_col is not None) + len(self.target_cols):
            raise ValueError("the label, target and text columns must be different columns")

    @property
    def is_multi_label(self) -> bool:
        """The label is a set of classes (``multi_label``, or implied by ``label_sep``)."""
        return self.multi_label or self.label_sep is not None

    def recorded(self) -> dict[str, Any]:
        """The options that differ from the defaults (so that plain ImageFolder conversions record none)."""
        default = ScanConfig()
        return {
            k: (v.value if isinstance(v, enum.Enum) else list(v) if isinstance(v, tuple) else v)
            for k, v in vars(self).items()
            if v != getattr(default, k)
        }


@dataclass(frozen=True)
class ConvertConfig:
    """Options of one conversion; all of them except ``strict`` are recorded in the manifest.

    Attributes:
        image: resize target, JPEG quality, decompression-bomb limit.
        seed: seed of the sample shuffle.
        shuffle: shuffle samples before sharding (``False`` keeps sorted folder order).
        shard_size: at most this many samples per shard (``None``: no count cap).
        shard_bytes: at most this many bytes per shard (``None``: no byte cap); a
            single sample larger than the cap gets a shard of its own. With
            neither cap, each split is one shard.
        layout: how SRC is organised (:class:`Layout`).
        split: split name for the ``imagefolder`` layout (and any source without splits).
        source: how to read listings, regex-labelled folders, Hugging Face datasets.
        val_fraction: carve a validation split ``val`` from a source that has one split:
            exactly ``round(val_fraction * n)`` of each class's ``n`` items (0: off).
        strict: raise :class:`shardkit.ConvertError` on the first file that should have
            converted and did not (files that are not candidates, such as `notes.txt`, do not count).
        prefixes: spread each split's shards over this many prefix directories (``--prefixes``):
            shard ``j`` is written as ``<dir>/<split>-<j>.tar`` with ``<dir>`` the ``j % prefixes``-th
            of :func:`~shardkit.format.prefixes.prefix_dirs`, so that an object store partitions the
            reads; ``1`` (the default) writes flat names. Recorded in the manifest when not ``1``.
        append: add SRC's samples to DEST's splits as a new generation (``--append``,
            :mod:`shardkit.convert.append`): earlier shards are never rewritten, keys continue after the
            split's, class names merge by name, images already in the split are skipped
            (``already_in_split``); the image options must be the split's own. A split DEST lacks is converted
            as its generation 0. Not recorded (each generation's record says what it is).
    """

    image: EncodeConfig = field(default_factory=EncodeConfig)
    seed: int = 0
    shuffle: bool = True
    shard_size: int | None = None
    shard_bytes: int | None = DEFAULT_SHARD_BYTES
    layout: Layout = Layout.AUTO
    split: str = "train"
    source: ScanConfig = field(default_factory=ScanConfig)
    val_fraction: float = 0.0
    strict: bool = False
    prefixes: int = DEFAULT_PREFIXES
    append: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", Layout(self.layout))
        check_prefixes(self.prefixes)
        if self.shard_size is not None and self.shard_size < 1:
            raise ValueError(f"shard_size must be positive, not {self.shard_size}")
        if self.shard_bytes is not None and self.shard_bytes < 1:
            raise ValueError(f"shard_bytes must be positive, not {self.shard_bytes}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), not {self.val_fraction}")
        if not valid_split_name(self.split):
            raise ValueError(f"split name {self.split!r} must use letters, digits, '_', '-' and '.'")

    def recorded(self) -> dict[str, Any]:
        """The options that decide the output bytes, as stored in the manifest."""
        return {
            "short_side": self.image.short_side,
            "max_side": self.image.max_side,
            "quality": self.image.quality,
            "max_pixels": self.image.max_pixels,
            "resample": self.image.resample.value,
            **({"copy": True} if self.image.copy else {}),
            "colour": self.image.colour.value,  # ICC handling decides pixels: never mix two in one conversion
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shard_size": self.shard_size,
            "shard_bytes": self.shard_bytes,
            **({"source": self.source.recorded()} if self.source.recorded() else {}),
            **({"val_fraction": self.val_fraction} if self.val_fraction else {}),
            **({"prefixes": self.prefixes} if self.prefixes != 1 else {}),  # flat conversions keep their identity
        }


@dataclass
class SplitResult:
    """What one run did to one split.

    Attributes:
        split: split name.
        url: split directory (local path or URL).
        converted: samples encoded and written by this run.
        skipped: source files of this split that are not samples (whole split, known so far).
        skipped_reasons: ``skipped`` by reason code.
        shards_written: planned shards written by this run.
        shards_resumed: planned shards found complete (checksum verified) and kept.
        bytes_in: source bytes read by this run.
        bytes_out: shard bytes written by this run.
        manifest: the manifest, when this run wrote it (``None`` for one task of several).
        written: ``False`` for a split with no sample to convert (e.g. a Hugging Face split whose
            every label is -1): nothing is written for it, not even its folder.
        empty: why a split that is not ``written`` has no sample, e.g. ``"3 skipped: 3 no_label"``.
        skipped_files: the skipped files of a split that is not ``written`` (a written split's
            manifest lists its own).
    """

    split: str
    url: str
    converted: int = 0
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    shards_written: int = 0
    shards_resumed: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    manifest: Manifest | None = None
    written: bool = True
    empty: str = ""
    skipped_files: list[SkippedFile] = field(default_factory=list)

    def add_skipped(self, files: list[SkippedFile]) -> None:
        """Count ``files`` as skipped."""
        self.skipped += len(files)
        for f in files:
            self.skipped_reasons[f.reason] = self.skipped_reasons.get(f.reason, 0) + 1


@dataclass
class ConvertResult:
    """Outcome of :func:`shardkit.convert.convert`: one :class:`SplitResult` per split (sorted by name; a split with
    no sample is one too, ``written=False``), totals, and notes about the source."""

    splits: list[SplitResult]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def converted(self) -> int:
        """Samples encoded by this run."""
        return sum(s.converted for s in self.splits)

    @property
    def skipped(self) -> int:
        """Source files that are not samples."""
        return sum(s.skipped for s in self.splits)

    @property
    def skipped_reasons(self) -> dict[str, int]:
        """Skipped source files by reason code."""
        out: dict[str, int] = {}
        for s in self.splits:
            for r, n in s.skipped_reasons.items():
                out[r] = out.get(r, 0) + n
        return dict(sorted(out.items()))

    @property
    def bytes_in(self) -> int:
        """Source bytes read by this run."""
        return sum(s.bytes_in for s in self.splits)

    @property
    def bytes_out(self) -> int:
        """Shard bytes written by this run."""
        return sum(s.bytes_out for s in self.splits)

    @property
    def images_per_second(self) -> float:
        """Encoded images per wall-clock second."""
        return self.converted / self.seconds if self.seconds > 0 else 0.0

    @property
    def complete(self) -> bool:
        """True when every written split has its manifest (single task, or the merge is done)."""
        return all(s.manifest is not None for s in self.splits if s.written)
