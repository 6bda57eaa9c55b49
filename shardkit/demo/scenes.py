"""Demo scenes for detection and segmentation: solid rectangles on a grey background, one colour per class.

A scene is a pure function of ``(seed, index, size)``: 1 to ``max_objects`` non-overlapping
axis-aligned rectangles, each filled with its class's colour (:data:`COLOURS`), on a neutral grey
(:data:`BACKGROUND`, class 0 ``"background"``). Its targets are exact: a box per rectangle (pixel
edges), a mask of class indices, an instance map (each pixel its rectangle's row, -1 none), and two
keypoints per rectangle (the middles of its left and right
edges: ``"left"``, ``"right"``, a flip pair). Because every pixel's colour names its class, any
geometric step can be checked against the pixels themselves (tests, examples, benchmarks).

:func:`write_scenes` writes such a dataset straight to shards (no conversion), with the fields
``image``, ``boxes``, ``keypoints`` and ``mask`` (and ``instances`` when asked).
"""

from __future__ import annotations

import io
import os
import random
from dataclasses import dataclass
from typing import Optional

import numpy as np

from shardkit.format import EncodedSample, write_shard
from shardkit.format.fields import Objects
from shardkit.format.manifest import Manifest, ShardInfo, save_manifest
from shardkit.format.masks import instances_bytes, mask_bytes

#: class names: index 0 is the background, 1.. are the rectangle colours
CLASSES = ["background", "red", "green", "blue", "yellow", "magenta", "cyan"]
#: the RGB colour of each class (``COLOURS[0]`` is the background grey)
COLOURS = [(128, 128, 128), (220, 30, 30), (30, 190, 40), (40, 60, 220), (230, 220, 40), (210, 40, 200), (40, 210, 210)]
BACKGROUND = COLOURS[0]
KEYPOINT_NAMES = ["left", "right"]
FLIP_PAIRS = [[0, 1]]


@dataclass(frozen=True, eq=False)
class Scene:
    """One scene: ``image`` uint8 ``[H, W, 3]``, its ``objects`` (boxes, classes, keypoints), ``mask`` ``[H, W]`` and
    ``instances`` int16 ``[H, W]`` (each pixel its rectangle's row in ``objects``, -1 none)."""

    image: np.ndarray
    objects: Objects
    mask: np.ndarray
    instances: Optional[np.ndarray] = None


def scene(seed: int, index: int, size: tuple[int, int] = (160, 120), max_objects: int = 4, min_side: int = 12) -> Scene:
    """Scene ``index`` of ``seed``, ``size`` = ``(width, height)``: non-overlapping rectangles (a 2-pixel gap)."""
    w, h = size
    rng = random.Random(f"{seed}/{index}/{w}x{h}")
    image = np.empty((h, w, 3), np.uint8)
    image[:] = BACKGROUND
    mask = np.zeros((h, w), np.uint8)
    rows = np.full((h, w), -1, np.int16)
    taken = np.zeros((h, w), bool)
    boxes: list[list[int]] = []
    labels: list[int] = []
    want = rng.randint(1, max_objects)
    for _ in range(50 * want):
        if len(boxes) == want:
            break
        bw = rng.randint(min_side, max(min_side, w // 2))
        bh = rng.randint(min_side, max(min_side, h // 2))
        if bw > w or bh > h:
            continue
        x0, y0 = rng.randint(0, w - bw), rng.randint(0, h - bh)
        if taken[max(0, y0 - 2) : y0 + bh + 2, max(0, x0 - 2) : x0 + bw + 2].any():
            continue
        c = rng.randint(1, len(CLASSES) - 1)
        image[y0 : y0 + bh, x0 : x0 + bw] = COLOURS[c]
        mask[y0 : y0 + bh, x0 : x0 + bw] = c
        rows[y0 : y0 + bh, x0 : x0 + bw] = len(boxes)
        taken[y0 : y0 + bh, x0 : x0 + bw] = True
        boxes.append([x0, y0, x0 + bw, y0 + bh])
        labels.append(c)
    b = np.array(boxes, np.float32).reshape(-1, 4)
    mid = (b[:, 1] + b[:, 3]) / 2
    two = np.full(len(b), 2.0, np.float32)
    kp = np.stack([np.stack([b[:, 0], mid, two], 1), np.stack([b[:, 2], mid, two], 1)], 1).astype(np.float32)
    objects = Objects(b, np.array(labels, np.int64), np.zeros(len(b), bool), kp.reshape(-1, 2, 3))
    return Scene(image, objects, mask, rows)


def scene_jpeg(s: Scene, quality: int = 95) -> bytes:
    """The scene's image as a baseline JPEG (4:4:4, so colours stay sharp at rectangle edges)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(s.image).save(buf, format="JPEG", quality=quality, subsampling=0)
    return buf.getvalue()


def write_scenes(
    root: str,
    num_samples: int = 64,
    *,
    size: tuple[int, int] = (160, 120),
    shard_size: int = 16,
    seed: int = 0,
    split: str = "train",
    max_objects: int = 4,
    keypoints: bool = True,
    mask: bool = True,
    instances: bool = False,
) -> str:
    """Write ``num_samples`` scenes as a split under ``root`` (shards + manifest); returns ``root``.

    Sample ``k{i:06d}`` is :func:`scene` ``(seed, i, size)``; its ``.json`` records ``{"scene": i}``.
    """
    os.makedirs(root, exist_ok=True)
    shards: list[ShardInfo] = []
    for start in range(0, num_samples, shard_size):
        samples = []
        for i in range(start, min(num_samples, start + shard_size)):
            s = scene(seed, i, size, max_objects)
            obj = s.objects if keypoints else Objects(s.objects.boxes, s.objects.labels, s.objects.iscrowd)
            samples.append(
                EncodedSample(
                    f"k{i:06d}",
                    scene_jpeg(s),
                    None,
                    {"scene": i, "width": size[0], "height": size[1]},
                    objects=obj,
                    mask=mask_bytes(s.mask) if mask else None,
                    instances=instances_bytes(s.instances) if instances and s.instances is not None else None,
                )
            )
        name = f"{split}-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        shards.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
    fields = ["image", "boxes"] + (["keypoints"] if keypoints else []) + (["mask"] if mask else [])
    fields += ["instances"] if instances else []
    m = Manifest(
        split=split,
        classes=list(CLASSES),
        shards=shards,
        options={"source": "shardkit.demo.scenes", "seed": seed, "size": list(size)},
        shardkit_version="demo",
        fields=fields,
        keypoint_names=list(KEYPOINT_NAMES) if keypoints else [],
        flip_pairs=[list(p) for p in FLIP_PAIRS] if keypoints else [],
    )
    save_manifest(m, root)
    return root


__all__ = [
    "BACKGROUND",
    "CLASSES",
    "COLOURS",
    "FLIP_PAIRS",
    "KEYPOINT_NAMES",
    "Scene",
    "scene",
    "scene_jpeg",
    "write_scenes",
]
