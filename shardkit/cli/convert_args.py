"""The arguments of ``shardkit convert``: SRC, DEST and one function per option group (images, shards, living
datasets, input, listings and labels, fields, detection and segmentation, execution, storage)."""

from __future__ import annotations

import argparse
import re

from shardkit.cli import add_storage_arguments


def quality_help() -> str:
    """``--help`` of ``--quality`` in ``convert`` and ``sample-data``: one range, :data:`~shardkit.convert.imageproc.QUALITY_RANGE`."""
    from shardkit.convert.imageproc import QUALITY_RANGE

    low, high = QUALITY_RANGE
    return f"JPEG quality, {low}-{high} (default 90); above 95 is refused: files grow about 2x for little visible gain"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"256MB"``, ``"1GiB"``, ``"500000"`` -> bytes (decimal units; ``i`` for binary)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use bytes or a number with KB/MB/GB/TB (KiB/MiB/... for binary)"
        )
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** "_kmgt".index((m.group(2) or "_").lower()))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SRC, DEST and the option groups of ``shardkit convert``, one function per group."""
    p.add_argument(
        "src",
        metavar="SRC",
        nargs="?",
        help="(left out with --append --remove/--relabel: corrections only) ImageFolder root (one folder per class), a root of split folders, "
        "a listing (.csv, .tsv, .jsonl; path or URL), WebDataset tars (x.tar, 'shards/{000..009}.tar', URLs) "
        "hf:PATH (a Hugging Face dataset saved on disk), coco:ANNOTATIONS.json (with --root IMAGES_DIR), "
        "voc:DIR (a VOC2012-style folder) or yolo:DIR (images/ + labels/ + a yaml of names)",
    )
    p.add_argument("dest", metavar="DEST", help="output folder or fsspec URL (s3://bucket/prefix, file://...)")
    _images_arguments(p)
    _shards_arguments(p)
    _living_arguments(p)
    _input_arguments(p)
    _listings_arguments(p)
    _fields_arguments(p)
    _detection_arguments(p)
    _execution_arguments(p)
    add_storage_arguments(p)


def _images_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--short-side``/``--max-side``, quality, resampling, colour, ``--copy``: how images are stored."""
    from shardkit.convert import Resample
    from shardkit.convert.colour import Colour

    g = p.add_argument_group("images")
    size = g.add_mutually_exclusive_group()
    size.add_argument(
        "--short-side",
        type=int,
        default=None,
        help="resize so the shorter side is this (never upscale; default 256; with --append: the split's)",
    )
    size.add_argument("--max-side", type=int, default=None, help="instead: resize so the longer side is this")
    g.add_argument("--quality", type=int, default=None, help=quality_help())
    g.add_argument(
        "--colour",
        "--color",
        dest="colour",
        choices=[v.value for v in Colour],
        default=None,
        help="srgb (default): convert images with an ICC profile (Display P3, Adobe RGB, ...) to sRGB; "
        "raw: keep the stored values and drop the profile",
    )
    g.add_argument(
        "--resample",
        choices=[v.value for v in Resample],
        default=None,
        help="antialiasing resize filter (default bilinear, as torchvision's Resize)",
    )
    g.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help="skip larger images as too_many_pixels (default 100M, the loader's limit too)",
    )
    g.add_argument(
        "--copy",
        action="store_true",
        default=None,
        help="keep upright sRGB RGB/grayscale JPEGs byte for byte once they decode (no resize or re-encode); "
        "others are converted",
    )


def _shards_arguments(p: argparse.ArgumentParser) -> None:
    """The options of shard sizes, order, seed and ``--prefixes``: how samples are laid out in shards."""
    from shardkit.convert import DEFAULT_SHARD_BYTES

    g = p.add_argument_group("shards")
    g.add_argument("--shard-size", type=int, default=None, help="at most this many samples per shard")
    g.add_argument(
        "--shard-bytes",
        type=parse_size,
        default=DEFAULT_SHARD_BYTES,
        help="at most this many bytes per shard, e.g. 256MiB (default), 1GB; 0 for no byte cap",
    )
    g.add_argument(
        "--prefixes",
        type=int,
        default=None,
        metavar="N",
        help="spread each split's shards over N hashed prefix directories (DEST/train/ac72/train-000000.tar), so an "
        "object store partitions the reads of a large cluster; default 1: flat names",
    )
    g.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    g.add_argument(
        "--shuffle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="shuffle samples across classes before sharding (default on)",
    )


def _living_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--append``, ``--remove``, ``--relabel``: a generation added to a split DEST holds."""
    g = p.add_argument_group("living datasets: append a generation, correct without rewriting")
    g.add_argument(
        "--append",
        action="store_true",
        help="add SRC's samples to DEST's splits as a new generation (earlier shards untouched; images already in "
        "a split skipped; the image options are the split's own); or, without SRC, record --remove/--relabel",
    )
    g.add_argument(
        "--remove",
        metavar="FILE",
        default=None,
        help="with --append and no SRC: remove these samples (one key or original relative path per line)",
    )
    g.add_argument(
        "--relabel",
        metavar="FILE",
        default=None,
        help="with --append and no SRC: change these labels ('key,class' rows; a new class is added at the end)",
    )


def _input_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the layout and splits of SRC, ``--val-fraction``, ``--strict``."""
    from shardkit.convert import Layout

    g = p.add_argument_group("input")
    g.add_argument(
        "--layout",
        choices=[v.value for v in Layout],
        default=Layout.AUTO.value,
        help="auto (default), imagefolder (SRC/<class>/...) or splits (SRC/<split>/<class>/...)",
    )
    g.add_argument("--split", default="train", help="split name for an imagefolder SRC (default train)")
    g.add_argument(
        "--val-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="carve a split 'val' from a source without splits: round(F*n) of each class's n inputs (seeded)",
    )
    g.add_argument(
        "--strict", action="store_true", help="fail on the first file that should have converted and did not"
    )


