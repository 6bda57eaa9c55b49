"""View groups and the batched application of one op list to a list of views: what :class:`ViewAugment
<shardkit.augment.views.ViewAugment>` and :class:`~shardkit.augment.GpuAugment` both use.

:func:`augment_views` runs every view of the list ``load(views=...)`` yields through one augmenter, one
parameter draw per view size: the views of one size are concatenated along the batch dimension, augmented
once and split back, which gives the same values as augmenting each view alone with its rows of the draw
(``batched=False``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from shardkit.augment.base import MixOp, Op, Params, Size


class Augmenter(Protocol):
    """What :func:`augment_views` needs of an augmenter (:class:`~shardkit.augment.GpuAugment` is one)."""

    def sample_params(self, batch_size: int, size: Size, device: torch.device | str) -> list[Params]: ...

    def step(self, images: Tensor, params: list[Params]) -> tuple[Tensor, Any]: ...


_MASK64 = (1 << 64) - 1


def derive_seed(seed: int, index: int) -> int:
    """The seed of recipe ``index``: splitmix64 of ``(seed, index)`` (63 bits), so the recipes of
    ``seed`` and ``seed + 1`` (``manual_seed(seed + epoch)``) share no stream."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


def _ops(where: str, ops: Any) -> tuple[Op, ...]:
    if isinstance(ops, Op) or not isinstance(ops, Sequence):
        raise TypeError(f"{where} must be a list of shardkit.augment ops, got {ops!r}")
    for op in ops:
        if not isinstance(op, Op):
            raise TypeError(f"{where} must be shardkit.augment ops, got {op!r}")
        if isinstance(op, MixOp):
            raise ValueError(f"{where}: {type(op).__name__} mixes labels and is not supported on views")
    return tuple(ops)


@dataclass(frozen=True)
class ViewOps:
    """``count`` consecutive views of the list and the ops they go through.

    Args:
        count: how many views of the list this group covers (>= 1), e.g. a ``View``'s ``count``.
        ops: the ops of every view of the group (no MixUp/CutMix).
        overrides: ``{j: ops}``: view ``j`` of the group (``0 <= j < count``) goes through these
            ops instead (DINO: ``ViewOps(2, global_1, overrides={1: global_2})``).
    """

    count: int
    ops: Sequence[Op]
    overrides: Mapping[int, Sequence[Op]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.count) is not int or self.count < 1:
            raise ValueError(f"ViewOps count must be an int >= 1, got {self.count!r}")
        object.__setattr__(self, "ops", _ops("ViewOps ops", self.ops))
        if not isinstance(self.overrides, Mapping):
            raise TypeError(f"ViewOps overrides must be a dict {{view index: ops}}, got {self.overrides!r}")
        over = {}
        for j, ops in self.overrides.items():
            if type(j) is not int or not 0 <= j < self.count:
                raise ValueError(f"ViewOps override index must be an int in [0, {self.count}), got {j!r}")
            over[j] = _ops(f"ViewOps override {j}", ops)
        object.__setattr__(self, "overrides", over)

    def recipe(self, j: int) -> tuple[Op, ...]:
        """The ops view ``j`` of the group goes through."""
        return tuple(self.overrides.get(j, self.ops))


def as_group(g: Any) -> ViewOps:
    if isinstance(g, ViewOps):
        return g
    if isinstance(g, tuple) and len(g) == 2:
        return ViewOps(g[0], g[1])
    raise TypeError(f"a view group must be a ViewOps or a (count, ops) pair, got {g!r}")


def check_views(views: Any, expected: int | None = None, where: str = "ViewAugment") -> list[Tensor]:
    """``views`` as a list of ``[B, 3, H, W]`` uint8/float tensors with one batch size and one
    device (``expected`` of them, when given); otherwise a one-line ``ValueError``."""
    if isinstance(views, Tensor) or not isinstance(views, (list, tuple)):
        raise ValueError(
            f"{where} expects the list of views of load(views=...), got {type(views).__name__}; "
            "use GpuAugment(ops) for one image tensor"
        )
    if expected is not None and len(views) != expected:
        raise ValueError(
            f"{where}: the view groups cover {expected} views but the batch has {len(views)}; "
            "make the group counts add up to the sum of the View counts"
        )
    for i, t in enumerate(views):
        if not isinstance(t, Tensor):
            raise ValueError(f"{where}: view {i} is a {type(t).__name__}, not a tensor")
        if t.ndim != 4 or t.shape[1] != 3:
            raise ValueError(f"{where}: view {i} must be [B, 3, H, W], got shape {tuple(t.shape)}")
        if t.dtype != torch.uint8 and not t.is_floating_point():
            raise ValueError(f"{where}: view {i} must be uint8 (0-255) or float (0-1), got {t.dtype}")
        if t.shape[0] != views[0].shape[0] or t.device != views[0].device:
            raise ValueError(
                f"{where}: view {i} has batch size {t.shape[0]} on {t.device}, view 0 has "
                f"{views[0].shape[0]} on {views[0].device}; all views of a batch must agree"
            )
    return list(views)


def _rows(params: list[Params], start: int, stop: int) -> list[Params]:
    return [{k: v[start:stop] for k, v in p.items()} for p in params]


def augment_views(aug: Augmenter, views: Sequence[Tensor], *, batched: bool = True) -> list[Tensor]:
    """Run every view of ``views`` through ``aug``, one parameter draw per view size (and dtype).

    The views of one size (in order of first appearance) get one draw of ``k x B`` rows: rows
    ``[j B, (j + 1) B)`` are the ``j``-th such view's. ``batched=True`` concatenates them, applies
    ``aug`` once (:meth:`~shardkit.augment.GpuAugment.step`: compiled with ``compile=True``) and splits
    the result back; ``batched=False`` applies ``aug`` to each view alone with its rows (the
    reference: the same values).
    """
    views = check_views(views, where=type(aug).__name__)
    b = views[0].shape[0] if views else 0
    buckets: dict[tuple[Size, torch.dtype], list[int]] = {}
    for i, t in enumerate(views):
        buckets.setdefault(((t.shape[2], t.shape[3]), t.dtype), []).append(i)
    out: list[Tensor | None] = [None] * len(views)
    for (size, _), idx in buckets.items():
        params = aug.sample_params(len(idx) * b, size, views[idx[0]].device)
        if batched:
            x = views[idx[0]] if len(idx) == 1 else torch.cat([views[i] for i in idx])
            y, _ = aug.step(x, params)
            for j, i in enumerate(idx):
                out[i] = y[j * b : (j + 1) * b]
        else:
            for j, i in enumerate(idx):
                out[i], _ = aug.step(views[i], _rows(params, j * b, (j + 1) * b))
    return out  # type: ignore[return-value]  # every index was filled
