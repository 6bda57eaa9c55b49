"""A tiny DINO (self-distillation with no labels) on shardkit's multi-crop views.

DINO (Caron et al. 2021, facebookresearch/dino ``main_dino.py``) trains a student network to match an EMA teacher:
every image gets 2 global crops and several local crops; the teacher sees the global crops only, its outputs are
centred (a running mean) and sharpened (a low temperature), and the loss is the cross-entropy between the teacher's
softmax on each global crop and the student's softmax on every *other* crop. Here shardkit cuts all the crops in its
workers, each image decoded once (``shardkit.load(url, views=[...])``), and DINO's colour recipes run per view group
on the device (``shardkit.augment.ViewAugment.dino()``). The network is a tiny CNN so that it runs on a CPU::

    python examples/train_dino.py --steps 20                       # sample data shardkit makes: ~30 s on 2 CPU cores
    python examples/train_dino.py --data /data/imagenet/train --global-size 224 --local-size 96 --local-crops 8 \\
        --batch-size 64 --workers 8 --steps 10000                  # DINO's crop recipe on your shards

It prints the loss and images/s every ``--log-every`` steps and a last line ``done: N steps, ...``.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import time
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

import shardkit
from shardkit.augment import ViewAugment
from shardkit.loader.prefetch import DevicePrefetcher

NUM_GLOBAL = 2  # DINO's two global crops: the teacher sees these


# ----------------------------------------------------------------------------- the networks


def tiny_cnn(dim: int) -> nn.Module:
    """A 4-stage CNN backbone -> ``[N, dim]`` (GroupNorm: teacher and student need no batch statistics)."""

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.GroupNorm(8, cout), nn.GELU())

    return nn.Sequential(
        block(3, 32), block(32, 64), block(64, 96), block(96, dim), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    )


class DINOHead(nn.Module):
    """DINO's projection head: an MLP to a bottleneck, L2-normalised, then a weight-normalised layer (norm 1)."""

    def __init__(self, dim: int, out_dim: int, hidden: int = 256, bottleneck: int = 64) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, bottleneck))
        self.last = nn.Linear(bottleneck, out_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.normalize(self.mlp(x), dim=-1), F.normalize(self.last.weight, dim=1))


class MultiCrop(nn.Module):
    """Backbone + head over a list of views; consecutive views of one size share a backbone call (DINO's
    ``MultiCropWrapper``). Returns ``[len(views) * B, out_dim]``, view by view."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, views: Sequence[torch.Tensor]) -> torch.Tensor:
        feats, start = [], 0
        for end in range(1, len(views) + 1):
            if end == len(views) or views[end].shape[-1] != views[start].shape[-1]:
                feats.append(self.backbone(torch.cat(list(views[start:end]))))
                start = end
        return self.head(torch.cat(feats))


# ----------------------------------------------------------------------------- DINO's loss, centre and teacher


def dino_loss(
    student_out: torch.Tensor,
    teacher_out: torch.Tensor,
    center: torch.Tensor,
    *,
    num_views: int,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
) -> torch.Tensor:
    """Mean over (teacher view i, student view v != i) of the cross-entropy between the teacher's centred, sharpened
    softmax on global view i and the student's softmax on view v (``main_dino.py``'s ``DINOLoss``).

    Args:
        student_out: ``[num_views * B, K]``, view by view.
        teacher_out: ``[G * B, K]``, the teacher's outputs on the first ``G`` (global) views.
        center: ``[1, K]``, the running mean of the teacher's outputs.
    """
    student = (student_out / student_temp).chunk(num_views)
    num_global = len(teacher_out) // (len(student_out) // num_views)
    teacher = F.softmax((teacher_out - center) / teacher_temp, dim=-1).detach().chunk(num_global)
    total, pairs = student_out.new_zeros(()), 0
    for i, q in enumerate(teacher):
        for v, s in enumerate(student):
            if v == i:  # the same crop: no loss
                continue
            total = total + torch.sum(-q * F.log_softmax(s, dim=-1), dim=-1).mean()
            pairs += 1
    return total / pairs


@torch.no_grad()
def update_center(center: torch.Tensor, teacher_out: torch.Tensor, momentum: float) -> None:
    """``center <- momentum * center + (1 - momentum) * mean of the batch's teacher outputs``, in place."""
    center.mul_(momentum).add_(teacher_out.mean(dim=0, keepdim=True), alpha=1 - momentum)


@torch.no_grad()
def update_teacher(student: nn.Module, teacher: nn.Module, momentum: float) -> None:
    """The teacher's weights become an exponential moving average of the student's, in place."""
    for ps, pt in zip(student.parameters(), teacher.parameters()):
        pt.mul_(momentum).add_(ps.detach(), alpha=1 - momentum)


def teacher_momentum(step: int, steps: int, base: float) -> float:
    """DINO's cosine schedule of the teacher momentum: ``base`` at step 0 up to 1 at the last step."""
    return 1 - (1 - base) * (math.cos(math.pi * step / max(1, steps)) + 1) / 2


