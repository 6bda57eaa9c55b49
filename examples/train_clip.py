"""A toy CLIP step fed by shardkit: image + caption batches with ``load(fields=("image", "text"))``.

Image encoder: a tiny CNN; text encoder: a bag of UTF-8 bytes (``nn.EmbeddingBag``); the loss is the
symmetric InfoNCE of CLIP (cross-entropy over image->text and text->image similarities, learned
temperature). The data is made by shardkit itself when no ``--data`` is given: sample photos of 8
shapes, a caption for each ("a photo of a circle", "a close-up of a ring" ...), a CSV listing with a ``caption``
column, converted with ``--text-col caption --no-label`` (the Python API below)::

    python examples/train_clip.py --steps 40                      # sample data, CPU, < 1 min
    shardkit convert captions.csv ds --text-col caption --no-label
    python examples/train_clip.py --data ds/train --steps 1000 --batch-size 256 --image-size 224

Image batches are moved to the device (and normalised there) by ``DevicePrefetcher``; captions stay a list of
``str`` and are tokenised on the host. It prints the loss every ``--log-every`` steps and a final line
``done: N steps, loss L, X img/s``.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import shardkit
from shardkit.augment import GpuAugment, Normalize
from shardkit.loader.prefetch import DevicePrefetcher

TEMPLATES = ("a photo of a {}", "a {} on a noisy background", "a picture with one {} in it", "a close-up of a {}")


def caption(shape: str, index: int) -> str:
    """A caption for the ``index``-th sample photo of ``shape`` (deterministic, varied wording)."""
    return TEMPLATES[index % len(TEMPLATES)].format(shape)


def demo_shards(workdir: str, per_class: int, image_size: int) -> str:
    """Sample photos of 8 shapes, a CSV with a ``caption`` column, converted without labels; returns the URL."""
    from shardkit.convert import ConvertConfig, ScanConfig, convert
    from shardkit.convert.imageproc import EncodeConfig
    from shardkit.demo.sampledata import SMALL, class_names, make_imagefolder

    dest = os.path.join(workdir, "shards")
    if os.path.exists(os.path.join(dest, "train", "manifest.json")):
        return os.path.join(dest, "train")
    images = make_imagefolder(os.path.join(workdir, "images"), num_classes=8, per_class=per_class, spread=SMALL)
    listing = os.path.join(workdir, "captions.csv")
    with open(listing, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "caption"])
        for shape in class_names(8):
            for i, name in enumerate(sorted(os.listdir(os.path.join(images, shape)))):
                w.writerow([os.path.join("images", shape, name), caption(shape, i)])
    convert(
        listing,
        dest,
        ConvertConfig(
            image=EncodeConfig(short_side=max(image_size * 8 // 7, 48)),
            source=ScanConfig(text_col="caption", labelled=False),
        ),
        quiet=True,
    )
    return os.path.join(dest, "train")


class ImageEncoder(nn.Module):
    """Three strided convolutions, global average pooling, a projection."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 128, 3, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(128, dim),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


class TextEncoder(nn.Module):
    """A bag of UTF-8 bytes and byte pairs: the mean of their embeddings, then an MLP."""

    def __init__(self, dim: int, buckets: int = 4096) -> None:
        super().__init__()
        self.buckets = buckets
        self.embed = nn.EmbeddingBag(256 + buckets, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(inplace=True), nn.Linear(dim, dim))

    def tokenize(self, texts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        ids: list[int] = []
        offsets: list[int] = []
        for t in texts:
            b = t.encode("utf-8") or b" "
            offsets.append(len(ids))
            ids.extend(b)
            ids.extend(256 + (x * 257 + y) % self.buckets for x, y in zip(b, b[1:]))
        return torch.tensor(ids, device=device), torch.tensor(offsets, device=device)

    def forward(self, texts: list[str], device: torch.device) -> torch.Tensor:
        return self.mlp(self.embed(*self.tokenize(texts, device)))


def clip_loss(img: torch.Tensor, txt: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE: the i-th image's caption is the i-th text, every other one is a negative."""
    img, txt = F.normalize(img, dim=-1), F.normalize(txt, dim=-1)
    logits = logit_scale.exp().clamp(max=100) * img @ txt.t()
    target = torch.arange(len(img), device=img.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--data", help="URL of a split written by 'shardkit convert' with a text field (default: sample data)"
    )
    p.add_argument("--workdir", default="clip-sample", help="where the sample data is made (without --data)")
    p.add_argument("--per-class", type=int, default=24, help="sample photos per shape (without --data)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64, help="embedding width")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("steps", "image_size", "dim", "per_class", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.batch_size < 2:
        p.error(f"--batch-size must be at least 2 (a contrastive loss needs negatives), got {args.batch_size}")
    if args.workers < 0:
        p.error(f"--workers must be 0 or more, got {args.workers}")

    torch.manual_seed(args.seed)
    url = args.data or demo_shards(args.workdir, args.per_class, args.image_size)
    try:
        loader = shardkit.load(
            url,
            fields=("image", "text"),
            batch_size=args.batch_size,
            size=args.image_size,
            num_workers=args.workers,
            drop_last=True,
            seed=args.seed,
        )
    except (ValueError, OSError) as e:  # e.g. a dataset without captions: the message names its fields
        print(f"train_clip.py: error: {e}", file=sys.stderr)
        return 2
    if len(loader) == 0:
        loader.close()
        p.error(f"{url} holds fewer than --batch-size {args.batch_size} samples; pass a smaller --batch-size")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    image_enc, text_enc = ImageEncoder(args.dim).to(device), TextEncoder(args.dim).to(device)
    logit_scale = nn.Parameter(torch.tensor(2.659, device=device))  # log(1 / 0.07), as CLIP
    params = [*image_enc.parameters(), *text_enc.parameters(), logit_scale]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    norm = GpuAugment([Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])

    step, seen, loss_val, epoch = 0, 0, float("nan"), 0
    t0 = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch in DevicePrefetcher(loader, device, transform=norm):
            images, texts = batch["image"], batch["text"]  # float on the device; a list of str
            loss = clip_loss(image_enc(images), text_enc(texts, device), logit_scale)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step, seen, loss_val = step + 1, seen + len(texts), loss.item()
            if step % args.log_every == 0 or step == 1:
                print(f"step {step}: loss {loss_val:.4f}", flush=True)
            if step >= args.steps:
                break
        epoch += 1
    loader.close()
    print(f"done: {step} steps, loss {loss_val:.4f}, {seen / (time.perf_counter() - t0):.1f} img/s", flush=True)
    print(
        f"data: {url}"
        + ("" if args.data else f" (sample data made in {args.workdir}); next: --data URL trains on yours")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
