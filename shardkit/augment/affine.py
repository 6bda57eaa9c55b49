"""Per-sample inverse affine maps and the fused sampling pass.

Coordinates are pixel coordinates with pixel centres at integers
(``0 .. W-1``). Every geometric op gives a ``[B, 3, 3]`` matrix mapping an
output pixel to the point of its input it samples (an *inverse* map, as
``grid_sample`` needs). A chain of ops applied one after another is the product
of their matrices, so :func:`warp` resamples once, with one sampling grid and
one ``grid_sample``, however many ops the chain has.

The matrices follow torchvision's conventions exactly: rotation about the
centre ``((W-1)/2, (H-1)/2)``, counter-clockwise for :func:`rotation_matrix`
(``F.rotate``) and clockwise for :func:`affine_matrix` (``F.affine``), and
``F.resized_crop``'s half-pixel-centred scaling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from shardkit.augment.base import const

Size = tuple[int, int]


def _stack(rows: list[list[Tensor | float]], like: Tensor) -> Tensor:
    """``[B, 3, 3]`` from 2 rows of 3 entries (tensors ``[B]`` or floats); last row ``0 0 1``."""
    b = like.shape[0]
    entries = []
    for row in rows:
        for v in row:
            entries.append(
                v if isinstance(v, Tensor) else torch.full((b,), float(v), dtype=like.dtype, device=like.device)
            )
    entries += [torch.zeros_like(like), torch.zeros_like(like), torch.ones_like(like)]
    return torch.stack(entries, dim=1).view(b, 3, 3)


def constant_matrix(rows: list[list[float]], device: torch.device) -> Tensor:
    """``[1, 3, 3]`` float32 matrix from two rows (cached; do not modify)."""
    return const([*rows[0], *rows[1], 0.0, 0.0, 1.0], (1, 3, 3), device)


def resized_crop_matrix(top: Tensor, left: Tensor, height: Tensor, width: Tensor, out_size: Size) -> Tensor:
    """Crop box ``(top, left, height, width)`` resized to ``out_size`` (``F.resized_crop``)."""
    oh, ow = out_size
    sx = width / ow
    sy = height / oh
    return _stack([[sx, 0.0, left + 0.5 * sx - 0.5], [0.0, sy, top + 0.5 * sy - 0.5]], like=sx)


def flip_matrix(flip: Tensor, size: Size, *, horizontal: bool) -> Tensor:
    """Mirror the samples where ``flip`` is true (``F.horizontal_flip`` / ``F.vertical_flip``)."""
    f = flip.to(torch.float32)
    a = 1.0 - 2.0 * f
    if horizontal:
        return _stack([[a, 0.0, f * (size[1] - 1)], [0.0, 1.0, 0.0]], like=a)
    return _stack([[1.0, 0.0, 0.0], [0.0, a, f * (size[0] - 1)]], like=a)


def affine_matrix(
    angle: Tensor, translate_x: Tensor, translate_y: Tensor, scale: Tensor, shear_x: Tensor, shear_y: Tensor, size: Size
) -> Tensor:
    """torchvision ``F.affine`` (angle clockwise, degrees; shear in degrees;
    translation in pixels), about the image centre, as an inverse map."""
    rot = torch.deg2rad(angle)
    sx = torch.deg2rad(shear_x)
    sy = torch.deg2rad(shear_y)
    cos_sy = torch.cos(sy)
    tan_sx = torch.tan(sx)
    a = torch.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c = torch.sin(rot - sy) / cos_sy
    d = torch.cos(rot) - c * tan_sx
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    m2 = -(m0 * translate_x + m1 * translate_y)
    m5 = -(m3 * translate_x + m4 * translate_y)
    # from centre-relative to absolute pixel coordinates
    cy, cx = (size[0] - 1) * 0.5, (size[1] - 1) * 0.5
    return _stack([[m0, m1, m2 + cx - m0 * cx - m1 * cy], [m3, m4, m5 + cy - m3 * cx - m4 * cy]], like=m0)


def rotation_matrix(angle: Tensor, size: Size) -> Tensor:
    """torchvision ``F.rotate`` (counter-clockwise, degrees, about the centre)."""
    zero = torch.zeros_like(angle)
    return affine_matrix(-angle, zero, zero, torch.ones_like(angle), zero, zero, size)


def compose(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for ``[..., 3, 3]`` matrices as elementwise products and sums, not a matmul: float32
    matmuls follow the global precision (``torch.set_float32_matmul_precision("high")`` rounds them
    to TF32 on a GPU, a sampling grid off by up to a pixel); elementwise maths never is."""
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


def chain(matrices: list[Tensor], device: torch.device) -> list[Tensor]:
    """The maps from the output canvas of a chain of inverse maps to each canvas ``k`` (suffix products,
    ``len(matrices) + 1`` of them, the identity last): entry 0 is the whole chain's inverse map, the one
    map :func:`warp` samples the input through (and the one the chain's targets move by)."""
    to_canvas: list[Tensor] = [constant_matrix([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], device)] * (len(matrices) + 1)
    for k in range(len(matrices) - 1, -1, -1):
        to_canvas[k] = compose(matrices[k], to_canvas[k + 1])
    return to_canvas


