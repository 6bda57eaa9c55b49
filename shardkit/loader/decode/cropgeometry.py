"""Crop geometry of the ``train`` and ``eval`` presets, for a whole batch at once, before any pixel is decoded.

* :func:`sample_uniforms`: the uniforms a sample's crop draws, a counter-based hash of ``(seed, epoch, gid)``, so a
  sample's crop does not depend on ranks, workers or the rest of its batch;
* :func:`rrc_boxes`: torchvision's ``RandomResizedCrop.get_params`` for a batch of image sizes;
* :func:`center_box`, :func:`center_boxes`: torchvision's ``Resize`` + ``CenterCrop`` as a box in the image.
"""

from __future__ import annotations

import math

import numpy as np

Box = tuple[float, float, float, float]  #: (left, top, right, bottom) in stored-image pixels

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: uniforms per sample the train preset consumes: 10 RandomResizedCrop attempts x (area, ratio), top, left, flip
CROP_UNIFORMS = 23


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic, no warnings on arrays)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sample_uniforms(seed: int, epoch: int, gids: np.ndarray, k: int = CROP_UNIFORMS) -> np.ndarray:
    """``[len(gids), k]`` uniforms in [0, 1): a pure function of ``(seed, epoch, gid, column)``.

    A counter-based hash (splitmix64 over the key and a counter), so a whole batch
    draws its random numbers in a few vectorised operations and a sample's draws do
    not depend on which rank or worker decodes it, or on what else is in its batch.
    """
    key = _mix64(np.array([seed], np.int64).astype(np.uint64) + _GOLDEN)
    key = _mix64(key ^ (np.array([epoch], np.int64).astype(np.uint64) + _GOLDEN))
    per_sample = _mix64(key ^ _mix64(np.asarray(gids, np.int64).astype(np.uint64) + _GOLDEN))
    counters = (np.arange(1, k + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    bits = _mix64(per_sample[:, None] + counters)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def rrc_boxes(
    widths: np.ndarray, heights: np.ndarray, u: np.ndarray, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """torchvision's ``RandomResizedCrop.get_params`` for a whole batch of image sizes at once.

    Up to 10 attempts of an area fraction uniform in ``scale`` and an aspect ratio
    log-uniform in ``ratio`` (rounded like torchvision); the first box that fits is
    placed uniformly at random; if none fits, a centre crop with the ratio clamped
    into ``ratio``.

    Args:
        widths, heights: ``[n]`` stored image sizes.
        u: ``[n, >= 22]`` uniforms (columns 0-9 areas, 10-19 ratios, 20 top, 21 left).

    Returns:
        ``(top, left, h, w)``, each ``[n]`` int64.
    """
    wf, hf = np.asarray(widths, np.float64), np.asarray(heights, np.float64)
    area = (wf * hf)[:, None]
    target = area * (scale[0] + (scale[1] - scale[0]) * u[:, :10])
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = np.exp(lo + (hi - lo) * u[:, 10:20])
    w = np.round(np.sqrt(target * aspect))
    h = np.round(np.sqrt(target / aspect))
    ok = (w > 0) & (w <= wf[:, None]) & (h > 0) & (h <= hf[:, None])
    rows, first = np.arange(len(wf)), ok.argmax(axis=1)
    found = ok.any(axis=1)
    in_ratio = wf / hf
    rmin, rmax = min(ratio), max(ratio)
    fw = np.where(in_ratio > rmax, np.round(hf * rmax), wf)
    fh = np.where(in_ratio < rmin, np.round(wf / rmin), hf)
    w = np.where(found, w[rows, first], fw)
    h = np.where(found, h[rows, first], fh)
    top = np.where(found, np.floor(u[:, 20] * (hf - h + 1)), np.floor((hf - h) / 2))
    left = np.where(found, np.floor(u[:, 21] * (wf - w + 1)), np.floor((wf - w) / 2))
    return top.astype(np.int64), left.astype(np.int64), h.astype(np.int64), w.astype(np.int64)


def center_box(width: int, height: int, size: int, resize_size: int) -> Box:
    """torchvision ``Resize(resize_size)`` + ``CenterCrop(size)`` as a box in the original image."""
    if width <= height:
        new_w, new_h = resize_size, int(resize_size * height / width)
    else:
        new_w, new_h = int(resize_size * width / height), resize_size
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    sx, sy = new_w / width, new_h / height
    return left / sx, top / sy, (left + size) / sx, (top + size) / sy


def center_boxes(widths: np.ndarray, heights: np.ndarray, size: int, resize_size: int) -> np.ndarray:
    """:func:`center_box` for a whole batch at once: ``[n, 4]`` boxes (same arithmetic, vectorised)."""
    w, h = np.asarray(widths, np.float64), np.asarray(heights, np.float64)
    portrait = w <= h
    new_w = np.where(portrait, resize_size, np.floor(resize_size * w / np.where(portrait, 1, h)))
    new_h = np.where(portrait, np.floor(resize_size * h / np.where(portrait, w, 1)), resize_size)
    top, left = np.round((new_h - size) / 2.0), np.round((new_w - size) / 2.0)
    sx, sy = new_w / w, new_h / h
    return np.stack([left / sx, top / sy, (left + size) / sx, (top + size) / sy], axis=1).reshape(-1, 4)