def train_step(
    student: nn.Module,
    teacher: nn.Module,
    center: torch.Tensor,
    views: Sequence[torch.Tensor],
    opt: torch.optim.Optimizer,
    *,
    momentum: float,
    center_momentum: float = 0.9,
    student_temp: float = 0.1,
    teacher_temp: float = 0.04,
    clip_grad: float = 3.0,
) -> float:
    """One DINO step: the teacher on the global views, the student on all of them, loss, update, EMA, centre."""
    with torch.no_grad():
        teacher_out = teacher(views[:NUM_GLOBAL])
    student_out = student(views)
    loss = dino_loss(
        student_out, teacher_out, center, num_views=len(views), student_temp=student_temp, teacher_temp=teacher_temp
    )
    value = float(loss.detach())
    if not math.isfinite(value):
        raise SystemExit(f"loss is {value}: stopping")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(student.parameters(), clip_grad)
    opt.step()
    update_teacher(student, teacher, momentum)
    update_center(center, teacher_out, center_momentum)
    return value


# ----------------------------------------------------------------------------- data and main


def demo_shards(workdir: str, images: int = 128) -> str:
    """A small photo-like sample dataset of ``images`` images that shardkit makes (no download), converted to shards;
    its URL."""
    from shardkit.convert import ConvertConfig, convert
    from shardkit.convert.imageproc import EncodeConfig
    from shardkit.demo.sampledata import SMALL, make_imagefolder

    src = os.path.join(workdir, "images")
    if not os.path.isdir(src):
        make_imagefolder(src, num_classes=4, per_class=max(1, images // 4), spread=SMALL)
    result = convert(
        src, os.path.join(workdir, "shards"), ConvertConfig(image=EncodeConfig(short_side=128)), quiet=True
    )
    return result.splits[0].url


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="a shardkit split (URL); default: sample data made in --workdir")
    p.add_argument("--workdir", default="dino-demo", help="where the sample data goes")
    p.add_argument("--demo-images", type=int, default=128, help="how many sample images (without --data)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--global-size", type=int, default=64, help="DINO: 224")
    p.add_argument("--local-size", type=int, default=32, help="DINO: 96")
    p.add_argument("--local-crops", type=int, default=6, help="DINO: 8 (0: global crops only)")
    p.add_argument("--out-dim", type=int, default=256, help="prototypes (DINO: 65536)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--momentum", type=float, default=0.996, help="teacher EMA momentum at step 0 (cosine to 1)")
    p.add_argument("--teacher-temp", type=float, default=0.04)
    p.add_argument("--student-temp", type=float, default=0.1)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    torch.manual_seed(args.seed)
    url = args.data or demo_shards(args.workdir, args.demo_images)

    # 1. the crops, cut in the workers: each image decoded once, 2 global + N local views per image
    try:
        views = [shardkit.View(args.global_size, scale=(0.4, 1.0), count=NUM_GLOBAL)]
        if args.local_crops:
            views.append(shardkit.View(args.local_size, scale=(0.05, 0.4), count=args.local_crops))
        loader = shardkit.load(
            url, batch_size=args.batch_size, num_workers=args.workers, views=views, seed=args.seed, drop_last=True
        )
    except (shardkit.ShardkitError, ValueError) as exc:  # a wrong URL or option: one line, no traceback
        raise SystemExit(f"train_dino.py: {exc}") from None
    if len(loader) == 0:
        raise SystemExit(f"{url}: fewer samples than one batch of {args.batch_size}; lower --batch-size")

    # 2. colour augmentation on the device: DINO's recipes per view group (jitter, grayscale, blur p=1.0 / 0.1 on
    #    the two global views and 0.5 on the local ones, solarize on the second global view), per-sample parameters,
    #    same-size views batched together
    colour = ViewAugment.dino(local_crops_number=args.local_crops, seed=args.seed)

    # 3. student and EMA teacher (the teacher is never trained by the optimizer)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    student = MultiCrop(tiny_cnn(128), DINOHead(128, args.out_dim)).to(device)
    teacher = copy.deepcopy(student).requires_grad_(False)
    center = torch.zeros(1, args.out_dim, device=device)
    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.04)

    step, seen, epoch, first = 0, 0, 0, None
    t0 = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        for batch_views, _labels in DevicePrefetcher(loader, device, transform=colour):  # labels unused: no labels
            m = teacher_momentum(step, args.steps, args.momentum)
            loss = train_step(
                student,
                teacher,
                center,
                batch_views,
                opt,
                momentum=m,
                student_temp=args.student_temp,
                teacher_temp=args.teacher_temp,
            )
            first = loss if first is None else first
            step += 1
            seen += len(batch_views[0])
            if step % args.log_every == 0 or step == args.steps:
                rate = seen / (time.perf_counter() - t0)
                print(f"step {step}/{args.steps} (epoch {epoch}): loss {loss:.4f}, {rate:.1f} img/s", flush=True)
            if step == args.steps:
                break
        epoch += 1
    print(
        f"done: {step} steps, {seen} images, {NUM_GLOBAL + args.local_crops} views per image, "
        f"loss {first:.4f} -> {loss:.4f}",
        flush=True,
    )
    print(
        f"data: {url}"
        + ("" if args.data else f" (sample data made in {args.workdir}); next: --data URL trains on yours")
    )


if __name__ == "__main__":
    main()
