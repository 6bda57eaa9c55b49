"""A timm recipe fed by shardkit: ``timm.create_model`` with timm's optimizer and scheduler factories.

timm decides what the model wants (input size, mean/std, eval crop fraction: ``resolve_data_config``);
shardkit streams the shards with the train preset (random resized crop + flip while decoding)
and the eval preset (resize to ``size / crop_pct``, center crop), and the rest of the
augmentation runs on the device for the whole batch (colour jitter, MixUp, normalisation),
batches prefetched to the device::

    shardkit convert path/to/imagefolder ds                  # train/ and val/ splits
    python examples/train_timm.py --data ds/train --val ds/val --model resnet50 --pretrained --epochs 10
    python examples/train_timm.py --demo-data --model resnet18 --epochs 1 --image-size 64   # sample data, CPU, < 1 min

It prints per-epoch loss, validation top-1 and images/s.
"""

from __future__ import annotations

import argparse
import math
import time

import timm
import timm.data
import timm.loss
import timm.optim
import timm.scheduler
import timm.utils
import torch

import shardkit
from shardkit.augment import ColorJitter, GpuAugment, MixUp, Normalize
from shardkit.loader.prefetch import DevicePrefetcher


def demo_shards(image_size: int) -> tuple[str, str]:
    """A small 4-class sample ImageFolder that shardkit makes, converted; returns (train URL, val URL)."""
    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.imageproc import EncodeConfig
    from shardkit.demo.sampledata import SMALL, make_imagefolder

    src = make_imagefolder("timm-sample", num_classes=4, spread=SMALL, splits={"train": 40, "val": 10})
    convert(src, "timm-sample-shards", ConvertConfig(image=EncodeConfig(short_side=max(image_size * 8 // 7, 64))))
    return "timm-sample-shards/train", "timm-sample-shards/val"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="train split URL written by 'shardkit convert'")
    p.add_argument("--val", help="validation split URL")
    p.add_argument("--demo-data", action="store_true", help="make, convert and use a small sample dataset")
    p.add_argument("--model", default="resnet18", help="any timm.create_model name")
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=0, help="default: the model's input size")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--opt", default="adamw", help="timm optimizer name")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--sched", default="cosine", help="timm scheduler name")
    p.add_argument("--warmup-epochs", type=int, default=0)
    p.add_argument("--mixup", type=float, default=0.0, help="MixUp alpha on the device (0: off)")
    p.add_argument("--smoothing", type=float, default=0.1, help="label smoothing")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    if args.demo_data:
        args.data, args.val = demo_shards(args.image_size or 64)
    if not args.data:
        p.error("pass --data URL or --demo-data")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    num_classes = len(shardkit.load_manifest(args.data).classes)
    model = timm.create_model(args.model, pretrained=args.pretrained, num_classes=num_classes)
    cfg = timm.data.resolve_data_config({}, model=model)  # what the model was trained with
    size = args.image_size or cfg["input_size"][-1]
    model = model.to(device).to(memory_format=torch.channels_last)

    train = shardkit.load(args.data, batch_size=args.batch_size, size=size, num_workers=args.workers, seed=args.seed)
    val = (
        shardkit.load(
            args.val,
            batch_size=args.batch_size,
            size=size,
            resize_size=math.floor(size / cfg["crop_pct"]),
            preset="eval",
            shuffle=False,
            num_workers=args.workers,
        )
        if args.val
        else None
    )
    norm = Normalize(tuple(cfg["mean"]), tuple(cfg["std"]))
    mix = [MixUp(num_classes, alpha=args.mixup)] if args.mixup > 0 else []
    train_aug = GpuAugment([ColorJitter(0.4, 0.4, 0.4), norm, *mix], memory_format="channels_last", seed=args.seed)
    eval_aug = GpuAugment([norm], memory_format="channels_last")

    opt = timm.optim.create_optimizer_v2(model, opt=args.opt, lr=args.lr, weight_decay=args.weight_decay)
    sched, num_epochs = timm.scheduler.create_scheduler_v2(
        opt,
        sched=args.sched,
        num_epochs=args.epochs,
        warmup_epochs=args.warmup_epochs,
        step_on_epochs=False,
        updates_per_epoch=len(train),
    )
    # MixUp yields soft labels; otherwise class indices with label smoothing
    loss_fn = timm.loss.SoftTargetCrossEntropy() if mix else timm.loss.LabelSmoothingCrossEntropy(args.smoothing)

    for epoch in range(num_epochs):
        train.set_epoch(epoch)
        model.train()
        t0, seen, loss_sum, updates = time.perf_counter(), 0, 0.0, epoch * len(train)
        for images, labels in DevicePrefetcher(train, device, transform=train_aug):
            loss = loss_fn(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            updates += 1
            sched.step_update(num_updates=updates)
            seen += len(labels)
            loss_sum += loss.item() * len(labels)
        sched.step(epoch + 1)
        msg = f"epoch {epoch}: {seen} samples, loss {loss_sum / max(1, seen):.3f}, {seen / (time.perf_counter() - t0):.1f} img/s"
        if val is not None:
            model.eval()
            top1 = timm.utils.AverageMeter()
            with torch.no_grad():
                for images, labels in DevicePrefetcher(val, device, transform=eval_aug):
                    top1.update(timm.utils.accuracy(model(images), labels, topk=(1,))[0].item(), len(labels))
            msg += f", val top-1 {top1.avg:.1f} % ({top1.count} images)"
        print(msg, flush=True)
    train.close()
    if val is not None:
        val.close()


if __name__ == "__main__":
    main()