def _to_normalized(size: Size, device: torch.device) -> Tensor:
    """Pixel coordinates -> ``grid_sample`` coordinates (``align_corners=False``)."""
    h, w = size
    return constant_matrix([[2.0 / w, 0.0, 1.0 / w - 1.0], [0.0, 2.0 / h, 1.0 / h - 1.0]], device)


def _from_normalized(size: Size, device: torch.device) -> Tensor:
    """``grid_sample`` coordinates -> pixel coordinates."""
    h, w = size
    return constant_matrix([[w / 2.0, 0.0, w / 2.0 - 0.5], [0.0, h / 2.0, h / 2.0 - 0.5]], device)


@dataclass(frozen=True)
class FillStage:
    """Points outside canvas ``canvas`` (0 = the input) get ``fill`` (0-255 units)."""

    canvas: int
    fill: tuple[float, float, float]


def _grid(theta: Tensor, out_size: Size) -> tuple[Tensor, Tensor]:
    """``F.affine_grid`` (``align_corners=False``) as two ``[B, H, W]`` coordinate
    planes, by broadcasting (no materialised base grid, no batched GEMM with K=3)."""
    b = theta.shape[0]
    h, w = out_size
    xs = const([(2 * i + 1) / w - 1 for i in range(w)], (1, 1, w), theta.device)
    ys = const([(2 * i + 1) / h - 1 for i in range(h)], (1, h, 1), theta.device)
    t = theta.reshape(b, 9, 1, 1)
    gx = torch.addcmul(t[:, 2] + t[:, 1] * ys, t[:, 0], xs)
    gy = torch.addcmul(t[:, 5] + t[:, 4] * ys, t[:, 3], xs)
    return gx, gy


def _edge_mask(gx: Tensor, gy: Tensor, size: Size) -> Tensor:
    """``[B, 1, H, W]`` weight of the inside of a canvas of ``size`` at normalised
    points ``(gx, gy)``, equal to bilinear sampling of an all-ones image with
    zero padding: 1 inside, a one-pixel linear ramp at the border, 0 outside."""
    h, w = size
    # 0.5 + 0.5 * size * (1 - |g|), one fused multiply-add per axis
    mx = torch.add(const([0.5 * w + 0.5], (1,), gx.device), gx.abs(), alpha=-0.5 * w).clamp_(0.0, 1.0)
    my = torch.add(const([0.5 * h + 0.5], (1,), gy.device), gy.abs(), alpha=-0.5 * h).clamp_(0.0, 1.0)
    return mx.mul_(my).unsqueeze(1)


def warp(
    x: Tensor,
    matrices: list[Tensor],
    sizes: list[Size],
    fills: list[FillStage],
    *,
    scale: float = 1.0,
    out_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Resample ``x`` once through a chain of inverse maps.

    Args:
        x: ``[B, C, H, W]`` float images (any strides); ``sizes[0] == (H, W)``.
        matrices: one ``[B or 1, 3, 3]`` map per op; op ``k`` maps canvas
            ``k + 1`` (its output, size ``sizes[k + 1]``) to canvas ``k``.
        sizes: ``len(matrices) + 1`` canvas sizes, input first, output last.
        fills: canvases whose outside is filled, in order from the input
            outwards. Points inside every listed canvas sample ``x``
            bilinearly (border-clamped, as ``F.resize`` does at the edges).
        scale: multiplies the sampled values (e.g. ``1/255``); fills are
            divided by 255 and not scaled.
        out_dtype: dtype of the result; sampling itself is float32 (grid
            coordinates need it).

    Returns:
        ``[B, C, *sizes[-1]]`` images of ``out_dtype``.
    """
    b = x.shape[0]
    out_size = sizes[-1]
    x = x.to(torch.float32)
    device = x.device
    to_canvas = chain(matrices, device)
    denorm = _from_normalized(out_size, device)
    thetas = {
        k: compose(_to_normalized(sizes[k], device), compose(to_canvas[k], denorm)).expand(b, 3, 3)
        for k in {0, *(f.canvas for f in fills)}
    }
    gx, gy = _grid(thetas[0], out_size)
    out = F.grid_sample(x, torch.stack([gx, gy], dim=-1), mode="bilinear", padding_mode="border", align_corners=False)
    if not fills:
        if scale != 1.0:
            out = out.mul_(scale)
        return out.to(out_dtype)
    # group consecutive stages with the same fill: their masks multiply
    groups: list[tuple[tuple[float, float, float], Tensor]] = []
    for f in fills:
        m = _edge_mask(*((gx, gy) if f.canvas == 0 else _grid(thetas[f.canvas], out_size)), sizes[f.canvas])
        if groups and groups[-1][0] == f.fill:
            groups[-1] = (f.fill, groups[-1][1].mul_(m))
        else:
            groups.append((f.fill, m))
    for i, (fill, m) in enumerate(groups):
        if i == 0:
            out = out.mul_(m * scale)
        else:
            out = out.mul_(m)
        if any(fill):
            fill_t = const([f / 255.0 for f in fill], (1, 3, 1, 1), device)
            out = out.add_((1.0 - m) * fill_t)
    return out.to(out_dtype)
