"""Geometric ops: crops, resizes, flips, rotations, random affine.

Each op only describes a per-sample inverse map (see :mod:`.geometry`);
:class:`~shardkit.augment.GpuAugment` multiplies the maps of consecutive
geometric ops and resamples once. Interpolation is always bilinear and never
antialiased (torchvision's ``RandomRotation``/``RandomAffine`` default to
nearest, its resizes to antialiased bilinear).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from shardkit.augment import params as P
from shardkit.augment.affine import affine_matrix, constant_matrix, flip_matrix, resized_crop_matrix, rotation_matrix
from shardkit.augment.base import GeometricOp, Params, Size, as_fill, as_range, as_size, check_prob


@dataclass(frozen=True)
class RandomResizedCrop(GeometricOp):
    """torchvision ``RandomResizedCrop``: a random box of area fraction ``scale``
    and aspect ratio (width / height) ``ratio``, resized to ``size``.

    Args:
        size: output ``(height, width)``, or one int for a square.
        scale: range of the box area as a fraction of the input area.
        ratio: range of the box aspect ratio, drawn log-uniformly.
    """

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)

    def __post_init__(self) -> None:
        as_size("size", self.size)
        lo, hi = as_range("scale", self.scale)
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"scale must satisfy 0 < low <= high <= 1, got {self.scale}")
        lo, hi = as_range("ratio", self.ratio)
        if lo <= 0.0:
            raise ValueError(f"ratio must be positive, got {self.ratio}")

    def num_uniforms(self) -> int:
        return P.BOX_UNIFORMS

    def output_size(self, size: Size) -> Size:
        return as_size("size", self.size)

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        top, left, h, w = P.resized_crop_boxes(u, size, tuple(self.scale), tuple(self.ratio))  # type: ignore[arg-type]
        return {"top": top, "left": left, "height": h, "width": w}

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        return resized_crop_matrix(params["top"], params["left"], params["height"], params["width"], out_size)


@dataclass(frozen=True)
class CenterCrop(GeometricOp):
    """torchvision ``CenterCrop`` (the crop must fit inside the input).

    Args:
        size: output ``(height, width)``, or one int for a square.
    """

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        as_size("size", self.size)

    def output_size(self, size: Size) -> Size:
        return as_size("size", self.size)

    def static_crop(self, size: Size) -> tuple[int, int, int, int]:
        h, w = as_size("size", self.size)
        if h > size[0] or w > size[1]:
            raise ValueError(f"CenterCrop({self.size}) does not fit in an input of size {size} (height, width)")
        return int(round((size[0] - h) / 2.0)), int(round((size[1] - w) / 2.0)), h, w

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        top, left, _, _ = self.static_crop(size)
        return constant_matrix([[1.0, 0.0, float(left)], [0.0, 1.0, float(top)]], device)


@dataclass(frozen=True)
class Resize(GeometricOp):
    """torchvision ``Resize`` without antialiasing.

    Args:
        size: an int resizes the shorter side to it (keeping the aspect
            ratio, longer side truncated like torchvision); ``(height, width)``
            resizes to exactly that.
    """

    size: int | tuple[int, int]
    whole_canvas: ClassVar[bool] = True

    def __post_init__(self) -> None:
        as_size("size", self.size)

    def output_size(self, size: Size) -> Size:
        if not isinstance(self.size, int):
            return as_size("size", self.size)
        h, w = size
        if h <= w:
            return self.size, int(self.size * w / h)
        return int(self.size * h / w), self.size

    def static_crop(self, size: Size) -> tuple[int, int, int, int] | None:
        out = self.output_size(size)
        return (0, 0, *out) if out == size else None

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        sy, sx = size[0] / out_size[0], size[1] / out_size[1]
        return constant_matrix([[sx, 0.0, 0.5 * sx - 0.5], [0.0, sy, 0.5 * sy - 0.5]], device)


@dataclass(frozen=True)
class _RandomFlip(GeometricOp):
    """Mirror with probability ``p``; subclasses choose the axis."""

    p: float = 0.5
    horizontal: ClassVar[bool] = True
    whole_canvas: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_prob("p", self.p)

    def num_uniforms(self) -> int:
        return 1

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        return {"flip": P.bernoulli(u[:, 0], self.p)}

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        return flip_matrix(params["flip"], size, horizontal=self.horizontal)


@dataclass(frozen=True)
class HorizontalFlip(_RandomFlip):
    """torchvision ``RandomHorizontalFlip``: mirror left-right with probability ``p``."""

    horizontal: ClassVar[bool] = True


@dataclass(frozen=True)
class VerticalFlip(_RandomFlip):
    """torchvision ``RandomVerticalFlip``: mirror top-bottom with probability ``p``."""

    horizontal: ClassVar[bool] = False


@dataclass(frozen=True)
class RandomRotation(GeometricOp):
    """torchvision ``RandomRotation`` (``expand=False``, rotation about the centre).

    Args:
        degrees: ``d`` for an angle uniform in ``[-d, d]``, or ``(low, high)``;
            counter-clockwise, in degrees.
        fill: value for pixels that come from outside the input, in input
            units (0-255); one number or one per channel.
    """

    degrees: float | tuple[float, float]
    fill: float | tuple[float, float, float] = 0.0

    def __post_init__(self) -> None:
        as_range("degrees", self.degrees)
        as_fill(self.fill)

    def num_uniforms(self) -> int:
        return 1

    def fill_value(self) -> tuple[float, float, float]:
        return as_fill(self.fill)

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        lo, hi = as_range("degrees", self.degrees)
        return {"angle": P.uniform(u[:, 0], lo, hi)}

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        return rotation_matrix(params["angle"], size)


@dataclass(frozen=True)
class RandomAffine(GeometricOp):
    """torchvision ``RandomAffine``.

    Args:
        degrees: rotation angle range like :class:`RandomRotation`, but
            clockwise as in torchvision's ``F.affine``.
        translate: ``(a, b)``: horizontal shift uniform in ``[-a*W, a*W]`` and
            vertical in ``[-b*H, b*H]``, rounded to whole pixels; ``None``: none.
        scale: ``(low, high)`` zoom factor range; ``None``: 1.
        shear: ``s`` (x-shear in ``[-s, s]``), ``(low, high)`` (x-shear), or
            ``(xlow, xhigh, ylow, yhigh)``, in degrees; ``None``: none.
        fill: value for pixels from outside the input (0-255 units).
    """

    degrees: float | tuple[float, float] = 0.0
    translate: tuple[float, float] | None = None
    scale: tuple[float, float] | None = None
    shear: float | tuple[float, ...] | None = None
    fill: float | tuple[float, float, float] = 0.0
    _shear: tuple[float, float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_range("degrees", self.degrees)
        if self.translate is not None and (
            len(self.translate) != 2 or not all(0.0 <= t <= 1.0 for t in self.translate)
        ):
            raise ValueError(f"translate must be None or two fractions in [0, 1], got {self.translate}")
        if self.scale is not None:
            lo, _ = as_range("scale", self.scale)
            if lo <= 0:
                raise ValueError(f"scale must be positive, got {self.scale}")
        shear = (0.0, 0.0, 0.0, 0.0)
        if self.shear is not None:
            if isinstance(self.shear, (int, float)) or len(self.shear) == 2:
                shear = (*as_range("shear", self.shear), 0.0, 0.0)
            elif len(self.shear) == 4:
                shear = (*as_range("shear", self.shear[:2]), *as_range("shear", self.shear[2:]))
            else:
                raise ValueError(f"shear must be a number or 2 or 4 numbers, got {self.shear!r}")
        object.__setattr__(self, "_shear", shear)
        as_fill(self.fill)

    def num_uniforms(self) -> int:
        return 6

    def fill_value(self) -> tuple[float, float, float]:
        return as_fill(self.fill)

    def sample(self, u: Tensor, size: Size, generator: torch.Generator) -> Params:
        h, w = size
        lo, hi = as_range("degrees", self.degrees)
        tx_max, ty_max = (self.translate[0] * w, self.translate[1] * h) if self.translate else (0.0, 0.0)
        s_lo, s_hi = self.scale if self.scale else (1.0, 1.0)
        sh = self._shear
        return {
            "angle": P.uniform(u[:, 0], lo, hi),
            "translate_x": torch.round(P.uniform(u[:, 1], -tx_max, tx_max)),
            "translate_y": torch.round(P.uniform(u[:, 2], -ty_max, ty_max)),
            "scale": P.uniform(u[:, 3], s_lo, s_hi),
            "shear_x": P.uniform(u[:, 4], sh[0], sh[1]),
            "shear_y": P.uniform(u[:, 5], sh[2], sh[3]),
        }

    def matrix(self, params: Params, size: Size, out_size: Size, device: torch.device) -> Tensor:
        p = params
        return affine_matrix(
            p["angle"], p["translate_x"], p["translate_y"], p["scale"], p["shear_x"], p["shear_y"], size
        )
