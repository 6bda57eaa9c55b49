"""Whole epochs as ``(images, keys)`` batches, compared batch for batch."""

from __future__ import annotations


def keyed_batches(url: str, **kw) -> tuple:
    """``(loader, [(images, keys), ...])``: one epoch of ``shardkit.load(url, with_keys=True, **kw)``."""
    import shardkit

    loader = shardkit.load(url, **{"with_keys": True, **kw})
    return loader, [(im, k) for im, _, k in loader]


def assert_same_batches(a: list, b: list) -> None:
    """The same keys in the same batches, with equal pixels (lists from :func:`keyed_batches`)."""
    import torch

    assert [k for _, k in a] == [k for _, k in b]
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b))
