"""``shardkit convert SRC DEST``: ImageFolder -> WebDataset shards (maps arguments to :func:`shardkit.convert.convert`)."""

from __future__ import annotations

import argparse
import re
import sys

from shardkit.cli import add_storage_arguments, option_error, storage_options
from shardkit.errors import ConvertError
from shardkit.format.prefixes import DEFAULT_PREFIXES

HELP = (
    "convert an ImageFolder, a folder of splits, a folder labelled by --label-regex, a CSV/TSV/JSONL listing, "
    "WebDataset tars, a Hugging Face dataset (hf:PATH), image/mask folder pairs (--mask-dir) or a detection "
    "source (coco:ANNOTATIONS.json, voc:DIR, yolo:DIR) into verified, resumable WebDataset shards "
    "(class labels, multi-label sets, float targets, text, boxes, keypoints, masks)"
)


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
    from shardkit.convert import DEFAULT_SHARD_BYTES, LabelType, Layout, Resample
    from shardkit.convert.colour import Colour

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
    g = p.add_argument_group("execution")
    g.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    g.add_argument(
        "--num-tasks", type=int, default=1, help="split the work over K tasks/machines (then run 'shardkit merge')"
    )
    g.add_argument("--task-index", type=int, default=0, help="this task's index, 0..K-1 (e.g. $SLURM_ARRAY_TASK_ID)")
    g.add_argument("--overwrite", action="store_true", help="replace a different conversion found at DEST")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    add_storage_arguments(p)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _image_options(args: argparse.Namespace) -> dict:
    """The image options and ``--prefixes``: those given, the rest the defaults (with ``--append``: the split's)."""
    from shardkit.convert import ConvertConfig

    given = {
        k: getattr(args, k)
        for k in ("short_side", "max_side", "quality", "max_pixels", "resample", "copy", "colour", "prefixes")
    }
    default = {**ConvertConfig().recorded(), "copy": False, "prefixes": DEFAULT_PREFIXES}
    if args.append:
        from shardkit.convert.append import dataset_options

        default.update(dataset_options(args.dest, storage_options(args)))
    out = {k: default.get(k) if v is None else v for k, v in given.items()}
    if given["max_side"] is not None and given["short_side"] is None:
        out["short_side"] = None
    if given["short_side"] is not None and given["max_side"] is None:
        out["max_side"] = None
    return out


def _correct(args: argparse.Namespace) -> int:
    from shardkit.convert.corrections import correct

    if not args.append:
        raise ConvertError("--remove and --relabel record a generation: give them with --append (and no SRC)")
    if args.src is not None:
        raise ConvertError(
            "--remove/--relabel record a generation of their own: run `shardkit convert --append DEST --remove FILE` "
            "without SRC, and append SRC in another run"
        )
    out = correct(
        args.dest, remove=args.remove, relabel=args.relabel, split=args.split, storage_options=storage_options(args)
    )
    for note in out.notes:
        print(note)
    if not out.recorded:
        print(f"generation {out.generation} of {out.manifest.base_url} already records these corrections")
        return 0
    added = f"; classes added: {', '.join(out.added_classes)}" if out.added_classes else ""
    print(
        f"generation {out.generation}: removed {out.removed}, relabeled {out.relabeled}{added}; no shard rewritten "
        f"-> {out.manifest.url}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig, convert

    if args.remove is not None or args.relabel is not None:
        return _correct(args)
    if args.src is None:
        raise ConvertError("give SRC and DEST (or, with --append, DEST and --remove/--relabel FILE)")
    try:
        io = _image_options(args)
        image = EncodeConfig(
            short_side=io["short_side"],
            max_side=io["max_side"],
            quality=io["quality"],
            max_pixels=io["max_pixels"],
            resample=io["resample"],
            copy=bool(io["copy"]),
            colour=io["colour"],
        )
        source = ScanConfig(
            path_col=args.path_col,
            label_col=args.label_col,
            split_col=args.split_col,
            root=args.root,
            label_type=args.label_type,
            label_regex=args.label_regex,
            image_col=args.image_col,
            image_key=args.image_key,
            label_key=args.label_key,
            label_json_field=args.label_json_field,
            label_sep=args.label_sep,
            multi_label=args.multi_label,
            target_cols=args.target_col or (),
            text_col=args.text_col,
            text_key=args.text_key,
            labelled=not args.no_label,
            mask_dir=args.mask_dir,
            masks=args.masks,
            instances=args.instances,
            objects_col=args.objects_col,
            mask_col=args.mask_col,
            mask_classes=args.mask_classes,
        )
        options = ConvertConfig(
            image=image,
            seed=args.seed,
            shuffle=args.shuffle,
            shard_size=args.shard_size,
            shard_bytes=args.shard_bytes or None,
            layout=args.layout,
            split=args.split,
            source=source,
            val_fraction=args.val_fraction,
            strict=args.strict,
            prefixes=io["prefixes"],
            append=args.append,
        )
        if args.workers is not None and args.workers < 1:
            raise ValueError("--workers must be at least 1")
        if args.num_tasks < 1:
            raise ValueError(f"--num-tasks must be at least 1, not {args.num_tasks}")
        if not 0 <= args.task_index < args.num_tasks:
            raise ValueError(
                f"--task-index must be in 0..{args.num_tasks - 1} for --num-tasks {args.num_tasks}, not {args.task_index}"
            )
    except ValueError as exc:
        raise ConvertError(option_error(exc, args)) from None
    result = convert(
        args.src,
        args.dest,
        options,
        workers=args.workers,
        num_tasks=args.num_tasks,
        task_index=args.task_index,
        overwrite=args.overwrite,
        quiet=args.quiet,
        storage_options=storage_options(args),
    )
    resumed = sum(s.shards_resumed for s in result.splits)
    for note in result.notes:
        print(note)
    reasons = ", ".join(f"{n} {r}" for r, n in result.skipped_reasons.items())
    fields = sorted({", ".join(s.manifest.fields) for s in result.splits if s.manifest is not None})
    if fields and fields != ["image, label"]:
        print(f"fields: {'; '.join(fields)}")
    print(
        f"converted {result.converted} images, skipped {result.skipped} files"
        + (f" ({reasons})" if reasons else "")
        + (f", kept {resumed} finished shards" if resumed else "")
        + f"; {_mb(result.bytes_in)} in -> {_mb(result.bytes_out)} out; "
        f"{result.seconds:.1f} s in all, {result.images_per_second:.1f} img/s overall (start-up included)"
    )
    dup, bad = result.skipped_reasons.get("duplicate_file", 0), result.skipped_reasons.get("bad_name", 0)
    if dup:
        print(
            f"warning: {dup} paths lead through symlinks to a file already converted; each real file is one "
            "sample, the other paths are listed as duplicate_file in the manifest",
            file=sys.stderr,
        )
    if bad:
        print(
            f"warning: {bad} files have names that are not valid UTF-8 and were not converted (bad_name in the manifest); "
            "rename them to convert them",
            file=sys.stderr,
        )
    for s in result.splits:
        if not s.written:
            print(f"  {s.split}: no samples ({s.empty}), not written")
        elif s.manifest is not None:
            m = s.manifest
            print(f"  {s.split}: {m.num_samples} samples in {len(m.shards)} shards, {_mb(m.num_bytes)} -> {m.url}")
            if m.annotations:
                print(f"  {s.split}: annotations: " + ", ".join(f"{n} {r}" for r, n in m.annotations.items()))
    if not result.complete:
        print(
            f"task {args.task_index} of {args.num_tasks} done; when all tasks are done run: shardkit merge {args.dest}",
            file=sys.stdout,
        )
    return 0
