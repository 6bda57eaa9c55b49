"""``shardkit demo``: the whole workflow on sample data shardkit makes itself.

1. Make a small photo-like ImageFolder (:mod:`shardkit.demo.sampledata`, no download).
2. ``convert`` it to shards.
3. Stream the train split through the train preset, augment on the device
   (GPU if present), train a small CNN for a few epochs, evaluate on the val split.
4. Time one pass over the same images with the plain ``ImageFolder`` +
   ``DataLoader`` pipeline next to shardkit's loader.

Library code: returns a :class:`DemoResult`; the CLI prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

from shardkit.demo.spec import DemoConfig, DemoResult, EpochLog

if TYPE_CHECKING:
    from shardkit.loader.loader import ShardLoader


def small_cnn(num_classes: int) -> nn.Module:
    """A compact CNN that learns the demo classes in a few epochs on a CPU."""

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )

    return nn.Sequential(
        block(3, 24), block(24, 48), block(48, 96), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(96, num_classes)
    )


def _imagefolder_pass(root: str, opts: DemoConfig) -> float:
    """Images/s of the seed pipeline (ImageFolder + per-image torchvision transforms) over ``root``."""
    from torchvision import datasets, transforms

    tf = transforms.Compose(
        [
            transforms.RandomRotation(30),
            transforms.RandomResizedCrop(opts.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    ds = datasets.ImageFolder(root, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=opts.batch_size, shuffle=True, num_workers=opts.num_workers)
    t0, n = time.perf_counter(), 0
    for x, _ in dl:
        n += len(x)
    return n / (time.perf_counter() - t0)


def _evaluate(model: nn.Module, loader, augment: nn.Module, device: torch.device) -> float:
    from shardkit.loader.prefetch import DevicePrefetcher

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in DevicePrefetcher(loader, device, transform=augment):
            correct += int((model(images).argmax(1) == labels).sum())
            total += len(labels)
    model.train()
    return correct / max(1, total)


def _make_shards(opts: DemoConfig, src: str, dest: str, log: Callable[[str], None]) -> float:
    """Make the sample ImageFolder in ``src`` unless it is there, and convert it into ``dest``: the seconds the
    conversion took."""
    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.imageproc import EncodeConfig
    from shardkit.demo.sampledata import SMALL, make_imagefolder

    if not os.path.isdir(os.path.join(src, "train")):
        log(f"making a sample ImageFolder in {src} ({opts.num_classes} classes, photo-like JPEGs)")
        make_imagefolder(
            src,
            num_classes=opts.num_classes,
            spread=SMALL,
            seed=opts.seed,
            splits={"train": opts.train_per_class, "val": opts.val_per_class},
        )
    t0 = time.perf_counter()
    short = opts.image_size * 8 // 7
    convert(
        src,
        dest,
        ConvertConfig(image=EncodeConfig(short_side=short), shard_size=128),
        workers=opts.num_workers,
        overwrite=True,
        quiet=True,
    )
    seconds = time.perf_counter() - t0
    log(f"converted to {dest} in {seconds:.1f} s")
    return seconds


def _loaders(dest: str, opts: DemoConfig) -> tuple[ShardLoader, ShardLoader]:
    """The train loader (train preset, shuffled, ``opts.num_workers`` workers) and the val loader (eval preset,
    in order, in process) of the shards in ``dest``."""
    from shardkit import load

    train = load(
        os.path.join(dest, "train"),
        batch_size=opts.batch_size,
        size=opts.image_size,
        num_workers=opts.num_workers,
        seed=opts.seed,
    )
    val = load(
        os.path.join(dest, "val"),
        batch_size=opts.batch_size,
        size=opts.image_size,
        num_workers=0,
        preset="eval",
        shuffle=False,
    )
    return train, val


def _train_epoch(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    train: ShardLoader,
    augment: nn.Module,
    device: torch.device,
) -> tuple[float, int, int]:
    """One epoch of SGD steps over ``train``, augmented on ``device``: the summed loss, the correct predictions and
    the samples seen."""
    from shardkit.loader.prefetch import DevicePrefetcher

    seen = 0
    loss_sum = torch.zeros((), device=device)  # accumulated on the device: no host sync per step
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for images, labels in DevicePrefetcher(train, device, transform=augment):
        out = model(images.float())
        loss = F.cross_entropy(out, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_sum += loss.detach() * len(labels)
        correct += (out.argmax(1) == labels).sum()
        seen += len(labels)
    return float(loss_sum), int(correct), seen


def _images_per_s(loader: ShardLoader) -> float:
    """Images/s of one pass over ``loader`` alone (no model)."""
    t0, n = time.perf_counter(), 0
    for images, _ in loader:
        n += len(images)
    return n / (time.perf_counter() - t0)


def run_demo(opts: DemoConfig | None = None, log: Callable[[str], None] = lambda s: None) -> DemoResult:
    """Run the demo (``opts``: :class:`DemoConfig`, default sizes when ``None``); ``log`` receives one line per step of progress."""
    opts = opts or DemoConfig()
    from shardkit.augment import IMAGENET_MEAN, IMAGENET_STD, ColorJitter, GpuAugment, Normalize, RandomGrayscale

    device = torch.device(opts.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    result = DemoResult(device=str(device))
    src, dest = os.path.join(opts.workdir, "images"), os.path.join(opts.workdir, "shards")
    result.convert_seconds = _make_shards(opts, src, dest, log)

    torch.manual_seed(opts.seed)
    train, val = _loaders(dest, opts)
    # crop + flip happen while decoding in the workers; colour and normalisation on the device, per sample
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    train_aug = GpuAugment([ColorJitter(0.3, 0.3, 0.3, 0.05), RandomGrayscale(0.1), norm], seed=opts.seed)
    eval_aug = GpuAugment([norm])
    model = small_cnn(opts.num_classes).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=opts.epochs * len(train))
    for epoch in range(opts.epochs):
        train.set_epoch(epoch)
        t0 = time.perf_counter()
        total_loss, n_correct, seen = _train_epoch(model, opt, sched, train, train_aug, device)
        ips = seen / (time.perf_counter() - t0)
        val_acc = _evaluate(model, val, eval_aug, device)
        result.epochs.append(EpochLog(epoch, total_loss / max(1, seen), n_correct / max(1, seen), val_acc, ips))
        log(
            f"epoch {epoch}: loss {total_loss / max(1, seen):.3f}  train acc {n_correct / max(1, seen):.3f}  val acc {val_acc:.3f}  {ips:.0f} img/s (training)"
        )

    # input pipelines alone, same images, same workers
    result.shardkit_images_per_s = _images_per_s(train)
    result.imagefolder_images_per_s = _imagefolder_pass(os.path.join(src, "train"), opts)
    log(
        f"input pipeline alone: shardkit {result.shardkit_images_per_s:.0f} img/s vs "
        f"ImageFolder+DataLoader {result.imagefolder_images_per_s:.0f} img/s "
        f"({result.shardkit_images_per_s / max(1e-9, result.imagefolder_images_per_s):.1f}x)"
    )
    return result
