"""Random erasing of one rectangle per sample, by masking (no loop, no sync)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from shardkit.augment import params as P
from shardkit.augment.base import Params, PixelOp, Size, as_range, check_prob, const


def box_mask(top: Tensor, left: Tensor, height: Tensor, width: Tensor, size: Sequence[int]) -> Tensor:
    """``[B, 1, H, W]`` bool mask of one box per sample (float ``[B]`` box tensors)."""
    h, w = size
    rows = torch.arange(h, device=top.device, dtype=top.dtype).view(1, 1, h, 1)
    cols = torch.arange(w, device=top.device, dtype=top.dtype).view(1, 1, 1, w)
    t, l_ = top.view(-1, 1, 1, 1), left.view(-1, 1, 1, 1)
    in_rows = (rows >= t) & (rows < t + height.view(-1, 1, 1, 1))
    in_cols = (cols >= l_) & (cols < l_ + width.view(-1, 1, 1, 1))
    return in_rows & in_cols


@dataclass(frozen=True)
class RandomErasing(PixelOp):
    """torchvision ``RandomErasing``: with probability ``p`` replace a box of
    area fraction ``scale`` and aspect ratio (height / width) ``ratio``.

    Args:
        p: probability that a sample is erased.
        scale: range of the box area as a fraction of the image.
        ratio: range of the box aspect ratio, drawn log-uniformly.
        value: the value written, in the units of the image at this point
            (after :class:`Normalize` 0 is the mean colour): one number, one
            per channel, or ``"random"`` for standard normal noise per pixel.
    """

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float | tuple[float, float, float] | Literal["random"] = 0.0

    def __post_init__(self) -> None:
        check_prob("p", self.p)
        lo, hi = as_range("scale", self.scale)
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"scale must lie in [0, 1], got {self.scale}")
        lo, _ = as_range("ratio", self.ratio)
        if lo <= 0:
            raise ValueError(f"ratio must be positive, got {self.ratio}")
        if isinstance(self.value, str):
            if self.value != "random":
                raise ValueError(f"value must be a number, 3 numbers or 'random', got {self.value!r}")
        elif not isinstance(self.value, (int, float)) and len(self.value) not in (1, 3):
            raise ValueError(f"value must be a number, 3 numbers or 'random', got {self.value!r}")

    def num_uniforms(self) -> int:
        return P.BOX_UNIFORMS + 1

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        top, left, h, w, found = P.erase_boxes(u, size, tuple(self.scale), tuple(self.ratio))  # type: ignore[arg-type]
        apply = found & P.bernoulli(u[:, P.BOX_UNIFORMS], self.p)
        out = {"top": top, "left": left, "height": torch.where(apply, h, 0.0), "width": w}
        if self.value == "random":
            out["noise"] = torch.randn((u.shape[0], 3, *size), generator=generator, device=u.device)
        return out

    def apply(self, x: Tensor, params: Params) -> Tensor:
        mask = box_mask(params["top"], params["left"], params["height"], params["width"], x.shape[-2:])
        value: Tensor | float
        if self.value == "random":
            value = params["noise"].to(x.dtype)
        elif isinstance(self.value, (int, float)):
            value = float(self.value)
        else:
            vals = list(self.value) * (3 // len(self.value))
            value = const(vals, (1, 3, 1, 1), x.device, x.dtype)
        return torch.where(mask, value, x)
