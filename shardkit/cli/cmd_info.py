"""``shardkit info URL``: splits, classes, counts, shards and sizes from the manifests (maps to :func:`shardkit.ops.verify.info`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = "show splits, classes, per-class counts, shards, samples and bytes of a converted dataset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments

    p.add_argument("url", metavar="URL", help="a split folder or dataset root (local or fsspec URL)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--classes",
        type=int,
        default=20,
        metavar="N",
        help="list at most N classes per split in text output (default 20)",
    )
    add_storage_arguments(p)


def run(args: argparse.Namespace) -> int:
    import sys

    from shardkit.cli import storage_options
    from shardkit.errors import ManifestError
    from shardkit.format.index import INDEX_FORMAT
    from shardkit.ops.verify import find_splits, split_info
    from shardkit.ops.verify_generations import generations_info, is_selection

    so = storage_options(args)
    try:
        found = find_splits(args.url, **so)
    except ManifestError:
        if is_selection(args.url, **so):
            return _selection(args, so)
        raise
    splits = [split_info(m) for m in found.manifests]
    gens = [generations_info(m, **so) for m in found.manifests]
    for inc in found.incomplete:
        print(f"warning: {inc.url}: {inc.detail}", file=sys.stderr)
    if not splits:
        if found.unreadable:
            raise ManifestError(found.unreadable[0].detail)
        raise ManifestError(f"{args.url}: no finished split (see the warning above)")
    for inc in found.unreadable:
        print(f"warning: {inc.detail}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                [{**_targets_info(s.to_dict(), m), **g.to_dict()} for s, m, g in zip(splits, found.manifests, gens)],
                indent=1,
                ensure_ascii=False,
            )
        )
        return 0
    for s, m, g in zip(splits, found.manifests, gens):
        index = {"": "", INDEX_FORMAT: ", sample index with checksums"}.get(
            s.sample_index, ", sample index without checksums (`shardkit index` adds them)"
        )
        print(
            f"split {s.split}: {s.samples} samples, {len(s.classes)} classes, {s.shards} shards{index}, "
            f"{s.bytes / 1e6:.1f} MB, mean {s.mean_sample_bytes / 1e3:.1f} kB per sample  ({s.url})"
        )
        targets = f" (targets: {', '.join(s.targets)})" if s.targets else ""
        print(f"  fields: {', '.join(s.fields)}{targets}")
        if m.keypoint_names:
            print(f"  keypoints: {', '.join(m.keypoint_names)} (flip pairs {m.flip_pairs})")
        if m.annotations:
            print("  annotations: " + ", ".join(f"{n} {r}" for r, n in m.annotations.items()))
        corrected = any(r.removed or r.relabeled for r in g.generations)
        if len(g.generations) > 1:
            _print_generations(g)
        if corrected:
            print(f"  after corrections: {g.samples} samples (class counts below are after corrections)")
        counts: list[int | None] = list(g.class_counts) or [None] * len(s.classes)
        for i, (c, n) in enumerate(zip(s.classes, counts)):
            if i == args.classes:
                print(f"  ... {len(s.classes) - i} more classes (--classes N to list more, --json for all)")
                break
            print(f"  {i:5d} {c}: {n}")
        if s.skipped:
            print("  skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(s.skipped.items())))
    return 0


def _print_generations(g: Any) -> None:
    print(f"  generations: {len(g.generations)}")
    for r in g.generations:
        parts = [f"{r.shards} shards, {r.samples} samples"]
        if r.classes_added:
            parts.append(
                f"classes added: {', '.join(r.classes_added[:5])}" + (" ..." if len(r.classes_added) > 5 else "")
            )
        if r.duplicates:
            parts.append(f"{r.duplicates} duplicates skipped")
        if r.removed or r.relabeled:
            parts.append(f"removed {r.removed}, relabeled {r.relabeled}")
        print(f"    {r.number}: " + "; ".join(parts) + (f"  ({r.created})" if r.created else ""))


def _selection(args: argparse.Namespace, so: dict) -> int:
    from shardkit.ops.verify_generations import selection_info

    s = selection_info(args.url, **so)
    if args.json:
        print(json.dumps(s.to_dict(), indent=1, ensure_ascii=False))
        return 0
    print(
        f"selection {s.url}: {s.samples} of {s.stored} samples of generation {s.generation} of {s.parent}, "
        f"reading {len(s.shards_read)} of its {len(s.manifest.shards)} shards"
    )
    return 0


def _targets_info(d: dict, m: Any) -> dict:
    """A split's ``--json`` entry with its keypoints and annotation counts (detection datasets)."""
    extra = {k: getattr(m, k) for k in ("keypoint_names", "flip_pairs", "annotations") if getattr(m, k)}
    return {**d, **extra}
