"""Shared test helpers: tiny datasets written with shardkit's own writer, local servers.

Tests import from here; test files never import each other.
"""

from __future__ import annotations

import io
import os
import socket
from dataclasses import dataclass

from PIL import Image

from shardkit.manifest import Manifest, ShardInfo, save_manifest
from shardkit.sampledata import make_image
from shardkit.shardformat import EncodedSample, write_shard


def jpeg_bytes(label: int, seed: int = 0, size: tuple[int, int] = (64, 48), quality: int = 90, **save_kw) -> bytes:
    """A small photo-like JPEG of class ``label``."""
    buf = io.BytesIO()
    Image.fromarray(make_image(label, seed, size)).save(buf, format="JPEG", quality=quality, **save_kw)
    return buf.getvalue()


@dataclass
class TinyDataset:
    """A dataset written by :func:`write_dataset`."""

    url: str  # split directory holding manifest.json
    keys: list[str]  # every key, in write order
    labels: dict[str, int]  # key -> label
    manifest: Manifest


def write_dataset(
    root: str,
    *,
    num_samples: int = 60,
    shard_size: int = 7,
    num_classes: int = 3,
    size: tuple[int, int] = (64, 48),
    split: str = "train",
    distinct_images: int = 8,
) -> TinyDataset:
    """Write ``num_samples`` samples into shards of ``shard_size`` plus a manifest under ``root``.

    Key ``k{i:06d}`` has label ``i % num_classes``. Only ``distinct_images``
    different JPEGs are encoded (per class) and reused, to keep fixtures fast.
    """
    os.makedirs(root, exist_ok=True)
    cache = {(c, j): jpeg_bytes(c, j, size) for c in range(num_classes) for j in range(distinct_images)}
    keys, labels, shards = [], {}, []
    class_counts = [0] * num_classes
    for start in range(0, num_samples, shard_size):
        samples = []
        for i in range(start, min(num_samples, start + shard_size)):
            key, label = f"k{i:06d}", i % num_classes
            meta = {"path": f"c{label}/img{i}.jpg", "class": f"c{label}", "width": size[0], "height": size[1]}
            samples.append(EncodedSample(key, cache[(label, i % distinct_images)], label, meta))
            keys.append(key)
            labels[key] = label
            class_counts[label] += 1
        name = f"{split}-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        shards.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
    m = Manifest(
        split=split,
        classes=[f"c{i}" for i in range(num_classes)],
        shards=shards,
        options={"source": "tests.helpers.write_dataset"},
        class_counts=class_counts,
        shardkit_version="test",
    )
    save_manifest(m, root)
    m.url = os.path.join(root, "manifest.json")
    return TinyDataset(url=root, keys=keys, labels=labels, manifest=m)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
