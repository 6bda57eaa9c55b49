"""Batch-level MixUp and CutMix that also mix the labels.

As in torchvision v2, each sample is paired with its predecessor in the batch
(``roll(1, 0)``), so the batch must already be shuffled, and by default one
mixing weight ``lam ~ Beta(alpha, alpha)`` is drawn per batch. With
``per_sample=True`` every sample draws its own ``lam`` (and CutMix box).
Labels come in as class indices ``[B]`` (int) or soft labels ``[B, K]`` and
leave as float32 soft labels ``[B, K]`` whose rows sum to one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from shardkit.augment import params as P
from shardkit.augment.base import MixOp, Params, Size, check_prob
from shardkit.augment.erase import box_mask


def invalid_labels(labels: Tensor, num_classes: int) -> Tensor:
    """``[B]`` bool: class indices outside ``[0, num_classes)`` (computed on the labels' device, no sync)."""
    return (labels < 0) | (labels >= num_classes)


def soft_labels(labels: Tensor, num_classes: int) -> Tensor:
    """Class indices ``[B]`` -> one-hot float32 ``[B, num_classes]``; soft labels pass through as float32.

    An index outside ``[0, num_classes)`` gives an all-zero row (no class: no loss with soft-label
    cross-entropy) instead of an out-of-bounds scatter, a device-side assert on CUDA that kills
    the process; :class:`~shardkit.augment.GpuAugment` counts them (``label_errors``) and
    :class:`~shardkit.loader.prefetch.DevicePrefetcher` refuses them on the host before the copy.
    (A scatter rather than ``F.one_hot``, which checks the index range on the host: a sync.)
    """
    if labels.ndim == 1:
        idx = labels.long()
        valid = (~invalid_labels(idx, num_classes)).to(torch.float32)
        out = torch.zeros(labels.shape[0], num_classes, dtype=torch.float32, device=labels.device)
        return out.scatter_(1, idx.clamp(0, num_classes - 1).view(-1, 1), valid.view(-1, 1))
    if labels.ndim != 2 or labels.shape[1] != num_classes:
        raise ValueError(
            f"labels must be [B] class indices or [B, {num_classes}] soft labels, got shape {tuple(labels.shape)}"
        )
    return labels.to(torch.float32)


def mix_labels(labels: Tensor, lam: Tensor) -> Tensor:
    """``lam * labels + (1 - lam) * labels.roll(1, 0)`` with ``lam`` ``[B]``."""
    return torch.lerp(labels.roll(1, 0), labels, lam.view(-1, 1))


def mixup(x: Tensor, lam: Tensor) -> Tensor:
    """``lam * x + (1 - lam) * x.roll(1, 0)`` per sample."""
    return torch.lerp(x.roll(1, 0), x, lam.view(-1, 1, 1, 1).to(x.dtype))


def cutmix_boxes(lam: Tensor, cx: Tensor, cy: Tensor, size: Size) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """torchvision's CutMix box around ``(cx, cy)`` with side ``sqrt(1 - lam)``
    of the image, clipped; returns ``(top, left, height, width, lam_adjusted)``."""
    h, w = size
    r = 0.5 * torch.sqrt(1.0 - lam)
    half_w, half_h = torch.floor(r * w), torch.floor(r * h)
    x1, x2 = (cx - half_w).clamp_min(0.0), (cx + half_w).clamp_max(float(w))
    y1, y2 = (cy - half_h).clamp_min(0.0), (cy + half_h).clamp_max(float(h))
    lam_adj = 1.0 - (x2 - x1) * (y2 - y1) / float(h * w)
    return y1, x1, y2 - y1, x2 - x1, lam_adj


def cutmix(x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor) -> Tensor:
    """Paste the box of the previous sample (``roll(1, 0)``) into each sample."""
    mask = box_mask(top, left, height, width, x.shape[-2:])
    return torch.where(mask, x.roll(1, 0), x)


@dataclass(frozen=True)
class _Mix(MixOp):
    num_classes: int
    alpha: float = 1.0
    p: float = 1.0
    per_sample: bool = False

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {self.num_classes}")
        if not (self.alpha > 0 and math.isfinite(self.alpha)):
            raise ValueError(f"alpha must be positive, got {self.alpha}")
        check_prob("p", self.p)

    def _lam(self, u: Tensor, generator: torch.Generator) -> Tensor:
        """``[B]`` weights of the sample itself; 1 where the op is not applied."""
        b = u.shape[0]
        n = b if self.per_sample else 1
        lam = P.beta(generator, self.alpha, (n,), u.device)
        applied = P.bernoulli(u[:n, 0], self.p)
        return torch.where(applied, lam, 1.0).expand(b)


@dataclass(frozen=True)
class MixUp(_Mix):
    """torchvision ``MixUp``: ``lam * x + (1 - lam) * x_prev`` and the same for labels.

    Args:
        num_classes: number of classes (for one-hot labels).
        alpha: Beta distribution parameter.
        p: probability of mixing (per batch, or per sample with ``per_sample``).
        per_sample: draw ``lam`` per sample instead of per batch.
    """

    def num_uniforms(self) -> int:
        return 1

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        return {"lam": self._lam(u, generator)}

    def apply(self, x: Tensor, labels: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        return mixup(x, params["lam"]), mix_labels(labels, params["lam"])


@dataclass(frozen=True)
class CutMix(_Mix):
    """torchvision ``CutMix``: paste a box of the previous sample; labels mixed
    by the pasted area.

    Args:
        num_classes: number of classes (for one-hot labels).
        alpha: Beta distribution parameter.
        p: probability of mixing (per batch, or per sample with ``per_sample``).
        per_sample: draw ``lam`` and the box per sample instead of per batch.
    """

    def num_uniforms(self) -> int:
        return 3

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        b = u.shape[0]
        n = b if self.per_sample else 1
        lam = self._lam(u, generator)
        cx = P.randint(u[:n, 1], size[1]).expand(b)
        cy = P.randint(u[:n, 2], size[0]).expand(b)
        top, left, height, width, lam_adj = cutmix_boxes(lam, cx, cy, size)
        return {"top": top, "left": left, "height": height, "width": width, "lam": lam_adj}

    def apply(self, x: Tensor, labels: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        out = cutmix(x, params["top"], params["left"], params["height"], params["width"])
        return out, mix_labels(labels, params["lam"])
