"""Augmentation of multi-crop views (``shardkit.load(url, views=[...])``), a pipeline per view group.

A loader given ``views`` yields a list of uint8 ``[B, 3, S_v, S_v]`` tensors, ``count`` copies per
``View``, in order. :class:`ViewAugment` splits that list into :class:`ViewGroup`\\ s (consecutive
runs of ``count`` views each) and runs each view through its group's ops, or through the ops of a
per-view override (DINO's second global view blurs less and solarizes).

How it runs: every distinct op list (a *recipe*) is one :class:`~shardkit.augment.GpuAugment`
with its own generator (seeded from the base seed and the recipe's index, so adding a local group
never changes the global views' draws). Per batch, each recipe concatenates its views of one size
along the batch dimension, draws the parameters of all ``k x B`` rows at once (every view of every
sample has its own), applies the ops once and splits the result back: the same values as applying
the ops to each view alone with its rows of the draw (:func:`augment_views` with ``batched=False``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from shardkit.augment.base import MixOp, Op, Params, Size
from shardkit.augment.pipeline import GpuAugment

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
class ViewGroup:
    """``count`` consecutive views of the list and the ops they go through.

    Args:
        count: how many views of the list this group covers (>= 1), e.g. a ``View``'s ``count``.
        ops: the ops of every view of the group (no MixUp/CutMix).
        overrides: ``{j: ops}``: view ``j`` of the group (``0 <= j < count``) goes through these
            ops instead (DINO: ``ViewGroup(2, global_1, overrides={1: global_2})``).
    """

    count: int
    ops: Sequence[Op]
    overrides: Mapping[int, Sequence[Op]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.count) is not int or self.count < 1:
            raise ValueError(f"ViewGroup count must be an int >= 1, got {self.count!r}")
        object.__setattr__(self, "ops", _ops("ViewGroup ops", self.ops))
        if not isinstance(self.overrides, Mapping):
            raise TypeError(f"ViewGroup overrides must be a dict {{view index: ops}}, got {self.overrides!r}")
        over = {}
        for j, ops in self.overrides.items():
            if type(j) is not int or not 0 <= j < self.count:
                raise ValueError(f"ViewGroup override index must be an int in [0, {self.count}), got {j!r}")
            over[j] = _ops(f"ViewGroup override {j}", ops)
        object.__setattr__(self, "overrides", over)

    def recipe(self, j: int) -> tuple[Op, ...]:
        """The ops view ``j`` of the group goes through."""
        return tuple(self.overrides.get(j, self.ops))


def _group(g: Any) -> ViewGroup:
    if isinstance(g, ViewGroup):
        return g
    if isinstance(g, tuple) and len(g) == 2:
        return ViewGroup(g[0], g[1])
    raise TypeError(f"a view group must be a ViewGroup or a (count, ops) pair, got {g!r}")


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


def augment_views(aug: GpuAugment, views: Sequence[Tensor], *, batched: bool = True) -> list[Tensor]:
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


class ViewAugment(nn.Module):
    """Per-sample random augmentation of the views list, a pipeline per view group.

    Args:
        groups: :class:`ViewGroup`\\ s or ``(count, ops)`` pairs, in the order of the views list;
            their counts add up to its length (e.g. ``[(2, global_ops), (8, local_ops)]`` for
            ``views=[View(224, count=2), View(96, count=8)]``).
        seed: base seed; recipe ``r`` (the ``r``-th distinct op list, in order) seeds its generators
            with :func:`derive_seed` ``(seed, r)``. ``None`` draws one from torch's global generator.
        batched: ``True``: the views of one recipe and size run as one concatenated batch (faster);
            ``False``: one view at a time (same values).
        **kwargs: the other :class:`~shardkit.augment.GpuAugment` options (``output_dtype``,
            ``memory_format``, ``compute_dtype``, ``clip_intermediate``, ``compile``), for every group.

    Call with the list of views (``uint8 [B, 3, H, W]`` each); returns the list of augmented views
    in the same order (``(views, labels)`` when labels are given: they pass through unchanged).
    """

    def __init__(
        self,
        groups: Sequence[ViewGroup | tuple[int, Sequence[Op]]],
        *,
        seed: int | None = None,
        batched: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(groups, ViewGroup) or not isinstance(groups, Sequence) or not groups:
            raise ValueError(f"groups must be a non-empty list of ViewGroup or (count, ops), got {groups!r}")
        self.groups: tuple[ViewGroup, ...] = tuple(_group(g) for g in groups)
        self.seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else int(seed)
        self.batched = bool(batched)
        recipes: list[tuple[Op, ...]] = []
        members: list[list[int]] = []
        start = 0  # the group's first view in the list
        for g in self.groups:
            for j in range(g.count):
                r = g.recipe(j)
                if r not in recipes:
                    recipes.append(r)
                    members.append([])
                members[recipes.index(r)].append(start + j)
            start += g.count
        self.num_views = start
        self.pipelines = nn.ModuleList(
            GpuAugment(r, seed=derive_seed(self.seed, k), **kwargs) for k, r in enumerate(recipes)
        )
        self.members: tuple[tuple[int, ...], ...] = tuple(tuple(m) for m in members)

    #: views never mix labels (the prefetcher calls ``transform(views)``)
    needs_labels = False

    def manual_seed(self, seed: int) -> None:
        """Reseed every recipe (e.g. ``aug.manual_seed(seed + epoch)``): the next batches repeat what
        a new ``ViewAugment`` with ``seed`` gives."""
        self.seed = int(seed)
        for k, p in enumerate(self.pipelines):
            assert isinstance(p, GpuAugment)
            p.manual_seed(derive_seed(self.seed, k))

    def recipe_of(self, view: int) -> GpuAugment:
        """The pipeline view ``view`` of the list goes through."""
        for k, m in enumerate(self.members):
            if view in m:
                return self.pipelines[k]  # type: ignore[return-value]
        raise IndexError(f"view {view} is outside the {self.num_views} views of the groups")

    def forward(self, views: Sequence[Tensor], labels: Tensor | None = None, *, targets: Any = None) -> Any:
        """Augment the views; returns the list (or ``(list, labels)`` when labels are given).

        Views carry no targets: ``targets=`` or a dict batch is a one-line error."""
        if targets is not None or isinstance(views, Mapping):
            raise ValueError(
                "ViewAugment does not move boxes, masks or keypoints: augment a detection batch with GpuAugment"
            )
        views = check_views(views, self.num_views)
        out: list[Tensor | None] = [None] * self.num_views
        for pipe, idx in zip(self.pipelines, self.members):
            assert isinstance(pipe, GpuAugment)
            for i, y in zip(idx, augment_views(pipe, [views[i] for i in idx], batched=self.batched)):
                out[i] = y
        return out if labels is None else (out, labels)

    def extra_repr(self) -> str:
        return f"groups={[g.count for g in self.groups]}, members={self.members}, seed={self.seed}"

    @classmethod
    def dino(cls, local_crops_number: int = 8, **kwargs: Any) -> ViewAugment:
        """DINO's colour recipes for ``views=[View(224, (0.4, 1), count=2), View(96, (0.05, 0.4),
        count=local_crops_number)]`` (:func:`~shardkit.augment.presets.dino_groups`); ``kwargs`` go
        to :func:`~shardkit.augment.presets.dino_groups` (``blur_kernel``, ``jitter_order``) or the
        constructor."""
        from shardkit.augment.presets import dino_groups

        preset = {k: kwargs.pop(k) for k in ("blur_kernel", "jitter_order") if k in kwargs}
        return cls(dino_groups(local_crops_number, **preset), **kwargs)
