"""``--val-fraction``: a validation split carved out of a one-split source.

:func:`carve_val` moves exactly ``F x n`` rounded half up (:func:`val_count`) of each class's ``n`` items, chosen by
a shuffle seeded with ``(seed, class name)``, so the same items whatever the workers, tasks or process (no
per-process hash)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

from shardkit.convert.scan.source import ScannedSource, SourceFile, SplitSource


def val_count(fraction: float, n: int) -> int:
    """How many of a class's ``n`` items go to the validation split: ``fraction x n`` rounded half up, with
    ``fraction`` taken as the decimal it is written as (``0.15 x 10 = 1.5 -> 2``, ``0.5 x 5 = 2.5 -> 3``)."""
    exact = Fraction(repr(float(fraction))) * n
    return math.floor(exact + Fraction(1, 2))


def _stratum(f: SourceFile) -> tuple[int, ...]:
    """The class an item is stratified by in :func:`carve_val`: its label or labels; for a detection item
    (no label), the class of its first box (none for an item without boxes)."""
    classes = f.class_indices()
    if not classes and f.label is None and f.labels is None and f.objects is not None and len(f.objects):
        return (int(f.objects.labels[0]),)
    return classes


def carve_val(source: ScannedSource, fraction: float, seed: int, val_name: str = "val") -> None:
    """Move :func:`val_count` ``(fraction, n)`` of each class's ``n`` items of the only split into a new split ``val_name``.

    Either split may end up with no files (e.g. every class has one item); it is still returned (see
    :class:`ScannedSource`): the conversion reports an empty split rather than losing it. A detection item is
    stratified by its first box's class (:func:`_stratum`); the val items' objects are counted ``kept`` in the
    val split's ``annotations`` and leave the source split's counts (its skipped annotations stay there). Both
    splits end as a scanned split does (:meth:`SplitSource.close`).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--val-fraction must be between 0 and 1 (exclusive), not {fraction}")
    if len(source.splits) != 1:
        names = ", ".join(s.name for s in source.splits)
        raise ValueError(f"--val-fraction needs a source with one split; this one has {names}")
    train = source.splits[0]
    if train.name == val_name:
        raise ValueError(f"--val-fraction: the source's split is already called {val_name!r}")
    by_class: dict[tuple[int, ...], list[SourceFile]] = {}  # a multi-label item's class is its set of classes
    for f in sorted(train.files, key=lambda f: f.relpath):
        by_class.setdefault(_stratum(f), []).append(f)
    val: set[str] = set()
    for label, files in sorted(by_class.items()):
        picked = list(files)
        random.Random(f"{seed}:val:{'+'.join(source.classes[c] for c in label)}").shuffle(
            picked
        )  # a str seed is hashed with SHA-512: no PYTHONHASHSEED
        val.update(f.relpath for f in picked[: val_count(fraction, len(files))])
    v = SplitSource(val_name, train.directory, [f for f in train.files if f.relpath in val])
    train.files = [f for f in train.files if f.relpath not in val]
    if train.annotations:  # the val items' stored objects go with them (as kept); the rest stays with train
        moved = sum(len(f.objects) for f in v.files if f.objects is not None)
        take = min(moved, train.annotations.get("kept", 0))
        train.annotations["kept"] = train.annotations.get("kept", 0) - take
        if moved > take:
            train.annotations["clipped"] = train.annotations.get("clipped", 0) - (moved - take)
        v.annotations = {"kept": moved}
    for s in (train, v):
        s.close(source.classes)
    source.splits = sorted([train, v], key=lambda s: s.name)
    source.nested = True
