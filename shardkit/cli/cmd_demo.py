"""`shardkit demo`: make sample data, convert, stream, train a small CNN, compare pipelines."""

from __future__ import annotations

import argparse
import os

HELP = "run the whole workflow on sample data shardkit makes itself (no download)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.demo.spec import DemoConfig  # not ..demo: that imports torch (1 s) for every command

    d = DemoConfig()
    p.add_argument("--workdir", default=d.workdir, help="where sample images and shards go (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--per-class", type=int, default=d.train_per_class, help="training images per class")
    p.add_argument("--classes", type=int, default=d.num_classes, help="number of classes (1-8)")
    p.add_argument("--image-size", type=int, default=d.image_size)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--workers", type=int, default=d.num_workers)
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda if available)")
    p.add_argument("--seed", type=int, default=d.seed)


def run(args: argparse.Namespace) -> int:
    from shardkit.demo.run import DemoConfig, run_demo

    opts = DemoConfig(
        workdir=args.workdir,
        num_classes=args.classes,
        train_per_class=args.per_class,
        val_per_class=max(8, args.per_class // 4),
        image_size=args.image_size,
        batch_size=args.batch_size,
        epochs=args.epochs,
        num_workers=args.workers,
        seed=args.seed,
        device=args.device,
    )
    result = run_demo(opts, log=lambda line: print(line, flush=True))
    first, last = result.epochs[0], result.epochs[-1]
    print(
        f"done on {result.device}: val accuracy {first.val_acc:.2f} -> {last.val_acc:.2f} over {len(result.epochs)} epochs; "
        f"input pipeline {result.shardkit_images_per_s / max(1e-9, result.imagefolder_images_per_s):.1f}x ImageFolder+DataLoader"
    )
    for line in next_steps(args.workdir):
        print(line)
    return 0


def next_steps(workdir: str) -> list[str]:
    """The lines the demo ends with: where its files are and what to run next."""
    images, shards = os.path.join(workdir, "images"), os.path.join(workdir, "shards")
    return [
        f"wrote: sample images in {images} (train/, val/), shards in {shards} (train/, val/)",
        f"next: shardkit info {shards}",
        f"next: torchrun --nproc-per-node 2 examples/train_ddp.py --data {os.path.join(shards, 'train')} "
        "--checkpoint ckpt.pt  (from the clone: train on these shards, resumable)",
        "next: your own data: shardkit sample-data --help, shardkit convert, shardkit bench (the README's Quick start)",
    ]
