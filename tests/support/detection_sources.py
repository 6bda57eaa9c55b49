"""Shared by the coco/voc/yolo source tests: scene images on disk, an end-to-end probe, a plain shard reader, COCO
RLE segmentations."""

from __future__ import annotations

import glob
import io
import json
import os
import tarfile
from collections.abc import Callable, Sequence

import numpy as np

from shardkit.demo.scenes import BACKGROUND, CLASSES, COLOURS, scene, scene_jpeg


def outline_distance(px: np.ndarray, py: np.ndarray, poly: tuple[float, ...]) -> np.ndarray:
    """Distance of each point to the polygon's outline (a deliberately plain point-to-segment minimum)."""
    pts = np.asarray(poly, np.float64).reshape(-1, 2)
    a, b = pts, np.roll(pts, -1, 0)
    p = np.stack([px, py], 1)[:, None, :]
    ab, ap = (b - a)[None], p - a[None]
    t = np.clip((ap * ab).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-12), 0, 1)
    return np.linalg.norm(ap - t[..., None] * ab, axis=-1).min(1)


def write_scene_images(folder: str, seed: int, n: int, size: tuple[int, int], names: Sequence[str]) -> None:
    """``names[i]`` is scene ``i`` of ``seed`` (a JPEG); names past ``n`` are plain background images."""
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i, name in enumerate(names):
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if i < n:
            data = scene_jpeg(scene(seed, i, size))
        else:
            buf = io.BytesIO()
            Image.new("RGB", size, BACKGROUND).save(buf, format="JPEG")
            data = buf.getvalue()
        with open(path, "wb") as f:
            f.write(data)


def read_shards(
    out: str, seed: int, size: tuple[int, int], want_mask: bool, scene_of: Callable[[dict], int | None]
) -> dict[str, dict]:
    """Every sample of the shards below ``out`` (plain ``tarfile``), checked against its scene: the stored boxes are
    the scene's scaled to the stored size (``scene_of(sample .json)`` is the scene, ``None`` for other images), and
    each mask pixel of class ``c`` lies on ``c``'s rectangle. Returns ``{path: objects}``."""
    from PIL import Image

    samples: dict[str, dict] = {}
    for tar in sorted(glob.glob(os.path.join(out, "**", "*.tar"), recursive=True)):
        with tarfile.open(tar) as t:
            members: dict[str, dict[str, bytes]] = {}
            for m in t.getmembers():
                key, ext = m.name.split(".", 1)
                members.setdefault(key, {})[ext] = t.extractfile(m).read()  # type: ignore[union-attr]
        with open(os.path.join(os.path.dirname(tar), "manifest.json")) as f:
            classes = json.load(f)["classes"]  # the source's class order (COCO: by category id)
        for key, parts in members.items():
            meta = json.loads(parts["json"])
            objs = json.loads(parts["objects.json"])
            image = Image.open(io.BytesIO(parts["jpg"]))
            sw, sh = image.size
            i = scene_of(meta)
            if i is not None:
                s = scene(seed, i, size)
                scale = np.array([sw / size[0], sh / size[1]] * 2)
                got = np.array(objs["boxes"], np.float64).reshape(-1, 4)
                want = s.objects.boxes.astype(np.float64) * scale
                for b in want:
                    assert np.abs(got - b).max(1).min() < 1e-3 * max(sw, sh), (meta.get("path", key), b, got)
                if want_mask:  # each mask pixel of class c sits on c's colour (crowds are 255, unpainted 0)
                    mask = np.asarray(Image.open(io.BytesIO(parts["mask.png"])))
                    assert mask.shape == (sh, sw)
                    pixels = np.asarray(image.convert("RGB"), np.int32)
                    for c in set(np.unique(mask).tolist()) - {0, 255}:
                        near = np.abs(pixels[mask == c] - np.array(COLOURS[CLASSES.index(classes[c])])).max(1) < 60
                        assert near.mean() > 0.9, (meta.get("path", key), c)
            samples[meta.get("path", key)] = objs
    return samples


def coco_rle(region: np.ndarray, *, compressed: bool) -> dict:
    """COCO's RLE segmentation of the bool mask ``region`` (``[H, W]``): compressed (the counts string of
    :func:`shardkit.convert.segments.rle_of`), or uncompressed (column-major run lengths, zeros first, counted
    here)."""
    if compressed:
        from shardkit.convert.segments import rle_of

        r = rle_of(region)
        return {"size": list(r.size), "counts": r.counts}
    flat = region.T.reshape(-1)
    runs = np.diff(np.flatnonzero(np.diff(np.r_[False, flat, not flat[-1]])), prepend=0).tolist()
    return {"size": list(region.shape), "counts": runs}
