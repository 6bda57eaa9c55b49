"""Gaussian blur with a different sigma for every sample.

The per-sample 1-D kernels are built on the device and applied as two
depthwise (grouped) convolutions over the batch folded into channels
(``[1, B*C, H, W]``), with reflect padding as torchvision's
``F.gaussian_blur``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.augment import params as P
from shardkit.augment.base import Params, PixelOp, Size, as_range, check_prob, const


def gaussian_kernels(sigma: Tensor, kernel_size: int) -> Tensor:
    """``[B, kernel_size]`` normalised Gaussian kernels, one per sigma (torchvision's formula)."""
    half = (kernel_size - 1) * 0.5
    x = const([i - half for i in range(kernel_size)], (1, kernel_size), sigma.device)
    return torch.softmax(-0.5 * (x / sigma.unsqueeze(1)) ** 2, dim=1)


def gaussian_blur(x: Tensor, sigma: Tensor, kernel_size: tuple[int, int]) -> Tensor:
    """Blur each image with its own ``sigma`` (``[B]``); ``kernel_size`` is ``(kx, ky)`` (odd)."""
    b, c, h, w = x.shape
    if b == 0:  # an empty batch (the loader can yield one): conv2d refuses zero groups
        return x
    kx, ky = kernel_size
    out = F.pad(x, [kx // 2, kx // 2, ky // 2, ky // 2], mode="reflect")
    out = out.reshape(1, b * c, h + ky // 2 * 2, w + kx // 2 * 2)
    wx = gaussian_kernels(sigma, kx).repeat_interleave(c, dim=0).view(b * c, 1, 1, kx).to(x.dtype)
    wy = gaussian_kernels(sigma, ky).repeat_interleave(c, dim=0).view(b * c, 1, ky, 1).to(x.dtype)
    out = F.conv2d(out, wy, groups=b * c)
    out = F.conv2d(out, wx, groups=b * c)
    return out.view(b, c, h, w)


@dataclass(frozen=True)
class GaussianBlur(PixelOp):
    """torchvision ``GaussianBlur``: sigma uniform in ``sigma`` per sample.

    Args:
        kernel_size: odd int, or ``(kx, ky)`` (width, height) like torchvision.
        sigma: ``s`` for a fixed sigma, or ``(low, high)``.
        p: probability that a sample is blurred (others keep a delta kernel).
    """

    kernel_size: int | tuple[int, int]
    sigma: float | tuple[float, float] = (0.1, 2.0)
    p: float = 1.0

    def __post_init__(self) -> None:
        for k in self._kernel():
            if k < 1 or k % 2 == 0:
                raise ValueError(f"kernel_size must be odd and positive, got {self.kernel_size!r}")
        lo, _ = self._sigma()
        if lo <= 0:
            raise ValueError(f"sigma must be positive, got {self.sigma!r}")
        check_prob("p", self.p)

    def _kernel(self) -> tuple[int, int]:
        if isinstance(self.kernel_size, int):
            return self.kernel_size, self.kernel_size
        if len(self.kernel_size) != 2:
            raise ValueError(f"kernel_size must be an int or a pair, got {self.kernel_size!r}")
        return int(self.kernel_size[0]), int(self.kernel_size[1])

    def _sigma(self) -> tuple[float, float]:
        if isinstance(self.sigma, (int, float)):
            return float(self.sigma), float(self.sigma)
        return as_range("sigma", self.sigma)

    def num_uniforms(self) -> int:
        return 2

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        sigma = P.uniform(u[:, 0], *self._sigma())
        # a tiny sigma makes the kernel a delta (exp underflows to 0 off-centre)
        return {"sigma": torch.where(P.bernoulli(u[:, 1], self.p), sigma, 1e-3)}

    def apply(self, x: Tensor, params: Params) -> Tensor:
        return gaussian_blur(x, params["sigma"], self._kernel())
