"""A small torchvision detector (Faster R-CNN, MobileNetV3 FPN) trained on shardkit's detection batches.

shardkit's workers do the detection input pipeline: decode, random scale jitter, crop or pad to a fixed size,
horizontal flip, with every box moved, clipped and dropped by the same rule as the pixels
(``preset="detect"``); ``shardkit.targets.to_torchvision`` turns each dict batch into the ``(images, targets)``
torchvision's detection models take. Without ``--data`` it trains on demo scenes (solid rectangles, one colour
per class: ``shardkit.demo.scenes``), so that it runs on a CPU in about a minute::

    python examples/train_detection.py --steps 20                      # demo scenes made in --workdir
    python examples/train_detection.py --data /data/coco-shards/train --size 512 --batch-size 16 --workers 8 \\
        --steps 10000                                                  # your shards (shardkit convert coco:...)

It prints the losses every ``--log-every`` steps and a last line ``done: N steps, ...``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import torch

import shardkit
from shardkit.targets import to_torchvision

FIELDS = ("image", "boxes", "box_labels", "box_count")


def demo_shards(workdir: str, n: int, size: int) -> str:
    """Demo scenes (shardkit.demo.scenes) under ``workdir``, written once: their URL."""
    from shardkit.demo.scenes import write_scenes

    root = os.path.join(workdir, f"scenes-{n}-{size}")
    if not os.path.exists(os.path.join(root, "manifest.json")):
        write_scenes(root, n, size=(size, size * 3 // 4), shard_size=32, max_objects=4)
    return root


def build_loader(
    url: str, *, size: int, batch_size: int, workers: int, seed: int = 0, preset: str = "detect", **options: Any
) -> Any:
    """The detection loader: boxes, their labels and counts at ``size`` (``preset="detect"``: scale jitter, crop or
    pad, flip, aspect kept); ``options`` go to ``shardkit.load`` (e.g. ``min_visible``)."""
    return shardkit.load(
        url,
        fields=FIELDS,
        preset=preset,
        size=size,
        batch_size=batch_size,
        num_workers=workers,
        seed=seed,
        drop_last=True,
        **options,
    )


def build_model(num_classes: int, size: int) -> torch.nn.Module:
    """Faster R-CNN with a MobileNetV3-Large FPN backbone, from scratch, resizing nothing (inputs are ``size``).

    Sized for a CPU: 300/150 region proposals and 64 sampled RoIs per image in training (torchvision's defaults
    for this model: 2000/2000 and 512; the RoI head's first layer is most of a step's time).
    """
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    return fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None,
        weights_backbone=None,
        num_classes=num_classes,
        min_size=size,
        max_size=size,
        rpn_pre_nms_top_n_train=300,
        rpn_post_nms_top_n_train=150,
        rpn_batch_size_per_image=64,
        box_batch_size_per_image=64,
    )


def main(argv: "list[str] | None" = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a shardkit split with boxes (URL); default: demo scenes made in --workdir")
    p.add_argument("--workdir", default="detection-demo", help="where the demo scenes go")
    p.add_argument("--demo-images", type=int, default=128, help="how many demo scenes (without --data)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--size", type=int, default=128, help="the detect preset's output size (COCO: 512-1024)")
    p.add_argument("--preset", default="detect", help="the loader's preset (detect; letterbox for evaluation)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    torch.manual_seed(args.seed)
    url = args.data or demo_shards(args.workdir, args.demo_images, args.size)

    # 1. the input pipeline, in shardkit's workers: scale jitter, crop/pad to size x size, flip; boxes follow
    try:
        loader = build_loader(
            url, size=args.size, batch_size=args.batch_size, workers=args.workers, seed=args.seed, preset=args.preset
        )
    except (shardkit.ShardkitError, ValueError) as exc:  # a wrong URL or option: one line, no traceback
        raise SystemExit(f"train_detection.py: {exc}") from None
    if len(loader) == 0:
        raise SystemExit(f"{url}: fewer samples than one batch of {args.batch_size}; lower --batch-size")

    # 2. the model: classes are the dataset's ("background" first: torchvision's convention, box labels >= 1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(len(loader.classes), args.size).to(device).train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = max(1, min(10, args.steps // 2))

    step, seen, boxes_seen, epoch = 0, 0, 0, 0
    first = last = math.nan
    t0 = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            # 3. the dict batch as torchvision takes it: float images in [0, 1], per-sample boxes and labels
            images, targets = to_torchvision(batch)
            images = [im.to(device, non_blocking=True) for im in images]
            targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
            for group in opt.param_groups:  # linear warm-up (detectors diverge without one)
                group["lr"] = args.lr * min(1.0, (step + 1) / warmup)
            losses = model(images, targets)
            loss = sum(losses.values())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            step += 1
            seen += len(images)
            boxes_seen += int(batch["box_count"].sum())
            last = float(loss.detach())
            if step == 1:
                first = last
            if step % args.log_every == 0 or step == args.steps:
                parts = ", ".join(f"{k} {float(v.detach()):.3f}" for k, v in losses.items())
                rate = seen / (time.perf_counter() - t0)
                print(
                    f"step {step}/{args.steps} (epoch {epoch}): loss {last:.4f} ({parts}), {rate:.1f} img/s", flush=True
                )
            if step >= args.steps:
                break
        epoch += 1
    print(f"done: {step} steps, {seen} images, {boxes_seen} boxes, loss {first:.4f} -> {last:.4f}", flush=True)
    print(
        f"data: {url}"
        + ("" if args.data else f" (sample data made in {args.workdir}); next: --data URL trains on yours")
    )


if __name__ == "__main__":
    main()