def _listings_arguments(p: argparse.ArgumentParser) -> None:
    """The options of columns of a listing, ``--label-regex``, Hugging Face columns and tar members holding the label."""
    from shardkit.convert import LabelType

    g = p.add_argument_group("listings, labels in file names, Hugging Face datasets")
    g.add_argument("--path-col", default="path", help="listing column with the image path (default path)")
    g.add_argument("--label-col", default="label", help="listing / Hugging Face column with the label (default label)")
    g.add_argument("--split-col", default=None, help="listing column with each row's split (default: one split)")
    g.add_argument(
        "--root",
        default=None,
        help="folder or URL the listing's relative paths start from (default: the listing's folder)",
    )
    g.add_argument(
        "--label-type",
        choices=[t.value for t in LabelType],
        default=LabelType.AUTO.value,
        help="listing labels are class names or integer indices (default auto: detect, and say which)",
    )
    g.add_argument(
        "--label-regex",
        default=None,
        metavar="REGEX",
        help="folder SRC: the first capture group searched in each file's relative path is its class, e.g. '^(cat|dog)\\.'",
    )
    g.add_argument("--image-col", default="image", help="Hugging Face column with the image (default image)")
    g.add_argument(
        "--image-key", default="jpg;jpeg;png;webp", help="WebDataset tar SRC: image member extensions, in order"
    )
    g.add_argument(
        "--label-key", default="cls", help="WebDataset tar SRC: member extension with the label (default cls)"
    )
    g.add_argument(
        "--label-json-field",
        default=None,
        metavar="FIELD",
        help="WebDataset tar SRC: read the label from this .json field",
    )


def _fields_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the fields beside the label (multi-label sets, float targets, text) and ``--no-label``."""
    g = p.add_argument_group("fields beside the label: multi-label, targets, text")
    g.add_argument(
        "--label-sep",
        default=None,
        metavar="SEP",
        help="listing: the label column holds several classes separated by SEP, e.g. 'cat;dog' with --label-sep ';' (multi-label)",
    )
    g.add_argument(
        "--multi-label",
        action="store_true",
        help="labels are sets of classes: JSONL lists, or tar labels that are JSON lists such as [0, 2] (implied by --label-sep)",
    )
    g.add_argument(
        "--target-col",
        default=None,
        metavar="COLS",
        help="listing / Hugging Face columns with float targets, comma-separated in order, e.g. 'x,y'",
    )
    g.add_argument(
        "--text-col", default=None, metavar="COL", help="listing / Hugging Face column with each sample's text"
    )
    g.add_argument(
        "--text-key", default=None, metavar="EXT", help="WebDataset tar SRC: member extension with the text, e.g. txt"
    )
    g.add_argument(
        "--no-label", action="store_true", help="the source has no class labels (e.g. image-text pairs): store none"
    )


def _detection_arguments(p: argparse.ArgumentParser) -> None:
    """The options of detection and segmentation sources: boxes, keypoints, masks."""
    g = p.add_argument_group("detection and segmentation: boxes, keypoints, masks")
    g.add_argument(
        "--mask-dir",
        default=None,
        metavar="MASKS_DIR",
        help="folder SRC: segmentation pairs; the mask of SRC/a/b.jpg is MASKS_DIR/a/b.png (pixel value = class)",
    )
    g.add_argument(
        "--mask-classes",
        default=None,
        metavar="FILE",
        help="with --mask-dir / --mask-col: class names, one per line (line i = class i; default: the mask values)",
    )
    g.add_argument(
        "--masks",
        action="store_true",
        help="coco:/voc: SRC: also store each image's semantic mask (COCO polygons/RLE, VOC SegmentationClass)",
    )
    g.add_argument(
        "--instances",
        action="store_true",
        help="coco: SRC: also store each image's instance map (one object per pixel, Mask R-CNN's masks)",
    )
    g.add_argument(
        "--objects-col",
        default=None,
        metavar="COL",
        help="Hugging Face column of objects: {'bbox': [[x, y, w, h], ...], 'category': [...]} (field boxes)",
    )
    g.add_argument("--mask-col", default=None, metavar="COL", help="Hugging Face Image column of masks (field mask)")


def _execution_arguments(p: argparse.ArgumentParser) -> None:
    """The options of workers, tasks, ``--overwrite``, ``--quiet``."""
    g = p.add_argument_group("execution")
    g.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    g.add_argument(
        "--num-tasks", type=int, default=1, help="split the work over K tasks/machines (then run 'shardkit merge')"
    )
    g.add_argument("--task-index", type=int, default=0, help="this task's index, 0..K-1 (e.g. $SLURM_ARRAY_TASK_ID)")
    g.add_argument("--overwrite", action="store_true", help="replace a different conversion found at DEST")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
