"""Photometric ops with per-sample factors, as batched tensor maths.

Images are float ``[B, 3, H, W]`` in ``[0, 1]`` (before :class:`Normalize`);
factors are ``[B]`` tensors. The formulas are torchvision's
(``torchvision.transforms.v2.functional.adjust_*``), with two rewrites that
give the same values in fewer kernels: blends are written with ``torch.lerp``,
and the hue shift keeps each pixel's max, min and chroma and evaluates the
HSV-to-RGB formula ``v - c * clamp(min(k, 4 - k), 0, 1)``, ``k = (n + 6h) mod 6``
directly (no full RGB->HSV->RGB round trip). Functions may modify their input
in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from shardkit.augment import params as P
from shardkit.augment.base import Params, PixelOp, Size, as_range, check_prob, const

ColorOrder = Literal["fixed", "random"]
_ORDERS = ("fixed", "random")


def _per_sample(f: Tensor, like: Tensor) -> Tensor:
    return f.view(-1, 1, 1, 1).to(like.dtype)


def grayscale(x: Tensor) -> Tensor:
    """ITU-R 601-2 luma ``[B, 1, H, W]`` (torchvision's weights)."""
    r, g, b = x.unbind(dim=1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1)


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """Multiply by ``factor`` (0 gives black), clamp to ``[0, 1]``."""
    return x.mul_(_per_sample(factor, x)).clamp_(0.0, 1.0)


def adjust_contrast(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the mean grey level of each image (0 gives a flat grey image)."""
    mean = grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
    return torch.lerp(mean, x, _per_sample(factor, x)).clamp_(0.0, 1.0)


def adjust_saturation(x: Tensor, factor: Tensor) -> Tensor:
    """Blend with the greyscale image (0 gives greyscale)."""
    return torch.lerp(grayscale(x), x, _per_sample(factor, x)).clamp_(0.0, 1.0)


def adjust_hue(x: Tensor, shift: Tensor) -> Tensor:
    """Rotate the HSV hue by ``shift`` (fraction of a turn, in ``[-0.5, 0.5]``)."""
    minc, maxc = torch.aminmax(x, dim=1, keepdim=True)
    chroma = maxc - minc
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    # hue in sixths of a turn: (g-b)/c, 2+(b-r)/c or 4+(r-g)/c by the max channel,
    # ties resolved r, then g, then b, like torchvision; the shift joins the offset
    is_r, is_g = maxc == r, maxc == g
    num = torch.where(is_r, g - b, torch.where(is_g, b - r, r - g))
    s6 = _per_sample(shift * 6.0, x)
    offset = torch.where(is_r, s6, torch.where(is_g, s6 + 2.0, s6 + 4.0))
    # a grey pixel has num == 0; any positive divisor gives hue 0 (out = max)
    hue6 = torch.addcdiv(offset, num, chroma.clamp_min(1e-6))
    k = (hue6 + const([5.0, 3.0, 1.0], (1, 3, 1, 1), x.device, x.dtype)).remainder_(6.0)
    t = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return torch.addcmul(maxc, chroma, t, value=-1.0)


def random_grayscale(x: Tensor, apply: Tensor) -> Tensor:
    """Replace the samples where ``apply`` is true by their greyscale (3 equal channels)."""
    return torch.lerp(x, grayscale(x), _per_sample(apply, x))


def solarize(x: Tensor, threshold: float, apply: Tensor) -> Tensor:
    """Invert (``1 - x``) the pixels ``>= threshold`` of the samples where ``apply`` is true."""
    return torch.where((x >= threshold) & apply.view(-1, 1, 1, 1), 1.0 - x, x)


def normalize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``(x - mean) / std`` per channel, as one fused multiply-add."""
    scale = const([1.0 / s for s in std], (1, len(std), 1, 1), x.device, x.dtype)
    bias = const([-m / s for m, s in zip(mean, std)], (1, len(std), 1, 1), x.device, x.dtype)
    return torch.addcmul(bias, x, scale)


@dataclass(frozen=True)
class ColorJitter(PixelOp):
    """torchvision ``ColorJitter`` with its own factors for every sample.

    Args:
        brightness: ``b`` for a factor uniform in ``[max(0, 1-b), 1+b]``, or ``(low, high)``.
        contrast: as ``brightness``.
        saturation: as ``brightness``.
        hue: ``h`` for a shift uniform in ``[-h, h]`` (``0 <= h <= 0.5``), or ``(low, high)``.
        p: probability that a sample is jittered at all.
        order: ``"fixed"``: brightness, contrast, saturation, hue (fast);
            ``"random"``: a random order per sample, as torchvision draws per
            call. Random order evaluates every adjustment in each of four
            slots, so it costs about four times as much.
    """

    brightness: float | tuple[float, float] = 0.0
    contrast: float | tuple[float, float] = 0.0
    saturation: float | tuple[float, float] = 0.0
    hue: float | tuple[float, float] = 0.0
    p: float = 1.0
    order: ColorOrder = "fixed"

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation"):
            as_range(name, getattr(self, name), center=1.0, min_value=0.0)
        lo, hi = as_range("hue", self.hue)
        if not -0.5 <= lo <= hi <= 0.5:
            raise ValueError(f"hue must lie in [-0.5, 0.5], got {self.hue}")
        check_prob("p", self.p)
        if self.order not in _ORDERS:
            raise ValueError(f"order must be one of {_ORDERS}, got {self.order!r}")

    def _ranges(self) -> list[tuple[float, float] | None]:
        """Factor range per adjustment; ``None`` where it is the identity."""
        out: list[tuple[float, float] | None] = []
        for name in ("brightness", "contrast", "saturation"):
            r = as_range(name, getattr(self, name), center=1.0, min_value=0.0)
            out.append(None if r == (1.0, 1.0) else r)
        h = as_range("hue", self.hue)
        out.append(None if h == (0.0, 0.0) else h)
        return out

    def num_uniforms(self) -> int:
        return 9

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        applied = P.bernoulli(u[:, 4], self.p)
        out: Params = {}
        for i, (name, rng) in enumerate(zip(("brightness", "contrast", "saturation", "hue"), self._ranges())):
            if rng is None:
                continue
            identity = 0.0 if name == "hue" else 1.0
            out[name] = torch.where(applied, P.uniform(u[:, i], *rng), identity)
        if self.order == "random":
            out["order"] = torch.argsort(u[:, 5:9], dim=1)  # a uniform random permutation per sample
        return out

    def apply(self, x: Tensor, params: Params) -> Tensor:
        if self.order == "fixed":
            for name, fn in (
                ("brightness", adjust_brightness),
                ("contrast", adjust_contrast),
                ("saturation", adjust_saturation),
                ("hue", adjust_hue),
            ):
                if name in params:
                    x = fn(x, params[name])
            return x
        return _jitter_random_order(x, params)


def _jitter_random_order(x: Tensor, params: Params) -> Tensor:
    """Four slots; in slot ``s`` each sample applies adjustment ``order[s]`` and
    the identity for the others."""
    order = params["order"]
    for slot in range(4):
        chosen = order[:, slot]
        for idx, (name, fn) in enumerate(
            (
                ("brightness", adjust_brightness),
                ("contrast", adjust_contrast),
                ("saturation", adjust_saturation),
                ("hue", adjust_hue),
            )
        ):
            if name in params:
                identity = 0.0 if name == "hue" else 1.0
                x = fn(x, torch.where(chosen == idx, params[name], identity))
    return x


@dataclass(frozen=True)
class RandomGrayscale(PixelOp):
    """torchvision ``RandomGrayscale``: greyscale (3 channels) with probability ``p``."""

    p: float = 0.1

    def __post_init__(self) -> None:
        check_prob("p", self.p)

    def num_uniforms(self) -> int:
        return 1

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        return {"apply": P.bernoulli(u[:, 0], self.p)}

    def apply(self, x: Tensor, params: Params) -> Tensor:
        return random_grayscale(x, params["apply"])


@dataclass(frozen=True)
class RandomSolarize(PixelOp):
    """torchvision ``RandomSolarize`` (and BYOL/DINO's ``Solarization``): with probability ``p``
    a sample's pixels ``>= threshold`` become ``1 - x``.

    Args:
        threshold: in image units ``[0, 1]``. The default 0.5 inverts exactly the uint8 values
            ``>= 128`` (127/255 < 0.5 < 128/255), as PIL's ``ImageOps.solarize()`` default.
        p: probability that a sample is solarized.
    """

    threshold: float = 0.5
    p: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1] (image units), got {self.threshold}")
        check_prob("p", self.p)

    def num_uniforms(self) -> int:
        return 1

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        return {"apply": P.bernoulli(u[:, 0], self.p)}

    def apply(self, x: Tensor, params: Params) -> Tensor:
        return solarize(x, self.threshold, params["apply"])


@dataclass(frozen=True)
class Normalize(PixelOp):
    """torchvision ``Normalize``: ``(x - mean) / std`` per channel, for images in ``[0, 1]``."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def __post_init__(self) -> None:
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError(f"mean and std need 3 values (RGB), got {self.mean!r} and {self.std!r}")
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std must be positive, got {self.std!r}")

    def apply(self, x: Tensor, params: Params) -> Tensor:
        return normalize(x, self.mean, self.std)
