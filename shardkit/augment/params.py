"""Per-sample parameter sampling as batched tensor maths.

Every function turns uniform numbers ``u`` (drawn once per batch by
:class:`~shardkit.augment.GpuAugment` from its seeded ``torch.Generator``, on
the images' device) into ``[B]``-shaped parameters, with no Python loop over
samples and no host-device synchronisation. Integer results (pixel offsets and
sizes) are returned as float tensors holding whole numbers, ready for matrix
maths.

:func:`make_generator` creates a generator on a device; a CPU generator with
CUDA tensors would force a copy and a sync per draw, so the pipeline keeps one
generator per device.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def make_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def uniform(u: Tensor, low: float, high: float) -> Tensor:
    """Map ``u`` in ``[0, 1)`` to ``[low, high)``."""
    return u * (high - low) + low


def bernoulli(u: Tensor, p: float) -> Tensor:
    """``True`` with probability ``p``, as a bool tensor shaped like ``u``."""
    return u < p


def randint(u: Tensor, n: Tensor | float) -> Tensor:
    """Whole numbers uniform in ``[0, n)`` (float tensor); ``n`` may be per sample.

    The clamp guards ``u * n`` rounding up to ``n`` in float32.
    """
    if isinstance(n, Tensor):
        upper = n.to(u.dtype) - 1
        return torch.minimum(torch.floor(u * (upper + 1)), upper)
    return torch.floor(u * n).clamp_max_(n - 1)


#: Marsaglia-Tsang proposals drawn per Gamma sample; each is accepted with probability >= 0.95,
#: so all of them fail with probability < 0.05 ** 8 = 4e-11 (then the last proposal is used)
GAMMA_ROUNDS = 8


def gamma(generator: torch.Generator, alpha: float, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """Gamma(alpha, 1) samples (float64) on ``device``, by Marsaglia and Tsang's method (ACM TOMS 26(3), 2000).

    Public ``torch.randn``/``torch.rand`` draws from ``generator`` only (``torch.distributions`` takes no
    generator): :data:`GAMMA_ROUNDS` proposals per sample, all evaluated at once, and the first accepted
    one kept, so there is no data-dependent loop and no host-device sync. ``alpha < 1`` samples
    Gamma(alpha + 1) and scales it by ``U ** (1 / alpha)``.
    """
    if not alpha > 0:
        raise ValueError(f"the Gamma/Beta shape must be positive, not {alpha}")
    boost = alpha < 1
    d = (alpha + 1 if boost else alpha) - 1 / 3
    c = 1 / math.sqrt(9 * d)
    x = torch.randn((GAMMA_ROUNDS, *shape), generator=generator, dtype=torch.float64, device=device)
    u = torch.rand((GAMMA_ROUNDS + int(boost), *shape), generator=generator, dtype=torch.float64, device=device)
    v = (1 + c * x) ** 3
    ok = (v > 0) & (torch.log(u[:GAMMA_ROUNDS]) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
    ok[-1] = True  # the fallback of the 4e-11 case: the last proposal
    first = ok.to(torch.int8).argmax(dim=0, keepdim=True)  # index of the first accepted proposal
    g = d * torch.gather(v, 0, first)[0].clamp_min(torch.finfo(torch.float64).tiny)
    if boost:
        g = g * u[-1] ** (1 / alpha)
    return g


def beta(generator: torch.Generator, alpha: float, shape: tuple[int, ...], device: torch.device) -> Tensor:
    """Beta(alpha, alpha) samples (float32) from two Gamma draws (:func:`gamma`), on ``device``."""
    g = gamma(generator, alpha, (2, *shape), device)
    total = (g[0] + g[1]).clamp_min(torch.finfo(torch.float64).tiny)
    return (g[0] / total).to(torch.float32)


#: attempts torchvision makes before falling back (RandomResizedCrop, RandomErasing)
ATTEMPTS = 10
#: uniforms per sample that :func:`resized_crop_boxes` / :func:`erase_boxes` consume
BOX_UNIFORMS = 2 * ATTEMPTS + 2


def _box_attempts(
    u: Tensor, area: float, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[Tensor, Tensor]:
    """``(h, w)`` of each of the ATTEMPTS candidate boxes per sample, rounded like torchvision."""
    target = uniform(u[:, :ATTEMPTS], scale[0], scale[1]) * area
    log_ratio = uniform(u[:, ATTEMPTS : 2 * ATTEMPTS], math.log(ratio[0]), math.log(ratio[1]))
    aspect = torch.exp(log_ratio)
    w = torch.round(torch.sqrt(target * aspect))
    h = torch.round(torch.sqrt(target / aspect))
    return h, w


def _first(ok: Tensor, *values: Tensor) -> tuple[Tensor, ...]:
    """For each row, the values at the first ``True`` column of ``ok`` (column 0 if none)."""
    idx = ok.to(torch.uint8).argmax(dim=1, keepdim=True)
    return tuple(v.gather(1, idx).squeeze(1) for v in values)


def resized_crop_boxes(
    u: Tensor, size: tuple[int, int], scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """torchvision ``RandomResizedCrop.get_params`` for every sample at once.

    Up to 10 attempts of an area fraction from ``scale`` and a log-uniform
    aspect ratio (width / height) from ``ratio``; the first box that fits is
    placed uniformly at random; if none fits, a centre crop with the ratio
    clamped into ``ratio``.

    Args:
        u: ``[B, BOX_UNIFORMS]`` uniforms.
        size: ``(height, width)`` of the image.

    Returns:
        ``(top, left, height, width)``, each ``[B]`` float holding whole numbers.
    """
    height, width = size
    h, w = _box_attempts(u, float(height * width), scale, ratio)
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    h_sel, w_sel = _first(ok, h, w)
    found = ok.any(dim=1)
    # fallback: whole image, ratio clamped (python ints: shapes are static)
    in_ratio = width / height
    if in_ratio < min(ratio):
        fw, fh = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fh, fw = height, int(round(height * max(ratio)))
    else:
        fw, fh = width, height
    h_sel = torch.where(found, h_sel, torch.full_like(h_sel, fh))
    w_sel = torch.where(found, w_sel, torch.full_like(w_sel, fw))
    top = randint(u[:, 2 * ATTEMPTS], height - h_sel + 1)
    left = randint(u[:, 2 * ATTEMPTS + 1], width - w_sel + 1)
    top = torch.where(found, top, torch.full_like(top, (height - fh) // 2))
    left = torch.where(found, left, torch.full_like(left, (width - fw) // 2))
    return top, left, h_sel, w_sel


def erase_boxes(
    u: Tensor, size: tuple[int, int], scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """torchvision ``RandomErasing.make_params`` for every sample at once.

    Up to 10 attempts of an area fraction from ``scale`` and a log-uniform
    aspect ratio (height / width) from ``ratio``; the first box strictly
    smaller than the image is placed uniformly at random; if none fits, the
    sample is not erased.

    Returns:
        ``(top, left, height, width, found)``: ``[B]`` floats and a ``[B]`` bool.
    """
    height, width = size
    # torchvision's RandomErasing computes h from area * ratio (ratio is h / w)
    w, h = _box_attempts(u, float(height * width), scale, ratio)
    ok = (h < height) & (w < width)
    h_sel, w_sel = _first(ok, h, w)
    found = ok.any(dim=1)
    top = randint(u[:, 2 * ATTEMPTS], (height - h_sel + 1).clamp_min(1))
    left = randint(u[:, 2 * ATTEMPTS + 1], (width - w_sel + 1).clamp_min(1))
    return top, left, h_sel, w_sel, found
