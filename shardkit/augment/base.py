"""The op protocol shared by every augmentation, and small validators.

An op is a frozen dataclass holding its options (torchvision's parameter
meaning). It draws its per-sample parameters from a slice of uniform random
numbers (:meth:`Op.sample`) and applies them to the whole batch. There are
three kinds:

* :class:`GeometricOp` maps output pixel coordinates to input coordinates with
  one 3x3 matrix per sample; consecutive geometric ops are fused by
  :class:`~shardkit.augment.GpuAugment` into one ``grid_sample`` pass.
* :class:`PixelOp` changes values (colour, blur, normalise, erasing).
* :class:`MixOp` mixes samples of the batch and their labels (MixUp, CutMix).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from enum import Enum
from typing import ClassVar

import torch
from torch import Tensor

Size = tuple[int, int]  # (height, width)
Params = dict[str, Tensor]


class OpKind(Enum):
    """How :class:`~shardkit.augment.GpuAugment` schedules an op."""

    GEOMETRIC = "geometric"
    PIXEL = "pixel"
    MIX = "mix"


class Op:
    """Base class of all ops. Subclasses are frozen dataclasses."""

    kind: ClassVar[OpKind]

    def num_uniforms(self) -> int:
        """How many uniform numbers per sample :meth:`sample` consumes."""
        return 0

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        """Per-sample parameters as tensors with a leading batch dimension.

        Args:
            u: ``[B, num_uniforms()]`` uniform numbers in ``[0, 1)`` on the target device.
            size: ``(height, width)`` of the image this op receives.
            generator: the pipeline's generator, for draws that are not uniform
                (Beta, normal); on the same device as ``u``.
        """
        return {}


class GeometricOp(Op):
    """An op that moves pixels: described by an inverse map per sample."""

    kind = OpKind.GEOMETRIC
    #: the op maps its whole output onto its whole input (flips, resizes): a fill right after it fills exactly
    #: what a fill before it would (so targets need no cut there: :mod:`shardkit.augment.target_moves`)
    whole_canvas: ClassVar[bool] = False

    def output_size(self, size: Size) -> Size:
        """``(height, width)`` this op produces from an input of ``size``."""
        return size

    def fill_value(self) -> tuple[float, float, float] | None:
        """Fill (input units, 0-255) for points outside the input, or ``None``
        if this op never samples outside its input (crops, flips)."""
        return None

    def static_crop(self, size: Size) -> tuple[int, int, int, int] | None:
        """``(top, left, height, width)`` if this op is a fixed integer crop, else ``None``."""
        return None

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        """``[B or 1, 3, 3]`` float32 map from output pixel coordinates to input
        pixel coordinates (pixel centres at integers), on ``device``."""
        raise NotImplementedError


class PixelOp(Op):
    """An op that changes pixel values of float images."""

    kind = OpKind.PIXEL

    def apply(self, x: Tensor, params: Params) -> Tensor:
        """Apply to ``x`` (``[B, 3, H, W]`` float); may work in place."""
        raise NotImplementedError


class MixOp(Op):
    """An op that mixes samples of the batch and their labels."""

    kind = OpKind.MIX
    num_classes: int

    def apply(self, x: Tensor, labels: Tensor, params: Params) -> tuple[Tensor, Tensor]:
        """Mix ``x`` and the soft ``labels`` (``[B, num_classes]`` float32)."""
        raise NotImplementedError


@functools.lru_cache(maxsize=512)
def _constant(values: tuple[float, ...], shape: tuple[int, ...], device: str, dtype: torch.dtype) -> Tensor:
    return torch.tensor(values, dtype=dtype, device=device).view(shape)


def const(
    values: Sequence[float], shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype = torch.float32
) -> Tensor:
    """A constant on ``device``, created once and cached (never modify it).

    ``torch.tensor(..., device="cuda")`` copies from pageable host memory and
    synchronises; caching keeps such copies out of the per-batch hot path.
    """
    if torch.compiler.is_compiling():  # traced into the graph as a constant
        return torch.tensor([float(v) for v in values], dtype=dtype, device=device).view(shape)
    return _constant(tuple(float(v) for v in values), tuple(shape), str(torch.device(device)), dtype)


def check_prob(name: str, p: float) -> None:
    """Raise ``ValueError`` unless ``0 <= p <= 1``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p}")


def as_range(
    name: str, value: float | Sequence[float], *, center: float = 0.0, min_value: float | None = None
) -> tuple[float, float]:
    """torchvision's convention: a number ``v`` means ``[center - v, center + v]``,
    a pair means itself. Checks ``low <= high`` and ``low >= min_value``."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{name} as a single number must be non-negative, got {value}")
        low, high = center - float(value), center + float(value)
        if min_value is not None:
            low = max(low, min_value)
    else:
        if len(value) != 2:
            raise ValueError(f"{name} must be a number or a (low, high) pair, got {value!r}")
        low, high = float(value[0]), float(value[1])
    if not low <= high:
        raise ValueError(f"{name} must satisfy low <= high, got ({low}, {high})")
    if min_value is not None and low < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got ({low}, {high})")
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} must be finite, got ({low}, {high})")
    return low, high


def as_size(name: str, size: int | Sequence[int]) -> Size:
    """``int`` -> square size; ``(h, w)`` -> itself; both positive."""
    if isinstance(size, int):
        h = w = size
    else:
        if len(size) != 2:
            raise ValueError(f"{name} must be an int or a (height, width) pair, got {size!r}")
        h, w = int(size[0]), int(size[1])
    if h < 1 or w < 1:
        raise ValueError(f"{name} must be positive, got {size!r}")
    return h, w


def as_fill(fill: float | Sequence[float]) -> tuple[float, float, float]:
    """A fill value in input units (0-255) for 3 channels."""
    if isinstance(fill, (int, float)):
        return (float(fill),) * 3
    if len(fill) == 1:
        return (float(fill[0]),) * 3
    if len(fill) != 3:
        raise ValueError(f"fill must be a number or 3 numbers (one per channel), got {fill!r}")
    return tuple(float(f) for f in fill)  # type: ignore[return-value]
