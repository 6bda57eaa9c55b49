"""Sample ImageFolders that shardkit makes itself (no download).

Images look like photos rather than flat colours: a smooth random background
at several scales, a class-specific object (shape, colour and texture differ
per class, position and size vary per image) and sensor-like noise, so JPEG
sizes and decode costs are close to real photos (about 2-3 bits per pixel at
quality 90; :data:`IMAGENET_LIKE` gives median 500x375, a tail past 1000 px and
about 80 kB mean files). Everything is a pure function of ``seed``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

#: name, hue (RGB), shape of each demo class
_CLASS_STYLES = [
    ("circle", (220, 60, 40), "circle"),
    ("square", (40, 120, 220), "square"),
    ("stripes", (60, 180, 70), "stripes"),
    ("ring", (230, 190, 40), "ring"),
    ("cross", (150, 60, 200), "cross"),
    ("diamond", (30, 200, 200), "diamond"),
    ("triangle", (240, 120, 170), "triangle"),
    ("checker", (120, 90, 50), "checker"),
]


@dataclass(frozen=True)
class SizeSpread:
    """Distribution of image sizes: log-normal around ``median`` (w, h), clipped; a ``portrait`` share is turned."""

    median: tuple[int, int] = (500, 375)
    sigma: float = 0.4
    min_side: int = 64
    max_side: int = 1600
    portrait: float = 0.25

    @classmethod
    def fixed(cls, width: int, height: int) -> "SizeSpread":
        """Every image exactly ``width`` x ``height``."""
        if width < 8 or height < 8:
            raise ValueError(f"image size must be at least 8x8, not {width}x{height}")
        return cls(
            median=(width, height), sigma=0.0, min_side=min(width, height), max_side=max(width, height), portrait=0.0
        )


SMALL = SizeSpread(median=(160, 120), sigma=0.2, min_side=48, max_side=320)
IMAGENET_LIKE = SizeSpread()


def class_names(num_classes: int) -> list[str]:
    """Folder names of the first ``num_classes`` classes."""
    if not 1 <= num_classes <= len(_CLASS_STYLES):
        raise ValueError(f"num_classes must be between 1 and {len(_CLASS_STYLES)}")
    return [name for name, _, _ in _CLASS_STYLES[:num_classes]]


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    from PIL import Image

    out = np.zeros((h, w, 3), np.float32)
    for cells, amp in ((3, 70.0), (9, 30.0), (31, 14.0)):
        ch, cw = max(2, cells * h // max(h, w)), max(2, cells * w // max(h, w))
        field = rng.normal(0, 1, (ch, cw, 3)).astype(np.float32)
        img = Image.fromarray(np.clip(field * 40 + 128, 0, 255).astype(np.uint8)).resize(
            (w, h), Image.Resampling.BICUBIC
        )
        out += (np.asarray(img, np.float32) - 128) * (amp / 40)
    return out + rng.uniform(90, 160, 3).astype(np.float32)


def _object_mask(kind: str, h: int, w: int, cy: float, cx: float, r: float, rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.ogrid[:h, :w]
    dy, dx = (yy - cy) / r, (xx - cx) / r
    if kind == "circle":
        return dy**2 + dx**2 < 1
    if kind == "square":
        return (np.abs(dy) < 0.8) & (np.abs(dx) < 0.8)
    if kind == "stripes":
        return ((dy**2 + dx**2) < 1.2) & (np.sin((yy + xx * 0.3) / max(2.0, r / 5)) > 0)
    if kind == "ring":
        d = dy**2 + dx**2
        return (d < 1) & (d > 0.45)
    if kind == "cross":
        return ((np.abs(dy) < 0.25) & (np.abs(dx) < 1)) | ((np.abs(dx) < 0.25) & (np.abs(dy) < 1))
    if kind == "diamond":
        return np.abs(dy) + np.abs(dx) < 1
    if kind == "triangle":
        return (dy < 0.7) & (dy > -0.9) & (np.abs(dx) < (dy + 0.9) * 0.6)
    if kind == "checker":
        return ((dy**2 + dx**2) < 1.1) & ((((yy // max(2, int(r / 3))) + (xx // max(2, int(r / 3)))) % 2) == 0)
    raise ValueError(kind)


def make_image(label: int, seed: int, size: tuple[int, int]) -> np.ndarray:
    """An HxWx3 uint8 photo-like image of class ``label`` (pure function of its arguments)."""
    w, h = size
    rng = np.random.default_rng([seed, label, w, h])
    img = _background(rng, h, w)
    _, color, kind = _CLASS_STYLES[label % len(_CLASS_STYLES)]
    r = rng.uniform(0.22, 0.4) * min(h, w)
    cy, cx = rng.uniform(r, h - r), rng.uniform(r, w - r)
    mask = _object_mask(kind, h, w, cy, cx, r, rng)
    shade = np.asarray(color, np.float32) * rng.uniform(0.75, 1.15) + rng.normal(0, 12, 3)
    texture = rng.normal(0, 14, (h, w, 1)).astype(np.float32)
    img[mask] = (img[mask] * 0.25 + shade * 0.75) + texture[mask]
    img += rng.normal(0, 8.5, (h, w, 3)).astype(np.float32)  # sensor noise: ~2.7 bits/pixel at q90, as photos
    return np.clip(img, 0, 255).astype(np.uint8)


def _sizes(rng: np.random.Generator, n: int, spread: SizeSpread) -> list[tuple[int, int]]:
    out = []
    for _ in range(n):
        f = float(np.exp(rng.normal(0, spread.sigma)))
        w, h = spread.median
        if rng.random() < spread.portrait:  # some portrait images
            w, h = h, w
        w, h = int(w * f), int(h * f)
        w = int(np.clip(w, spread.min_side, spread.max_side))
        h = int(np.clip(h, spread.min_side, spread.max_side))
        out.append((w, h))
    return out


def make_imagefolder(
    root: str,
    *,
    num_classes: int = 4,
    per_class: int = 50,
    spread: SizeSpread = SMALL,
    seed: int = 0,
    quality: int = 90,
    splits: dict[str, int] | None = None,
) -> str:
    """Write a sample ImageFolder of JPEGs under ``root`` and return ``root``.

    Args:
        root: output folder (created).
        num_classes: number of class folders (at most 8).
        per_class: images per class (per split if ``splits`` is given).
        spread: image size distribution (:data:`SMALL` or :data:`IMAGENET_LIKE`).
        seed: makes the whole folder reproducible.
        quality: JPEG quality.
        splits: optional ``{"train": n, "val": m}`` -> ``root/<split>/<class>/``
            with ``n`` (``m``) images per class.
    """
    from PIL import Image

    layout = splits or {"": per_class}
    for split_index, (split, count) in enumerate(layout.items()):
        rng = np.random.default_rng([seed, split_index])
        for label, name in enumerate(class_names(num_classes)):
            d = os.path.join(root, split, name)
            os.makedirs(d, exist_ok=True)
            for i, size in enumerate(_sizes(rng, count, spread)):
                arr = make_image(label, seed * 1_000_003 + split_index * 10_007 + i, size)
                Image.fromarray(arr).save(os.path.join(d, f"{name}_{i:05d}.jpg"), quality=quality)
    return root
