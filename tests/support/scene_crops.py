"""The loader's crops of demo scenes (:mod:`shardkit.demo.scenes`), checked by oracles that cannot be fooled.

The scenes are solid rectangles, one colour per class, on grey, so every returned target can be checked against
the returned pixels themselves (:func:`check_batch`):

* every box of class ``c`` encloses pixels of colour ``c``;
* no clean region of colour ``c`` (a pixel whose 5 x 5 neighbourhood is all colour ``c``) lies outside all of
  the class-``c`` boxes (those returned, and those the reference says were dropped below ``min_visible``);
* mask pixels of class ``c`` away from class edges sit on colour ``c``; mask 255 only where no stored pixel maps;
* keypoint ``left`` sits on the left edge of its box and ``right`` on the right (flip pairs swapped);
* ``box_count`` is the number of labels >= 0.

And an independent reference: each sample's boxes recomputed from the scene's exact objects and the crop box
and flip by plain per-box Python (a box maps linearly, mirrored as ``S - x``), compared within 1 output pixel.
"""

from __future__ import annotations

import numpy as np
import torch

from shardkit.demo.scenes import COLOURS, scene
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder

TARGETS = ("image", "boxes", "box_labels", "box_count", "keypoints", "mask", "key")
SCENE = (120, 90)  #: stored (width, height)
TOL = 40  #: per-channel distance of a JPEG pixel from its class colour
MARGIN = 1.0  #: output pixels a returned box may differ from the reference


def colour_of(images: torch.Tensor) -> np.ndarray:
    """``[B, S, S]`` the class whose colour each pixel is (within :data:`TOL`), -1 for none."""
    px = images.permute(0, 2, 3, 1).numpy().astype(np.int16)
    out = np.full(px.shape[:3], -1, np.int64)
    for c, rgb in enumerate(COLOURS):
        near = np.abs(px - np.array(rgb, np.int16)).max(-1) <= TOL
        out[near] = c
    return out


def eroded(region: np.ndarray, r: int) -> np.ndarray:
    """``region`` (bool ``[H, W]``) where the whole ``(2r+1)^2`` neighbourhood is in it (outside the image: not)."""
    h, w = region.shape
    pad = np.zeros((h + 2 * r, w + 2 * r), bool)
    pad[r : r + h, r : r + w] = region
    out = np.ones_like(region)
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            out &= pad[dy : dy + h, dx : dx + w]
    return out


def reference_boxes(
    objects, crop: tuple[float, float, float, float], flip: bool, size: int, min_visible: float
) -> list[tuple[int, tuple[float, float, float, float], float]]:
    """Each object as ``(class, clipped box in output pixels, visible share)``: plain per-box Python."""
    bx0, by0, bx1, by1 = crop
    sx, sy = size / (bx1 - bx0), size / (by1 - by0)
    out = []
    for (x0, y0, x1, y1), c in zip(objects.boxes.tolist(), objects.labels.tolist()):
        near = min(x1 - bx0, bx1 - x0) * sx > -MARGIN and min(y1 - by0, by1 - y0) * sy > -MARGIN
        X0, X1 = (x0 - bx0) * sx, (x1 - bx0) * sx
        Y0, Y1 = (y0 - by0) * sy, (y1 - by0) * sy
        if flip:
            X0, X1 = size - X1, size - X0
        cx0, cx1 = min(max(X0, 0), size), min(max(X1, 0), size)
        cy0, cy1 = min(max(Y0, 0), size), min(max(Y1, 0), size)
        share = max(0.0, cx1 - cx0) * max(0.0, cy1 - cy0) / ((X1 - X0) * (Y1 - Y0))
        out.append((c, (cx0, cy0, cx1, cy1), share if share > 0 or not near else 1e-9))  # 1e-9: a sliver, maybe
    return out


