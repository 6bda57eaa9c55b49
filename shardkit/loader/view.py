"""``View``: one multi-crop view group (``shardkit.load(url, views=[...])``), a validated value.

A loader given ``views`` yields ``(views, labels, ...)``: ``views`` a list of ``sum(v.count)``
uint8 ``[B, 3, v.size, v.size]`` tensors in the order given. Each sample is decoded once in the
worker, at the DCT scale its largest view needs, and every view's RandomResizedCrop (+ flip) is cut
from that one decode (:mod:`shardkit.loader.decode.multicrop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
