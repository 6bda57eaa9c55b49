"""``View``: one multi-crop view group (``shardkit.load(url, views=[...])``), a validated value.

A loader given ``views`` yields ``(views, labels, ...)``: ``views`` a list of ``sum(v.count)``
uint8 ``[B, 3, v.size, v.size]`` tensors in the order given. Each sample is decoded once in the
worker, at the DCT scale its largest view needs, and every view's RandomResizedCrop (+ flip) is cut
from that one decode (:mod:`shardkit.loader.decode.multicrop`).

Progressive resolution (``loader.set_epoch(epoch, size=S)``): :func:`scaled_views` scales every group
by ``S / views[0].size`` (the first group is the reference), each size rounded to the nearest int
(halves up), at least 1; scale, ratio, flip and count stay, so the crops do too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any


def _pair(name: str, value: Any, low: float, high: float) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in value)
    except (TypeError, ValueError):
        raise ValueError(f"View {name} must be a pair of numbers (lo, hi), got {value!r}") from None
    if not (low < a <= b <= high):
        raise ValueError(f"View {name} must satisfy {low:g} < lo <= hi <= {high:g}, got {value!r}")
    return a, b


@dataclass(frozen=True)
class View:
    """One group of views: ``count`` RandomResizedCrops of ``size`` x ``size`` per sample.

    Args:
        size: output height and width (square), >= 1.
        scale: RandomResizedCrop area range, ``0 < lo <= hi <= 1``.
        ratio: RandomResizedCrop aspect-ratio range, ``0 < lo <= hi``.
        flip: a horizontal flip with p=0.5 (drawn per view).
        count: how many views of this group each sample gets, >= 1.
    """

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    count: int = 1

    def __post_init__(self) -> None:
        for name in ("size", "count"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise ValueError(f"View {name} must be an int >= 1, got {v!r}")
        object.__setattr__(self, "scale", _pair("scale", self.scale, 0.0, 1.0))
        object.__setattr__(self, "ratio", _pair("ratio", self.ratio, 0.0, float("inf")))
        if not isinstance(self.flip, bool):
            raise ValueError(f"View flip must be True or False, got {self.flip!r}")


def parse_views(views: Any) -> tuple[View, ...]:
    """``views`` as a tuple of :class:`View` (a list or tuple of them, at least one)."""
    if isinstance(views, View):
        views = (views,)
    if not isinstance(views, Sequence) or isinstance(views, str) or not views:
        raise ValueError(f"views must be a non-empty list of shardkit.View, got {views!r}")
    bad = [v for v in views if not isinstance(v, View)]
    if bad:
        raise ValueError(f"views must be shardkit.View objects, got {bad[0]!r}")
    return tuple(views)


def expanded(views: Sequence[View]) -> list[View]:
    """One entry per output tensor: each group repeated ``count`` times, in order."""
    return [v for v in views for _ in range(v.count)]


def sample_bytes(views: Sequence[View]) -> int:
    """Bytes of one sample's views (uint8, 3 channels)."""
    return sum(3 * v.size**2 * v.count for v in views)


def scaled_size(size: int, new_ref: int, ref: int) -> int:
    """``size * new_ref / ref`` rounded to the nearest int (halves up, exact integer arithmetic), at least 1."""
    return max(1, (2 * size * new_ref + ref) // (2 * ref))


def scaled_views(views: Sequence[View], size: int) -> tuple[View, ...]:
    """``views`` at reference size ``size``: the first group gets ``size``, every group ``v.size`` is scaled by
    ``size / views[0].size`` (:func:`scaled_size`); scale, ratio, flip and count unchanged (0: unchanged)."""
    views = tuple(views)
    if size == 0 or not views or size == views[0].size:
        return views
    if type(size) is not int or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")
    ref = views[0].size
    return tuple(replace(v, size=scaled_size(v.size, size, ref)) for v in views)


def describe_views(views: Sequence[View]) -> str:
    """``"2x224 + 8x96"``: each group's count x size, in order."""
    return " + ".join(f"{v.count}x{v.size}" for v in views)
