"""Resuming a state saved with one mixture: refuse another mixture, or (``allow_remix``) switch at the next epoch.

:class:`Schedule` is the outcome, one immutable value: which mixture plans each epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.plan.member import Source
from shardkit.plan.mixture import Mixture
from shardkit.plan.stream import sizes_fingerprint


@dataclass(frozen=True, eq=False)
class Schedule:
    """Which mixture plans each epoch: ``mixture``, except the epoch a remixed state finishes with the saved one.

    Attributes:
        mixture: plans every epoch (after a remix: from the switch on).
        finishing: ``(epoch, mixture)``: that epoch is finished with the saved mixture (None: no switch pending).
    """

    mixture: Mixture
    finishing: Optional[tuple[int, Mixture]] = None

    @classmethod
    def switching(cls, now: Mixture, later: Mixture, epoch: int) -> "Schedule":
        """``epoch`` planned with ``now``, the epochs after it with ``later`` (:func:`resume_mixtures`' pair)."""
        return cls(later, None if now is later else (epoch, now))

    def mixture_for(self, epoch: int) -> Mixture:
        """The mixture that plans ``epoch``."""
        if self.finishing is not None and self.finishing[0] == epoch:
            return self.finishing[1]
        return self.mixture

    def plans_like(self, other: "Schedule", epoch: int) -> bool:
        """Whether ``other`` plans ``epoch`` and the epochs after it with the same mixtures (by :meth:`Mixture.describe`)."""
        return [m.describe() for m in (self.mixture, self.mixture_for(epoch))] == [
            m.describe() for m in (other.mixture, other.mixture_for(epoch))
        ]


def mixture_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two :meth:`Mixture.describe` values, one phrase each (empty: the same)."""
    out = []
    if saved.get("epoch_size") != current.get("epoch_size"):
        out.append(f"epoch_size {saved.get('epoch_size')} -> {current.get('epoch_size')}")
    a, b = saved.get("sources", []), current.get("sources", [])
    if len(a) != len(b):
        out.append(f"{len(a)} sources -> {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.get("fingerprint") != y.get("fingerprint"):
            out.append(f"source {i}: other data (shard sizes differ)")
        for k in ("weight", "repeat", "choose"):
            if x.get(k) != y.get(k):
                out.append(f"source {i}: {k} {x.get(k)} -> {y.get(k)}")
    return out


def resume_mixtures(
    saved: dict[str, Any],
    current: Mixture,
    epoch: int,
    *,
    mid_epoch: bool,
    allow_remix: bool = False,
    saved_next: Optional[dict[str, Any]] = None,
) -> tuple[Mixture, Mixture]:
    """The mixtures to plan with after loading a state saved in ``epoch`` with mixture ``saved``:
    ``(for the rest of epoch, from epoch + 1 on)``.

    The same mixture: ``current`` with the saved bookkeeping, for both. Another one (only with
    ``allow_remix``): ``mid_epoch``, the saved mixture finishes ``epoch`` (its sources are found
    among ``current``'s by their shard sizes) and ``current`` takes over at ``epoch + 1``; at an
    epoch's start, ``current`` takes over at once. Either way each source of both continues its
    stream where the saved mixture left it (no sample repeats or is skipped by the switch).
    ``saved_next``: the mixture a state saved during such a finishing epoch switches to (save
    both ``describe()`` values); when ``current`` is that one, the switch goes on without ``allow_remix``.

    Raises:
        ShardkitError: the mixtures differ without ``allow_remix`` (naming every difference), or a
            source of the saved mixture that must finish the epoch is not among ``current``'s.
    """
    pending = saved_next is not None and not mixture_diff(saved_next, current.describe())
    if not pending and not check_remix(saved, current.describe(), allow_remix=allow_remix):
        same = current.with_history(saved)
        return same, same
    old = _saved_mixture(saved, current, epoch, mid_epoch)
    if not mid_epoch:
        new = current.continue_from(old, epoch)
        return new, new
    if pending:
        return old, current.with_history(saved_next)  # type: ignore[arg-type]
    return old, current.continue_from(old, epoch + 1)


def _saved_mixture(saved: dict[str, Any], current: Mixture, epoch: int, mid_epoch: bool) -> Mixture:
    """The mixture ``saved`` describes, its sources found among ``current``'s by their shard sizes."""
    by_fp = {sizes_fingerprint(s): (src, s) for src, s in zip(current.sources, current.shard_sizes)}
    srcs, sizes = [], []  # type: list[Source], list[np.ndarray]
    for i, d in enumerate(saved["sources"]):
        src, s = by_fp.get(d["fingerprint"], (None, None))
        if src is None and mid_epoch:
            raise ShardkitError(
                f"saved mixture's source {i} is not among the current sources, so epoch {epoch} cannot finish as saved; "
                f"add it back, or start the new mixture now with set_epoch({epoch + 1})"
            )
        # a source that is gone only counts (its size shares out the weighted seats): one placeholder shard
        srcs.append(
            Source(
                src.url if src else f"<saved source {i}>",
                weight=d.get("weight"),
                repeat=d.get("repeat"),
                choose=d.get("choose"),
                storage_options=src.storage_options if src else None,
            )
        )
        sizes.append(s if s is not None else np.array([int(d["samples"])], np.int64))
    return Mixture(tuple(srcs), tuple(sizes), saved.get("epoch_size")).with_history(saved)


def check_remix(saved: dict[str, Any], current: dict[str, Any], *, allow_remix: bool = False) -> bool:
    """Whether a state saved with mixture ``saved`` may resume with ``current``; True when they differ.

    Raises:
        ShardkitError: they differ and ``allow_remix`` is False (the message lists every difference).
    """
    diff = mixture_diff(saved, current)
    if diff and not allow_remix:
        raise ShardkitError(
            f"loader state was saved with another mixture ({'; '.join(diff)}); resume with the same sources, "
            "or pass allow_remix=True to finish this epoch as saved and switch at the next epoch"
        )
    return bool(diff)
