"""Deliberately simple references for the target geometry (numpy float64, Python loops) and the scenes oracle.

Used by the target geometry, augment and instance tests. Nothing here imports the code under test's maths: maps
are inverted with ``np.linalg.inv``, boxes move corner by corner, masks pixel by pixel, and the scene checks read
only the pixels (every class has its own colour).
"""

from __future__ import annotations

import numpy as np
import torch

from shardkit.demo.scenes import COLOURS, scene
from shardkit.targets.geometry import Targets, pad_objects

IGNORE = 255
FILL = (0, 0, 0)  #: the fill colour the scene tests give rotations and affines (no class has it)
PALETTE = np.array([*COLOURS, FILL], np.float64)  # class k at row k; the fill last
PALETTE_CLASS = np.array([*range(len(COLOURS)), IGNORE])
CLEAN = 12.0  #: a pixel is "clean" colour c when every channel is within this of COLOURS[c] (0-255)


# --- references -------------------------------------------------------------------------------------------


def ref_forward(inv: np.ndarray) -> np.ndarray:
    """The forward 3x3 map of one inverse map (float64)."""
    return np.linalg.inv(np.asarray(inv, np.float64))


def ref_point(fw: np.ndarray, x: float, y: float) -> tuple[float, float]:
    """An edge-coordinate point moved by forward map ``fw`` (pixel centres at integers in between)."""
    cx, cy = x - 0.5, y - 0.5
    return fw[0, 0] * cx + fw[0, 1] * cy + fw[0, 2] + 0.5, fw[1, 0] * cx + fw[1, 1] * cy + fw[1, 2] + 0.5


def ref_move_sample(boxes, labels, count, keypoints, inv, out_size, min_visible, flip_pairs):
    """One sample's objects after ``inv`` (3x3 inverse map), by loops: returns (boxes, labels, keypoints, margin).

    ``margin``: how close any keep decision came to its threshold (the float32 code may decide such a
    case either way)."""
    h, w = out_size
    fw = ref_forward(inv)
    mirror = np.linalg.det(np.asarray(inv, np.float64)[:2, :2]) < 0
    out_b, out_l, out_k, margin = [], [], [], np.inf
    for m in range(int(count)):
        x0, y0, x1, y1 = (float(v) for v in boxes[m])
        xs, ys = [], []
        for cx, cy in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            px, py = ref_point(fw, cx, cy)
            xs.append(px)
            ys.append(py)
        bx0, bx1, by0, by1 = min(xs), max(xs), min(ys), max(ys)
        cx0, cx1 = min(max(bx0, 0.0), w), min(max(bx1, 0.0), w)
        cy0, cy1 = min(max(by0, 0.0), h), min(max(by1, 0.0), h)
        area = (bx1 - bx0) * (by1 - by0)
        visible = (cx1 - cx0) * (cy1 - cy0)
        margin = min(margin, abs(cx1 - cx0), abs(cy1 - cy0), abs(visible - min_visible * area))
        if not (cx1 > cx0 and cy1 > cy0 and visible >= min_visible * area):
            continue
        out_b.append([cx0, cy0, cx1, cy1])
        out_l.append(int(labels[m]))
        if keypoints is not None:
            kp = []
            for x, y, v in keypoints[m]:
                px, py = ref_point(fw, float(x), float(y))
                vis = 0.0 if (px < 0 or px > w or py < 0 or py > h) else float(v)
                margin = min(margin, abs(px), abs(px - w), abs(py), abs(py - h))
                kp.append([px, py, vis])
            if mirror:
                for i, j in flip_pairs:
                    kp[i], kp[j] = kp[j], kp[i]
            out_k.append(kp)
    kps = np.array(out_k, np.float64).reshape(len(out_b), 0 if keypoints is None else keypoints.shape[1], 3)
    return np.array(out_b).reshape(-1, 4), np.array(out_l, np.int64), kps, margin


def ref_warp_mask(mask: np.ndarray, inv: np.ndarray, out_size) -> tuple[np.ndarray, np.ndarray]:
    """Nearest resampling pixel by pixel: returns (warped, near_tie) (pixels whose source point lies within
    2e-3 of a rounding tie or of the source's edge, where float32 may go either way)."""
    h, w = mask.shape
    oh, ow = out_size
    out = np.full((oh, ow), IGNORE, np.uint8)
    tie = np.zeros((oh, ow), bool)
    a = np.asarray(inv, np.float64)
    for i in range(oh):
        for j in range(ow):
            x = a[0, 0] * j + a[0, 1] * i + a[0, 2]
            y = a[1, 0] * j + a[1, 1] * i + a[1, 2]
            tie[i, j] = min(abs((x + 0.5) - round(x + 0.5)), abs((y + 0.5) - round(y + 0.5))) < 2e-3
            sx, sy = int(np.floor(x + 0.5)), int(np.floor(y + 0.5))
            if 0 <= sx <= w - 1 and 0 <= sy <= h - 1:
                out[i, j] = mask[sy, sx]
    return out, tie


