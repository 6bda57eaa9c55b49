"""``shardkit convert SRC DEST``: ImageFolder -> WebDataset shards (maps arguments to :func:`shardkit.convert.convert`;
the arguments are :mod:`shardkit.cli.convert_args`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardkit.cli import option_error, storage_options
from shardkit.cli.convert_args import add_arguments
from shardkit.errors import ConvertError
from shardkit.format.prefixes import DEFAULT_PREFIXES

if TYPE_CHECKING:
    from shardkit.convert import ConvertConfig, ConvertResult

HELP = (
    "convert an ImageFolder, a folder of splits, a folder labelled by --label-regex, a CSV/TSV/JSONL listing, "
    "WebDataset tars, a Hugging Face dataset (hf:PATH), image/mask folder pairs (--mask-dir) or a detection "
    "source (coco:ANNOTATIONS.json, voc:DIR, yolo:DIR) into verified, resumable WebDataset shards "
    "(class labels, multi-label sets, float targets, text, boxes, keypoints, masks)"
)


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
    from shardkit.convert import convert

    if args.remove is not None or args.relabel is not None:
        return _correct(args)
    if args.src is None:
        raise ConvertError("give SRC and DEST (or, with --append, DEST and --remove/--relabel FILE)")
    options = _config(args)
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
    _report(result, args)
    return 0


def _config(args: argparse.Namespace) -> "ConvertConfig":
    """The :class:`~shardkit.convert.ConvertConfig` the arguments ask for; a bad value is a one-line :class:`ConvertError`."""
    from shardkit.convert import ConvertConfig, EncodeConfig, ScanConfig

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
    return options


def _report(result: "ConvertResult", args: argparse.Namespace) -> None:
    """Print what a conversion did: notes, fields, counts and speed, warnings (on stderr) and each split."""
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


__all__ = ["HELP", "add_arguments", "run"]
