"""What ``shardkit show`` draws: stored samples spread over a split or selection, or one batch as the loader
yields it (one image per sample, or every view of a multi-crop sample)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from shardkit.loader.view import View


def spread_items(url: str, n: int, storage_options: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """``n`` items of the split or selection at ``url`` at even steps from the first to the last (all of a smaller split), and
    its class names."""
    from shardkit.access import open_dataset

    ds = open_dataset(url, storage_options=storage_options)
    at: list[int] = np.unique(np.linspace(0, len(ds) - 1, min(n, len(ds))).round()).astype(int).tolist()
    return [ds[i] for i in at], ds.classes


def batch_of(
    url: str,
    n: int,
    preset: Optional[str],
    size: Optional[int],
    seed: int,
    storage_options: dict[str, Any],
    views: Optional[Sequence[View]] = None,
) -> tuple[dict[str, Any], list[str]]:
    """The first batch of ``n`` samples the loader yields for ``url`` (a split or selection) with ``preset`` and
    ``size``, or with multi-crop ``views`` (every field the dataset has that can be drawn with them, in the main
    process), and the class names."""
    from shardkit.format.snapshot import resolve
    from shardkit.loader import load
    from shardkit.loader.fields import available

    m = resolve(url, **storage_options).manifest
    drawn: tuple[str, ...] = ("image", "label", "labels", "text", "key")
    if not views:
        drawn += ("boxes", "box_labels", "keypoints", "mask")  # each view is its own crop: no targets with views
    fields = [f for f in available(m) if f in drawn]
    opts: dict[str, Any] = {"views": list(views)} if views else {"preset": preset, "size": size}
    loader = load(url, batch_size=n, seed=seed, num_workers=0, fields=fields, storage_options=storage_options, **opts)
    return next(iter(loader)), list(m.classes)


__all__ = ["batch_of", "spread_items"]
