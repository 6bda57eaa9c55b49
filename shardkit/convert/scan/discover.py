"""What kind of SRC a conversion was given, and its scan: a listing file, ``hf:PATH`` or a ``datasets.Dataset``,
WebDataset tars, a detection source (``coco:``, ``voc:``, ``yolo:``), a mask folder, class folders with
``--label-regex``, or class folders (:mod:`.folders`); then ``--val-fraction`` is applied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shardkit.convert.options import Layout, ScanConfig
from shardkit.convert.scan.folders import NOT_CANDIDATES, scan, scan_regex
from shardkit.convert.scan.source import ScannedSource, SourceFile
from shardkit.errors import ConvertError

if TYPE_CHECKING:
    from shardkit.convert.options import ConvertConfig

_HF_TARGETS = {"objects_col", "mask_col", "mask_classes"}
#: the :class:`ScanConfig` fields each kind of SRC uses (others must keep their defaults)
_APPLIES = {
    "folder": {"label_regex", "mask_dir", "labelled", "mask_classes"},
    "listing": {
        "path_col",
        "label_col",
        "split_col",
        "root",
        "label_type",
        "label_sep",
        "multi_label",
        "target_cols",
        "text_col",
        "labelled",
    },
    "tars": {"image_key", "label_key", "label_json_field", "label_type", "multi_label", "text_key", "labelled"},
    "hf": {"image_col", "label_col", "label_type", "target_cols", "text_col", "labelled"} | _HF_TARGETS,
    "coco": {"root", "masks", "instances"},
    "voc": {"masks"},
    "yolo": set(),
}
#: SRC prefixes of the detection sources (``coco:ANNOTATIONS.json``, ``voc:DIR``, ``yolo:DIR``)
DETECTION_KINDS = ("coco", "voc", "yolo")
#: options whose command-line flag is not ``--`` + the option name with dashes
_FLAGS = {"target_cols": "--target-col", "labelled": "--no-label"}
_KIND_NAMES = {
    "folder": "folder",
    "listing": "listing file",
    "tars": "set of WebDataset tars",
    "hf": "Hugging Face dataset",
    "coco": "COCO annotation file",
    "voc": "Pascal VOC folder",
    "yolo": "YOLO folder",
}


def discover(src: Any, options: "ConvertConfig", **storage_options: Any) -> ScannedSource:
    """The :class:`ScannedSource` for SRC of any kind: a listing file, ``hf:PATH`` or a ``datasets.Dataset``,
    WebDataset tars, a folder with ``label_regex``, or class folders; then ``val_fraction`` is applied.
    """
    from shardkit.convert.scan.listing import is_listing, scan_listing
    from shardkit.convert.scan.tars import is_tar_source, scan_tars

    so = options.source
    prefix = src.split(":", 1)[0] if isinstance(src, str) and ":" in src else ""
    kind = (
        "hf"
        if not isinstance(src, str) or src.startswith("hf:")
        else prefix
        if prefix in DETECTION_KINDS
        else ("listing" if is_listing(src) else "tars" if is_tar_source(src) else "folder")
    )
    unused = sorted(set(so.recorded()) - _APPLIES[kind])
    if unused or (options.layout != Layout.AUTO and kind != "folder"):
        option = unused[0] if unused else "layout"
        flag = _FLAGS.get(option, "--" + option.replace("_", "-"))
        raise ConvertError(f"{flag} does not apply to this SRC (a {_KIND_NAMES[kind]}); leave it out")
    if kind in DETECTION_KINDS:
        source = scan_detection(kind, src[len(kind) + 1 :], so, options.split, **storage_options)
    elif kind == "hf" and (so.objects_col is not None or so.mask_col is not None):
        from shardkit.convert.scan.hf_targets import scan_hf_targets

        source = scan_hf_targets(src[3:] if isinstance(src, str) else src, so, options.split)
    elif kind == "hf":
        from shardkit.convert.scan.hf import scan_hf

        source = scan_hf(src[3:] if isinstance(src, str) else src, so, options.split)
    elif kind == "listing":
        source = scan_listing(src, so, options.split, **storage_options)
    elif kind == "tars":
        source = scan_tars(src, so, options.split, **storage_options)
    elif so.mask_dir is not None:
        from shardkit.convert.scan.maskdir import scan_mask_pairs

        source = scan_mask_pairs(src, so, options.layout, options.split)
    elif not so.labelled and so.label_regex is not None:
        raise ConvertError("--no-label and --label-regex contradict each other (the regex gives labels); pick one")
    elif so.label_regex is not None:
        if options.layout != Layout.AUTO:
            raise ConvertError("--layout does not apply with --label-regex (the regex gives the classes); leave it out")
        source = scan_regex(src, so.label_regex, options.split)
    else:
        source = scan(src, options.layout, options.split)
    if options.val_fraction:
        from shardkit.convert.scan.source import carve_val

        try:
            carve_val(source, options.val_fraction, options.seed)
        except ValueError as exc:
            raise ConvertError(f"{source.root}: {exc}") from None
    if kind == "folder" and so.mask_dir is None and not so.labelled:
        _drop_labels(source)
    return source


def scan_detection(kind: str, path: str, options: ScanConfig, split: str, **storage_options: Any) -> ScannedSource:
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


def _drop_labels(source: ScannedSource) -> None:
    """``--no-label`` on class folders: the images of every class folder, stored without a label (only ``image``;
    the folders still group the images, and ``--val-fraction`` still draws from each)."""
    for s in source.splits:
        s.files = [replace(f, label=None) for f in s.files]
        s.class_names = []
    source.classes = []
    source.fields = ("image",)
    source.notes.append("--no-label: the class folders are not stored as labels (field image only)")


__all__ = ["NOT_CANDIDATES", "ScannedSource", "SourceFile", "discover", "scan", "scan_detection", "scan_regex"]