def reference_mask(objects, crop, flip: bool, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The class each output pixel's centre falls on (plain per-rectangle numpy), where that is unsure
    (within one output pixel of a rectangle's edge: the worker's crop is rounded to its decoded grid), and
    which object (1 + its index, 0: none) each pixel shows."""
    bx0, by0, bx1, by1 = crop
    sx, sy = (bx1 - bx0) / size, (by1 - by0) / size
    x = np.arange(size) + 0.5
    if flip:
        x = size - x
    u = (bx0 + x * sx)[None, :]
    v = (by0 + (np.arange(size) + 0.5) * sy)[:, None]
    w, h = SCENE
    want = np.zeros((size, size), np.uint8)
    want[((u < 0) | (u >= w)) | ((v < 0) | (v >= h))] = 255  # padding: no stored pixel
    unsure = (np.abs(u - 0) <= sx) | (np.abs(u - w) <= sx) | (np.abs(v - 0) <= sy) | (np.abs(v - h) <= sy)
    ids = np.zeros((size, size), np.int64)
    for j, ((x0, y0, x1, y1), c) in enumerate(zip(objects.boxes.tolist(), objects.labels.tolist())):
        want[(u >= x0) & (u < x1) & (v >= y0) & (v < y1)] = c
        ids[(u >= x0) & (u < x1) & (v >= y0) & (v < y1)] = j + 1
        near_x = (np.abs(u - x0) <= sx) | (np.abs(u - x1) <= sx)
        near_y = (np.abs(v - y0) <= sy) | (np.abs(v - y1) <= sy)
        in_x = (u >= x0 - sx) & (u <= x1 + sx)
        in_y = (v >= y0 - sy) & (v <= y1 + sy)
        unsure |= (near_x & in_y) | (near_y & in_x)
    return want, unsure, ids


def crops_of(loader, size: int, preset: str, seed: int, idx: list[int], epoch: int = 0):
    """The crop box and flip the loader's geometry chose for scenes ``idx`` (gid = scene index here)."""
    dec = CropDecoder(ImageConfig(preset=preset, size=size), seed)
    sizes = np.array([SCENE] * len(idx), np.int64)
    crops = dec.geometry(sizes, epoch, np.array(idx, np.int64))
    return crops.boxes, crops.flips


def check_batch(b: dict, size: int, preset: str, seed: int, min_visible: float, epoch: int = 0) -> tuple[int, int]:
    """Every oracle of the module docstring on one batch; returns ``(boxes given, boxes returned)``."""
    idx = [int(k.rsplit("/", 1)[-1][1:]) for k in b["key"]]
    boxes_in, flips = crops_of(None, size, preset, seed, idx, epoch)
    colours = colour_of(b["image"])
    given_n = returned = 0
    for row, i in enumerate(idx):
        objs = scene(0, i, SCENE).objects
        count = int(b["box_count"][row])
        labels = b["box_labels"][row].tolist()
        assert count == sum(1 for v in labels if v >= 0), f"box_count of k{i}"
        assert all(v >= 0 for v in labels[:count]) and all(v == -1 for v in labels[count:]), "padding after objects"
        ref = reference_boxes(objs, tuple(boxes_in[row]), bool(flips[row]), size, min_visible)
        given_n += len(objs)
        returned += count
        # the reference: kept boxes in order (borderline shares may go either way: the worker's crop is rounded)
        got = [(labels[j], b["boxes"][row, j].tolist()) for j in range(count)]
        sure = [(c, bx) for c, bx, share in ref if share >= min_visible + 0.05 and share > 0.02]
        maybe = [(c, bx) for c, bx, share in ref if share >= min_visible - 0.05 and share > 0]
        assert len(sure) <= count <= len(maybe), f"k{i}: {count} boxes kept, reference {len(sure)}..{len(maybe)}"
        for c, bx in got:
            assert any(c == rc and max(abs(u - v) for u, v in zip(bx, rb)) <= MARGIN for rc, rb in maybe), (
                f"k{i}: box {c} {bx} not in the reference {maybe}"
            )
        for c, bx in sure:
            assert any(c == gc and max(abs(u - v) for u, v in zip(bx, gb)) <= MARGIN for gc, gb in got), (
                f"k{i}: reference box {c} {bx} missing from {got}"
            )
        # pixels: every box of class c encloses colour c
        for c, (x0, y0, x1, y1) in got:
            if x1 - x0 >= 4 and y1 - y0 >= 4:
                inside = colours[row, int(np.ceil(y0)) : int(y1), int(np.ceil(x0)) : int(x1)]
                assert (inside == c).mean() > 0.2, f"k{i}: box {c} {(x0, y0, x1, y1)} holds no colour {c}"
        # no clean region of colour c outside every class-c box (returned or, per the reference, dropped)
        allowed = [(c, bx) for c, bx in got] + [(c, bx) for c, bx, share in ref]
        for c in set(objs.labels.tolist()):
            ys, xs = np.nonzero(eroded(colours[row] == c, 2))
            for y, x in zip(ys.tolist(), xs.tolist()):
                assert any(
                    cc == c and bx[0] - 1 <= x + 0.5 <= bx[2] + 1 and bx[1] - 1 <= y + 0.5 <= bx[3] + 1
                    for cc, bx in allowed
                ), f"k{i}: colour {c} at ({x}, {y}) outside every class-{c} box"
        # mask pixels of class c away from class edges sit on colour c; the mask is the reference's
        mask = b["mask"][row].numpy()
        want, unsure, ids = reference_mask(objs, tuple(boxes_in[row]), bool(flips[row]), size)
        assert set(np.unique(mask).tolist()) <= {0, 255, *objs.labels.tolist()}, f"k{i}: a class not in the scene"
        assert ((mask == want) | unsure).all(), f"k{i}: mask differs from the reference"
        for j, c in enumerate(objs.labels.tolist()):  # per object: two objects of a class may be < 1 px apart
            core = eroded(ids == j + 1, 2) & (mask == c)
            assert (colours[row][core] == c).all(), f"k{i}: mask class {c} off its colour"
        pad = (want == 255) & ~unsure
        assert (b["image"][row].permute(1, 2, 0).numpy()[pad] == 0).all(), f"k{i}: padding is not black"
        # keypoints: left on the left edge, right on the right edge of their box
        kp = b["keypoints"][row]
        for j in range(count):
            x0, y0, x1, y1 = b["boxes"][row, j].tolist()
            for p, edge in ((0, x0), (1, x1)):
                x, y, v = kp[j, p].tolist()
                assert v == 0 or (0 <= x <= size and 0 <= y <= size), f"k{i}: a visible keypoint outside the image"
                if v > 0:
                    assert abs(x - edge) <= 1e-3 and y0 - 1e-3 <= y <= y1 + 1e-3, f"k{i}: keypoint {p} off its edge"
    return given_n, returned


def spoil(root: str, member: str, bad) -> None:
    """Replace ``member`` of the first shard by ``bad(bytes)`` (same length: the shard's size and index stay right)."""
    import io
    import os
    import tarfile

    shard = os.path.join(root, "train-000000.tar")
    with tarfile.open(shard) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]  # type: ignore[union-attr]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for m, data in members:
            if m.name == member:
                data = bad(data)
                assert len(data) == m.size
            t.addfile(m, io.BytesIO(data))
    with open(shard, "wb") as f:
        f.write(out.getvalue())


def truncated_scan(jpeg: bytes) -> bytes:
    """A JPEG whose header reads but whose scan breaks (the decode fails after the crop was chosen)."""
    i = jpeg.find(b"\xff\xda") + 20
    return jpeg[:i] + b"\xff" * (len(jpeg) - i)