# --- scenes ------------------------------------------------------------------------------------------------


def scene_batch(seed: int, n: int, size: tuple[int, int], keypoints: bool = True) -> tuple[torch.Tensor, Targets]:
    """``n`` demo scenes of ``size`` = ``(width, height)``: uint8 images ``[n, 3, H, W]`` and their targets (mask too)."""
    scenes = [scene(seed, i, size) for i in range(n)]
    images = torch.from_numpy(np.stack([s.image for s in scenes])).permute(0, 3, 1, 2).contiguous()
    t = pad_objects([s.objects for s in scenes], num_keypoints=2 if keypoints else 0)
    mask = torch.from_numpy(np.stack([s.mask for s in scenes]))
    return images, Targets(t.boxes, t.labels, t.count, t.crowd, t.keypoints, mask)


def classify(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``image`` float ``[H, W, 3]`` in 0-255 -> (clean class or -1, nearest class) per pixel (fill: 255)."""
    d = np.abs(image[:, :, None, :] - PALETTE[None, None]).max(-1)  # [H, W, P]
    near = d.argmin(-1)
    clean = np.where(d.min(-1) <= CLEAN, PALETTE_CLASS[near], -1)
    return clean, PALETTE_CLASS[near]


def interior(cls: np.ndarray, c: int) -> np.ndarray:
    """Pixels whose 3x3 neighbourhood (inside the image) is all class ``c``."""
    h, w = cls.shape
    p = np.pad(cls == c, 1, constant_values=False)
    out = np.ones((h, w), bool)
    for dy in range(3):
        for dx in range(3):
            out &= p[dy : dy + h, dx : dx + w]
    return out


def check_scene(image, boxes, labels, count, mask=None, keypoints=None, *, loose=False, vflip=None):
    """Failures (strings) of one augmented scene against its own pixels.

    ``image`` float ``[3, H, W]`` in 0-1; ``boxes`` ``[M, 4]``, ``labels`` ``[M]``, ``count``; ``mask`` ``[H, W]``;
    ``keypoints`` ``[M, 2, 3]`` (left, right). ``loose``: the maps rotate or shear (an enclosing box may hold
    none of its object's pixels once clipped: only unclipped boxes must). ``vflip``: whether this sample was
    mirrored top-bottom (then its "left" keypoint lies right of its "right" one).
    """
    img = np.asarray(image, np.float64).transpose(1, 2, 0) * 255.0
    h, w = img.shape[:2]
    clean, near = classify(img)
    ys, xs = np.mgrid[0:h, 0:w] + 0.5  # pixel centres, edge coordinates
    fails: list[str] = []
    n = int(count)
    b = np.asarray(boxes, np.float64)[:n]
    lab = np.asarray(labels)[:n]
    if (np.asarray(labels)[n:] != -1).any():
        fails.append("labels beyond the count are not -1")
    for k, ((x0, y0, x1, y1), c) in enumerate(zip(b, lab)):
        if not (0 <= x0 <= x1 <= w and 0 <= y0 <= y1 <= h):
            fails.append(f"box {k} {[x0, y0, x1, y1]} is not inside the {w}x{h} image")
            continue
        clipped = x0 <= 0.5 or y0 <= 0.5 or x1 >= w - 0.5 or y1 >= h - 0.5
        if x1 - x0 < 2 or y1 - y0 < 2 or (loose and clipped):
            continue
        inside = (xs > x0 - 0.5) & (xs < x1 + 0.5) & (ys > y0 - 0.5) & (ys < y1 + 0.5)
        if not (inside & (near == c)).any():
            fails.append(f"box {k} (class {c}) {[round(v, 1) for v in (x0, y0, x1, y1)]} holds no pixel of its colour")
    for c in range(1, len(COLOURS)):
        core = interior(clean, c)
        covered = np.zeros((h, w), bool)
        for (x0, y0, x1, y1), cb in zip(b, lab):
            if cb == c:
                covered |= (xs > x0 - 1) & (xs < x1 + 1) & (ys > y0 - 1) & (ys < y1 + 1)
        lost = core & ~covered
        if lost.any():
            i, j = np.argwhere(lost)[0]
            fails.append(f"colour {c} at pixel (x={j}, y={i}) lies outside every class-{c} box")
    if mask is not None:
        m = np.asarray(mask)
        for c in [*range(len(COLOURS)), IGNORE]:
            core = interior(clean, c) & (m != c)
            if core.any():
                i, j = np.argwhere(core)[0]
                fails.append(f"pixel (x={j}, y={i}) shows colour {c} but the mask says {m[i, j]}")
        pn = np.pad(near, 1, constant_values=-2)
        for c in range(1, len(COLOURS)):
            near_c = np.zeros((h, w), bool)
            for dy in range(3):
                for dx in range(3):
                    near_c |= pn[dy : dy + h, dx : dx + w] == c
            bad = (m == c) & ~near_c
            if bad.any():
                i, j = np.argwhere(bad)[0]
                fails.append(f"mask class {c} at pixel (x={j}, y={i}) has no pixel of colour {c} next to it")
    if keypoints is not None:
        kp = np.asarray(keypoints, np.float64)[:n]
        for k, (pts, c) in enumerate(zip(kp, lab)):
            for s, (x, y, v) in enumerate(pts):
                if v <= 0:
                    continue
                if min(b[k, 2] - b[k, 0], b[k, 3] - b[k, 1]) < 1:
                    continue  # a sliver under a pixel wide shows no pixel of its colour to sit on
                if not (0 <= x <= w and 0 <= y <= h):
                    fails.append(f"keypoint {s} of object {k} at {(x, y)} is visible outside the image")
                    continue
                win = (np.abs(xs - x) <= 1.5) & (np.abs(ys - y) <= 1.5)
                at_border = x < 1.5 or y < 1.5 or x > w - 1.5 or y > h - 1.5
                if not (win & (near == c)).any() or not (at_border or (win & (near != c)).any()):
                    fails.append(
                        f"keypoint {s} of object {k} (class {c}) at {(round(x, 1), round(y, 1))} is off its edge"
                    )
            if vflip is not None and pts[0, 2] > 0 and pts[1, 2] > 0 and (pts[0, 0] < pts[1, 0]) == bool(vflip):
                fails.append(f"object {k}: keypoints 'left'/'right' in the wrong slots (vflip={bool(vflip)})")
    return fails


#: output pixels an instance pixel's centre may lie outside its box
INSTANCE_MARGIN = 2.0


def check_instances(image, boxes, labels, count, instances, mask=None, *, loose=False) -> list[str]:
    """Failures (strings) of one sample's instance map against its own pixels (the demo scenes' colours).

    ``image`` float ``[3, H, W]`` in 0-1; ``boxes`` ``[M, 4]``; ``labels`` ``[M]``; ``instances`` ``[H, W]``;
    ``mask`` ``[H, W]`` or ``None``. ``loose``: rotations or shears (an enclosing box, clipped, may be loose, but
    an object's pixels still lie inside it).
    """
    img = np.asarray(image, np.float64).transpose(1, 2, 0) * 255.0
    inst = np.asarray(instances).astype(np.int64)
    h, w = inst.shape
    _, near = classify(img)
    fails: list[str] = []
    n = int(count)
    if inst.min() < -1 or inst.max() >= max(n, 0) and inst.max() >= 0:
        fails.append(f"instance values {inst.min()}..{inst.max()} outside -1..{n - 1}")
        return fails
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    pn = np.pad(near, 1, constant_values=-2)
    for k in range(n):
        x0, y0, x1, y1 = (float(v) for v in boxes[k])
        c = int(labels[k])
        own = inst == k
        out = own & (
            (xs < x0 - INSTANCE_MARGIN)
            | (xs > x1 + INSTANCE_MARGIN)
            | (ys < y0 - INSTANCE_MARGIN)
            | (ys > y1 + INSTANCE_MARGIN)
        )
        if out.any():
            i, j = np.argwhere(out)[0]
            fails.append(f"pixel (x={j}, y={i}) of row {k} lies outside its box {[x0, y0, x1, y1]}")
        near_c = np.zeros((h, w), bool)  # a pixel of colour c within one pixel (edges blur)
        for dy in range(3):
            for dx in range(3):
                near_c |= pn[dy : dy + h, dx : dx + w] == c
        off = own & ~near_c
        if off.any():
            i, j = np.argwhere(off)[0]
            fails.append(f"pixel (x={j}, y={i}) of row {k} (class {c}) has no pixel of its colour next to it")
    if mask is not None:
        m = np.asarray(mask).astype(np.int64)
        lab = np.asarray(labels).astype(np.int64)
        both = (inst >= 0) & (m != IGNORE)
        if both.any() and (m[both] != lab[inst[both]]).any():
            i, j = np.argwhere(both & (m != lab[np.maximum(inst, 0)]))[0]
            fails.append(f"pixel (x={j}, y={i}): row {inst[i, j]} is class {lab[inst[i, j]]}, the mask says {m[i, j]}")
    return fails
