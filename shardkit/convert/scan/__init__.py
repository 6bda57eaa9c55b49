"""Scanning a conversion's input: which files or rows are samples, their labels, and what is skipped and why.

Every kind of SRC is one :class:`Scanner` (see ``docs/design/scanners.md``): it says which SRC it claims, which
:class:`~shardkit.convert.options.ScanConfig` options it reads, and scans SRC into a
:class:`~shardkit.convert.scan.source.ScannedSource`. :func:`discover` is the one dispatch: the first scanner of
:data:`SCANNERS` that claims SRC, a refusal of an option it does not read, its scan, then what every source
shares: ``--val-fraction`` (:func:`~shardkit.convert.scan.valsplit.carve_val`) and the scanner's :meth:`Scanner.finish`.

* :mod:`.source` -- a scanned source's values, the label rule, a split's one ending
  (``SplitSource.close``) and readers shared by every kind.
* :mod:`.folders` -- class folders (an ImageFolder) and ``--label-regex``; :mod:`.maskdir` -- image/mask folder pairs.
* :mod:`.listing` -- CSV/JSONL listings; :mod:`.tars` -- existing tars; :mod:`.hf`, :mod:`.hf_targets` -- Hugging
  Face datasets; :mod:`.coco`, :mod:`.voc`, :mod:`.yolo` -- detection sources (shared rules: :mod:`.detection`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from shardkit.errors import ConvertError

if TYPE_CHECKING:
    from shardkit.convert.options import ConvertConfig, ScanConfig
    from shardkit.convert.scan.source import ScannedSource

#: SRC prefixes of the detection sources (``coco:ANNOTATIONS.json``, ``voc:DIR``, ``yolo:DIR``)
DETECTION_KINDS = ("coco", "voc", "yolo")
#: options whose command-line flag is not ``--`` + the option name with dashes
_FLAGS = {"target_cols": "--target-col", "labelled": "--no-label"}


class Scanner(Protocol):
    """One kind of SRC: which SRC it claims, the options it reads, its scan.

    Attributes:
        kind: the kind's short name (``"tars"``).
        title: what such a SRC is, for messages (``"set of WebDataset tars"``).
        options: the :class:`~shardkit.convert.options.ScanConfig` fields it reads (``"layout"``: it reads
            ``ConvertConfig.layout`` too); any other given is refused in one line.
    """

    kind: str
    title: str
    options: frozenset[str]

    def claims(self, src: Any) -> bool:
        """True if ``src`` is this kind of SRC (asked in :data:`SCANNERS` order; the first that claims it scans it)."""
        ...

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        """Every split of ``src`` with its kept items, its skips and their reasons, and the classes."""
        ...

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        """What this kind does to a scanned source after the shared split assignment (``--val-fraction``)."""
        ...


def _prefix(src: Any) -> str:
    return src.split(":", 1)[0] if isinstance(src, str) and ":" in src else ""


class _Hf:
    """``hf:PATH`` or a ``datasets.Dataset``/``DatasetDict`` (:mod:`.hf`; with objects or masks :mod:`.hf_targets`)."""

    kind, title = "hf", "Hugging Face dataset"
    _targets = frozenset({"objects_col", "mask_col", "mask_classes"})
    options = frozenset({"image_col", "label_col", "label_type", "target_cols", "text_col", "labelled"}) | _targets

    def claims(self, src: Any) -> bool:
        return not isinstance(src, str) or src.startswith("hf:")

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        so, what = options.source, src[3:] if isinstance(src, str) else src
        if so.objects_col is not None or so.mask_col is not None:
            from shardkit.convert.scan.hf_targets import scan_hf_targets

            return scan_hf_targets(what, so, options.split)
        from shardkit.convert.scan.hf import scan_hf

        return scan_hf(what, so, options.split)

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        pass


class _Detection:
    """``coco:ANNOTATIONS.json``, ``voc:DIR``, ``yolo:DIR`` (:func:`scan_detection`)."""

    def __init__(self, kind: str, title: str, options: frozenset[str]):
        self.kind, self.title, self.options = kind, title, options

    def claims(self, src: Any) -> bool:
        return _prefix(src) == self.kind

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        return scan_detection(self.kind, src[len(self.kind) + 1 :], options.source, options.split, **storage_options)

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        pass


class _Listing:
    """A CSV/TSV/JSONL listing (:mod:`.listing`)."""

    kind, title = "listing", "listing file"
    options = frozenset(
        {
            "path_col",
            "label_col",
            "split_col",
            "root",
            "label_type",
            "label_sep",
            "multi_label",
            "target_cols",
            "text_col",
        }
        | {"labelled"}
    )

    def claims(self, src: Any) -> bool:
        from shardkit.convert.scan.listing import is_listing

        return is_listing(src)

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        from shardkit.convert.scan.listing import scan_listing

        return scan_listing(src, options.source, options.split, **storage_options)

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        pass


class _Tars:
    """Existing WebDataset tars (:mod:`.tars`)."""

    kind, title = "tars", "set of WebDataset tars"
    options = frozenset(
        {"image_key", "label_key", "label_json_field", "label_type", "multi_label", "text_key", "labelled"}
    )

    def claims(self, src: Any) -> bool:
        from shardkit.convert.scan.tars import is_tar_source

        return is_tar_source(src)

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        from shardkit.convert.scan.tars import scan_tars

        return scan_tars(src, options.source, options.split, **storage_options)

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        pass


class _Folder:
    """A folder: image/mask pairs (``--mask-dir``, :mod:`.maskdir`), ``--label-regex`` or class folders (:mod:`.folders`)."""

    kind, title = "folder", "folder"
    options = frozenset({"label_regex", "mask_dir", "labelled", "mask_classes", "layout"})

    def claims(self, src: Any) -> bool:
        return True

    def scan(self, src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
        from shardkit.convert.options import Layout
        from shardkit.convert.scan.folders import scan, scan_regex

        so = options.source
        if so.mask_dir is not None:
            from shardkit.convert.scan.maskdir import scan_mask_pairs

            return scan_mask_pairs(src, so, options.layout, options.split)
        if not so.labelled and so.label_regex is not None:
            raise ConvertError("--no-label and --label-regex contradict each other (the regex gives labels); pick one")
        if so.label_regex is not None:
            if options.layout != Layout.AUTO:
                raise ConvertError(
                    "--layout does not apply with --label-regex (the regex gives the classes); leave it out"
                )
            return scan_regex(src, so.label_regex, options.split)
        return scan(src, options.layout, options.split)

    def finish(self, source: "ScannedSource", options: "ConvertConfig") -> None:
        if options.source.mask_dir is None and not options.source.labelled:
            _drop_labels(source)


#: every kind of SRC, in the order they are asked to claim it (the folder claims whatever is left)
SCANNERS: tuple[Scanner, ...] = (
    _Hf(),
    _Detection("coco", "COCO annotation file", frozenset({"root", "masks", "instances"})),
    _Detection("voc", "Pascal VOC folder", frozenset({"masks"})),
    _Detection("yolo", "YOLO folder", frozenset()),
    _Listing(),
    _Tars(),
    _Folder(),
)


def scanner_for(src: Any) -> Scanner:
    """The scanner of ``src``: the first of :data:`SCANNERS` that claims it."""
    return next(s for s in SCANNERS if s.claims(src))


def discover(src: Any, options: "ConvertConfig", **storage_options: Any) -> "ScannedSource":
    """The :class:`ScannedSource` for SRC of any kind: a listing file, ``hf:PATH`` or a ``datasets.Dataset``,
    WebDataset tars, a detection source, a mask folder, a folder with ``label_regex``, or class folders; then
    ``val_fraction`` is applied.

    Raises:
        ConvertError: an option the kind of SRC does not read (naming its flag), or the scan's refusal.
    """
    from shardkit.convert.options import Layout

    scanner = scanner_for(src)
    unused = sorted(set(options.source.recorded()) - scanner.options)
    if unused or (options.layout != Layout.AUTO and "layout" not in scanner.options):
        option = unused[0] if unused else "layout"
        flag = _FLAGS.get(option, "--" + option.replace("_", "-"))
        raise ConvertError(f"{flag} does not apply to this SRC (a {scanner.title}); leave it out")
    source = scanner.scan(src, options, **storage_options)
    if options.val_fraction:
        from shardkit.convert.scan.valsplit import carve_val

        try:
            carve_val(source, options.val_fraction, options.seed)
        except ValueError as exc:
            raise ConvertError(f"{source.root}: {exc}") from None
    scanner.finish(source, options)
    return source


def scan_detection(kind: str, path: str, options: "ScanConfig", split: str, **storage_options: Any) -> "ScannedSource":
    """The :class:`ScannedSource` of a detection SRC (``kind`` in coco, voc, yolo; ``path`` after the prefix).

    Raises:
        ConvertError: an unknown kind, a missing source, or a malformed annotation file (one line
            naming the file and the key).
    """
    if not path:
        raise ConvertError(
            f"{kind}:: no path after '{kind}:' (e.g. {kind}:{'instances.json' if kind == 'coco' else 'DIR'})"
        )
    if kind == "coco":
        from shardkit.convert.scan.coco import scan_coco

        return scan_coco(path, options, split, **storage_options)
    if kind == "voc":
        from shardkit.convert.scan.voc import scan_voc

        return scan_voc(path, options, split)
    if kind == "yolo":
        from shardkit.convert.scan.yolo import scan_yolo

        return scan_yolo(path, options, split)
    raise ConvertError(f"{kind}:{path}: unknown detection source kind {kind!r} (coco, voc or yolo)")


def _drop_labels(source: "ScannedSource") -> None:
    """``--no-label`` on class folders: the images of every class folder, stored without a label (only ``image``;
    the folders still group the images, and ``--val-fraction`` still draws from each)."""
    for s in source.splits:
        s.files = [replace(f, label=None) for f in s.files]
        s.class_names = []
    source.classes = []
    source.fields = ("image",)
    source.notes.append("--no-label: the class folders are not stored as labels (field image only)")


__all__ = ["DETECTION_KINDS", "SCANNERS", "Scanner", "discover", "scan_detection", "scanner_for"]
