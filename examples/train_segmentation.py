"""A small torchvision segmentation model (LR-ASPP, MobileNetV3) trained on shardkit's image + mask batches.

shardkit's workers crop, resize and flip every image and its mask with the same map (the ``train`` preset:
RandomResizedCrop + flip; the mask sampled nearest, 255 where no source pixel maps); the batch is
``image`` uint8 ``[B, 3, S, S]`` and ``mask`` uint8 ``[B, S, S]`` (a class per pixel), which a segmentation
model takes as it is, with ``cross_entropy(..., ignore_index=255)``. Without ``--data`` it trains on demo
scenes (solid rectangles, one colour per class: ``shardkit.demo.scenes``), on a CPU in about a minute::

    python examples/train_segmentation.py --steps 20                    # demo scenes made in --workdir
    python examples/train_segmentation.py --data /data/ade-shards/train --size 512 --batch-size 16 \\
        --workers 8 --steps 10000                                       # your shards (convert --mask-dir ...)

It prints the loss and the pixel accuracy every ``--log-every`` steps and a last line ``done: N steps, ...``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import torch
import torch.nn.functional as F

import shardkit
from shardkit.format.fields import IGNORE

FIELDS = ("image", "mask")
MEAN = (0.485, 0.456, 0.406)  # ImageNet's, as torchvision's segmentation references normalise
STD = (0.229, 0.224, 0.225)


def demo_shards(workdir: str, n: int, size: int) -> str:
    """Demo scenes (shardkit.demo.scenes) under ``workdir``, written once: their URL."""
    from shardkit.demo.scenes import write_scenes

    root = os.path.join(workdir, f"scenes-{n}-{size}")
    if not os.path.exists(os.path.join(root, "manifest.json")):
        write_scenes(root, n, size=(size, size * 3 // 4), shard_size=32, max_objects=4, keypoints=False)
    return root


def build_loader(url: str, *, size: int, batch_size: int, workers: int, seed: int = 0) -> Any:
    """The segmentation loader: image + mask with the ``train`` preset at ``size``."""
    return shardkit.load(
        url,
        fields=FIELDS,
        preset="train",
        size=size,
        batch_size=batch_size,
        num_workers=workers,
        seed=seed,
        drop_last=True,
    )


def build_model(num_classes: int) -> torch.nn.Module:
    """LR-ASPP with a MobileNetV3-Large backbone, from scratch."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    return lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=num_classes)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, 3, S, S]`` -> float, ImageNet mean/std."""
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def main(argv: "list[str] | None" = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a shardkit split with masks (URL); default: demo scenes made in --workdir")
    p.add_argument("--workdir", default="segmentation-demo", help="where the demo scenes go")
    p.add_argument("--demo-images", type=int, default=128, help="how many demo scenes (without --data)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--size", type=int, default=128, help="the train preset's output size (ADE20K/VOC: 512)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.batch_size < 2:
        p.error("--batch-size must be >= 2 (the model's batch norm needs two samples)")
    torch.manual_seed(args.seed)
    url = args.data or demo_shards(args.workdir, args.demo_images, args.size)

    # 1. the input pipeline, in shardkit's workers: the image and its mask cropped, resized and flipped together
    try:
        loader = build_loader(url, size=args.size, batch_size=args.batch_size, workers=args.workers, seed=args.seed)
    except (shardkit.ShardkitError, ValueError) as exc:  # a wrong URL or option: one line, no traceback
        raise SystemExit(f"train_segmentation.py: {exc}") from None
    if len(loader) == 0:
        raise SystemExit(f"{url}: fewer samples than one batch of {args.batch_size}; lower --batch-size")

    # 2. the model: one output channel per class of the dataset (class 0 "background" included)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(len(loader.classes)).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)

    step, seen, epoch = 0, 0, 0
    first = last = acc = math.nan
    t0 = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            # 3. the batch as it is: a class per pixel, 255 ignored by the loss
            x = normalise(batch["image"].to(device, non_blocking=True))
            target = batch["mask"].to(device, non_blocking=True).long()
            logits = model(x)["out"]
            loss = F.cross_entropy(logits, target, ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += len(x)
            last = float(loss.detach())
            if step == 1:
                first = last
            labelled = target != IGNORE
            acc = float((logits.argmax(1) == target)[labelled].float().mean()) if bool(labelled.any()) else math.nan
            if step % args.log_every == 0 or step == args.steps:
                rate = seen / (time.perf_counter() - t0)
                print(
                    f"step {step}/{args.steps} (epoch {epoch}): loss {last:.4f}, pixel accuracy {acc:.3f}, "
                    f"{rate:.1f} img/s",
                    flush=True,
                )
            if step >= args.steps:
                break
        epoch += 1
    print(f"done: {step} steps, {seen} images, loss {first:.4f} -> {last:.4f}, pixel accuracy {acc:.3f}", flush=True)
    print(
        f"data: {url}"
        + ("" if args.data else f" (sample data made in {args.workdir}); next: --data URL trains on yours")
    )


if __name__ == "__main__":
    main()
