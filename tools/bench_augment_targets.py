"""Benchmark: GpuAugment's geometric ops with targets vs the same ops without.

The chain: horizontal flip, random affine (rotation 10 deg, translate 0.1, scale 0.8-1.2, shear 5), random
resized crop to ``--size`` (one fused geometric run, one resampling pass), then ImageNet normalisation, output
bfloat16 channels_last. Inputs are uint8 ``[B, 3, S, S]`` on the device (``S = --size * 8 // 7``); the targets
are ``--boxes`` boxes per sample with ``--keypoints`` keypoints each and a uint8 mask ``[B, S, S]``. The two
contenders run interleaved (A B A B ...), medians of ``--repeats`` runs of ``--iters`` batches, synchronised on
CUDA; the figure is the ratio with / without targets.

    python tools/bench_augment_targets.py                      # CPU: batch 128 at 224
    python tools/bench_augment_targets.py --no-mask            # boxes and keypoints only
    python tools/bench_augment_targets.py --device cuda --batch 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    GpuAugment,
    HorizontalFlip,
    Normalize,
    RandomAffine,
    RandomResizedCrop,
)
from shardkit.targets.geometry import Targets


def ops(size: int) -> list:
    return [
        HorizontalFlip(),
        RandomAffine(10, (0.1, 0.1), (0.8, 1.2), 5),
        RandomResizedCrop(size),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]


def make_targets(b: int, m: int, k: int, s: int, device: torch.device, g: torch.Generator) -> Targets:
    xy = torch.rand(b, m, 2, generator=g) * (s * 0.7)
    wh = 8 + torch.rand(b, m, 2, generator=g) * (s * 0.3)
    boxes = torch.cat([xy, xy + wh], -1)
    kp = torch.cat(
        [xy[:, :, None] + torch.rand(b, m, k, 2, generator=g) * wh[:, :, None], torch.full((b, m, k, 1), 2.0)], -1
    )
    labels = torch.randint(1, 80, (b, m), generator=g)
    mask = torch.randint(0, 21, (b, s, s), generator=g, dtype=torch.uint8)
    t = Targets(boxes, labels, torch.full((b,), m), torch.zeros(b, m, dtype=torch.bool), kp, mask)
    return t.to(device)


def timed(fn: Callable[[], object], iters: int, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--boxes", type=int, default=8)
    ap.add_argument("--keypoints", type=int, default=17)
    ap.add_argument("--no-mask", action="store_true", help="boxes and keypoints only")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    device = torch.device(args.device)
    s = args.size * 8 // 7
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, s, s), dtype=torch.uint8, generator=g).to(device)
    targets = make_targets(args.batch, args.boxes, args.keypoints, s, device, g)
    if args.no_mask:
        targets = replace(targets, mask=None)
    kw = dict(output_dtype=torch.bfloat16, memory_format="channels_last", seed=0)
    plain = GpuAugment(ops(args.size), **kw)
    with_t = GpuAugment(ops(args.size), flip_pairs=[(1, 2), (3, 4)], **kw)
    runs = {"without": lambda: plain(images), "with": lambda: with_t(images, targets=targets)}
    for fn in runs.values():  # warm-up: generators, cached constants
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn, args.iters, device))
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "device": str(device),
        "batch": args.batch,
        "size": args.size,
        "boxes": args.boxes,
        "keypoints": args.keypoints,
        "mask": not args.no_mask,
        "ms_per_batch_without": round(med["without"] * 1e3, 2),
        "ms_per_batch_with": round(med["with"] * 1e3, 2),
        "ratio_with_over_without": round(med["with"] / med["without"], 3),
        "img_per_s_without": round(args.batch / med["without"]),
        "img_per_s_with": round(args.batch / med["with"]),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
