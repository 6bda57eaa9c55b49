"""Augmentation of multi-crop views (``shardkit.load(url, views=[...])``), a pipeline per view group.

A loader given ``views`` yields a list of uint8 ``[B, 3, S_v, S_v]`` tensors, ``count`` copies per
``View``, in order. :class:`ViewAugment` splits that list into :class:`ViewOps`\\ s (consecutive
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
from typing import Any

import torch
from torch import Tensor, nn

from shardkit.augment.base import Op
from shardkit.augment.pipeline import GpuAugment
from shardkit.augment.presets import dino_groups
from shardkit.augment.viewops import ViewOps, as_group, augment_views, check_views, derive_seed


class ViewAugment(nn.Module):
    """Per-sample random augmentation of the views list, a pipeline per view group.

    Args:
        groups: :class:`ViewOps`\\ s or ``(count, ops)`` pairs, in the order of the views list;
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
        groups: Sequence[ViewOps | tuple[int, Sequence[Op]]],
        *,
        seed: int | None = None,
        batched: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if isinstance(groups, ViewOps) or not isinstance(groups, Sequence) or not groups:
            raise ValueError(f"groups must be a non-empty list of ViewOps or (count, ops), got {groups!r}")
        self.groups: tuple[ViewOps, ...] = tuple(as_group(g) for g in groups)
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
        preset = {k: kwargs.pop(k) for k in ("blur_kernel", "jitter_order") if k in kwargs}
        return cls(dino_groups(local_crops_number, **preset), **kwargs)
