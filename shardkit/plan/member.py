"""A mixture's sources: specs and the checks that need no data, or only manifests."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Optional

from shardkit.errors import ShardkitError


@dataclass(frozen=True)
class Source:
    """One split of a mixture.

    Attributes:
        url: split directory, selection folder, or either's manifest URL (any storage).
        weight: share of each epoch (normalised over the weighted sources).
        repeat: passes over the source per epoch (0.5: half of it per epoch).
        choose: exactly this many samples per epoch.
        storage_options: fsspec options for this source's URL (None: the loader's).
    """

    url: str
    weight: Optional[float] = None
    repeat: Optional[float] = None
    choose: Optional[int] = None
    storage_options: Optional[dict[str, Any]] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"source url must be a non-empty string, got {self.url!r}")
        for name in ("weight", "repeat"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise ValueError(f"source {self.url!r}: {name} must be a finite number >= 0, got {v!r}")
            object.__setattr__(
                self, name, int(v) if isinstance(v, numbers.Integral) else float(v)
            )  # plain, JSON-friendly
        if self.choose is not None:
            if isinstance(self.choose, bool) or not isinstance(self.choose, numbers.Integral) or self.choose < 1:
                raise ValueError(f"source {self.url!r}: choose must be an integer >= 1, got {self.choose!r}")
            object.__setattr__(self, "choose", int(self.choose))
        if len(self.given) > 1:
            raise ValueError(
                f"source {self.url!r}: give one of weight, repeat or choose, not {' and '.join(self.given)}"
            )

    @property
    def given(self) -> tuple[str, ...]:
        """Which of ``weight``/``repeat``/``choose`` this source sets."""
        return tuple(n for n in ("weight", "repeat", "choose") if getattr(self, n) is not None)

    def spec(self) -> dict[str, Any]:
        """The ordering-relevant part, JSON-friendly (stored in state dicts)."""
        return {n: getattr(self, n) for n in ("weight", "repeat", "choose")}


def as_sources(
    sources: "str | os.PathLike[str] | Source | Sequence[str | os.PathLike[str] | Source]",
) -> tuple[Source, ...]:
    """Normalise ``load``'s first argument: a URL (or path) or :class:`Source`, or a list of them.

    Raises:
        TypeError: something else (a loaded ``Manifest`` is the loader's own lone-source case).
        ValueError: see :func:`check_specs`.
    """
    one = (str, os.PathLike, Source)
    items = [sources] if isinstance(sources, one) else list(sources)
    for s in items:
        if not isinstance(s, one):
            raise TypeError(f"a mixture's sources are URLs or shardkit.Source objects, not {type(s).__name__}")
    out = tuple(s if isinstance(s, Source) else Source(os.fspath(s)) for s in items)
    check_specs(out)
    return out


def check_specs(sources: Sequence[Source]) -> None:
    """Errors that need the whole list but no data: count, missing spec, all-zero weights, a source of several with
    ``weight=0`` or ``repeat=0`` (it would take no samples, yet count toward the epoch size and add its classes)."""
    if not sources:
        raise ValueError("a mixture needs at least one source")
    if len(sources) > 1:
        for i, s in enumerate(sources):
            if not s.given:
                raise ValueError(
                    f"source {i} ({s.url!r}): give one of weight=, repeat= or choose= (only a lone source may omit them)"
                )
    weights = [s.weight for s in sources if s.weight is not None]
    if weights and not any(weights):
        raise ValueError("all weights are 0: give at least one source a positive weight")
    if any(s.given for s in sources) and not any(s.weight or s.repeat or s.choose for s in sources):
        raise ValueError("every source's weight or repeat is 0: the epoch would be empty")
    for i, s in enumerate(sources):
        zero = next((n for n in ("weight", "repeat") if getattr(s, n) == 0), None)
        if zero is not None and len(sources) > 1:
            raise ValueError(
                f"source {i} ({s.url!r}): {zero}=0 takes no samples, yet it would count toward the default epoch size "
                "and add its classes; leave it out of the list (a later mixture without it continues the others' streams)"
            )


@dataclass(frozen=True)
class SourceData:
    """What validation needs from a source's manifest (testable without files).

    Attributes:
        url: where it was loaded from (for messages).
        identity: what makes two splits the same (e.g. the shards' checksums).
        num_samples: samples in the split.
        image: conversion options that fix the stored image size (``short_side``, ``max_side``).
    """

    url: str
    identity: str
    num_samples: int
    image: tuple[tuple[str, Any], ...] = ()


def check_data(sources: Sequence[Source], data: Sequence[SourceData]) -> None:
    """Errors that need the manifests: empty source, the same split twice, different image sizes."""
    for i, d in enumerate(data):
        if d.num_samples == 0:
            raise ShardkitError(f"source {i} ({d.url}) has no samples; convert it again or leave it out of the mixture")
    seen: dict[str, int] = {}
    for i, d in enumerate(data):
        if d.identity in seen:
            j = seen[d.identity]
            raise ShardkitError(
                f"sources {j} ({data[j].url}) and {i} ({d.url}) are the same split; list it once (use repeat= to oversample it)"
            )
        seen[d.identity] = i
    for i, d in enumerate(data[1:], 1):
        if dict(d.image) != dict(data[0].image):
            raise ShardkitError(
                f"source {i} ({d.url}) was converted with image options {dict(d.image)}, source 0 ({data[0].url}) with "
                f"{dict(data[0].image)}; convert both with the same --short-side/--max-side"
            )


def exact(v: "float | int") -> Fraction:
    """A spec value as the decimal it prints as (0.3 is 3/10, not the nearest binary fraction)."""
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)
