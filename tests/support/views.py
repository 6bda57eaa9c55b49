"""Helpers for the ``views=`` tests: keyed datasets of solid or gradient images, the colour check, views by key.

A sample ``k{i:06d}`` has label ``i % 3`` and shows either ``colour(i)`` (solid) or a gradient shifted by ``i``,
so every view of a row tells which sample it was cut from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from PIL import Image

from shardkit.format import EncodedSample, write_shard
from shardkit.format.manifest import Manifest, ShardInfo, save_manifest
from tests.support.data import image_bytes
from tests.support.source_reference import colour, image_id

#: samples in a views dataset
N = 30


def to_jpeg(img: Image.Image, **kw: Any) -> bytes:
    """``img`` as a quality-95 JPEG (``kw``: more PIL save options, e.g. ``subsampling``, ``progressive``)."""
    return image_bytes(img, quality=95, **kw)


def gradient(i: int, size: tuple[int, int] = (96, 72)) -> Image.Image:
    """A smooth image that differs everywhere (crops at different places differ), shifted per sample."""
    w, h = size
    x, y = np.meshgrid(np.arange(w), np.arange(h))
    rgb = np.stack([x * 255 // w, y * 255 // h, (x + y + 7 * i) * 255 // (w + h + 7 * N) % 256], -1)
    return Image.fromarray(rgb.astype(np.uint8))


def solid_image(i: int) -> Image.Image:
    """An 80x60 image of sample ``i``'s colour."""
    return Image.new("RGB", (80, 60), colour(i))


def write_keyed(root: str, data: Callable[[int], bytes], n: int = N, shard_size: int = 7) -> str:
    """``n`` samples ``k{i:06d}`` (label ``i % 3``, classes a, b, c) whose bytes are ``data(i)``, with a manifest."""
    os.makedirs(root, exist_ok=True)
    shards: list[ShardInfo] = []
    for start in range(0, n, shard_size):
        samples = [EncodedSample(f"k{i:06d}", data(i), i % 3, {}) for i in range(start, min(n, start + shard_size))]
        name = f"train-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            cnt, nbytes, sha = write_shard(samples, f)
        shards.append(ShardInfo(name=name, samples=cnt, bytes=nbytes, sha256=sha))
    counts = [sum(1 for i in range(n) if i % 3 == c) for c in range(3)]
    m = Manifest(split="train", classes=["a", "b", "c"], shards=shards, options={}, class_counts=counts)
    save_manifest(m, root)
    return root


def write_images(root: str, image: Callable[[int], Image.Image], n: int = N, shard_size: int = 7) -> str:
    """:func:`write_keyed` of ``image(i)`` as quality-95 JPEGs."""
    return write_keyed(root, lambda i: to_jpeg(image(i)), n, shard_size)


def check_colours(views: list[torch.Tensor], keys: list[str]) -> None:
    """Every view of every row shows the colour of that row's key."""
    for j, v in enumerate(views):
        for row, key in enumerate(keys):
            rgb = v[row].float().mean(dim=(1, 2)).tolist()
            assert image_id(rgb) == int(key[1:]), f"view {j} row {row} shows {rgb}, not the colour of {key}"


def views_by_key(batches: Iterable) -> dict[str, list[torch.Tensor]]:
    """Key -> that sample's views (cloned), over ``(views, labels, keys)`` batches; a key twice fails."""
    out: dict[str, list[torch.Tensor]] = {}
    for views, _labels, keys in batches:
        for row, key in enumerate(keys):
            assert key not in out, f"{key} delivered twice"
            out[key] = [v[row].clone() for v in views]
    return out


class Flat:
    """A views loader as ``(images, labels, keys)`` for check_resume: a sample's views flattened into one row."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self):
        for views, labels, keys in self.loader:
            yield torch.cat([v.reshape(len(keys), -1) for v in views], 1), labels, keys

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
