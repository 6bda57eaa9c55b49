"""What ``shardkit show`` draws: stored samples spread over a split, or one batch as the loader yields it."""

from __future__ import annotations

from typing import Any

import numpy as np


def spread_items(url: str, n: int, storage_options: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """``n`` items of the split at ``url`` at even steps from the first to the last (all of a smaller split), and
    its class names."""
    from shardkit.access import open_dataset

    ds = open_dataset(url, storage_options=storage_options)
    at: list[int] = np.unique(np.linspace(0, len(ds) - 1, min(n, len(ds))).round()).astype(int).tolist()
    return [ds[i] for i in at], ds.classes


def batch_of(
    url: str, n: int, preset: str, size: int, seed: int, storage_options: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The first batch of ``n`` samples the loader yields for ``url`` with ``preset`` (every field the dataset
    has, in the main process), and the class names."""
    from shardkit.format.manifest import load_manifest
    from shardkit.loader import load
    from shardkit.loader.fields import available

    m = load_manifest(url, **storage_options)
    drawn = ("image", "label", "labels", "text", "boxes", "box_labels", "keypoints", "mask", "key")
    fields = [f for f in available(m) if f in drawn]
    loader = load(
        url, batch_size=n, size=size, preset=preset, seed=seed, num_workers=0, fields=fields,
        storage_options=storage_options,
    )  # fmt: skip
    return next(iter(loader)), list(m.classes)


__all__ = ["batch_of", "spread_items"]
