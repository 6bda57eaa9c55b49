"""The ``.objects.json`` member: a sample's boxes, their classes, crowd flags and keypoints (:class:`Objects`).

The member's rule (:func:`parse_objects`) and its one encoding (:func:`objects_bytes`); the field table and the
dataset's rule that applies them are in :mod:`shardkit.format.fields`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from shardkit.format.members import MAX_JSON_BYTES

#: most objects one sample may hold
MAX_OBJECTS = 4096
_INT64_MAX = (1 << 63) - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_decode = json.JSONDecoder().decode


@dataclass(frozen=True, eq=False)
class Objects:
    """One sample's objects (the ``.objects.json`` member), as arrays.

    Attributes:
        boxes: float32 ``[M, 4]`` ``(x0, y0, x1, y1)`` in stored-image pixels (edges at integers).
        labels: int64 ``[M]`` class indices.
        iscrowd: bool ``[M]`` (COCO crowd regions).
        keypoints: float32 ``[M, K, 3]`` ``(x, y, v)``, or ``None`` (no ``keypoints`` field).
    """

    boxes: np.ndarray
    labels: np.ndarray
    iscrowd: np.ndarray
    keypoints: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.labels)

    @classmethod
    def empty(cls, num_keypoints: int = 0) -> "Objects":
        """No object (``num_keypoints > 0``: with a ``[0, K, 3]`` keypoints array)."""
        kp = np.zeros((0, num_keypoints, 3), np.float32) if num_keypoints else None
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.int64), np.zeros(0, bool), kp)

    def take(self, keep: "np.ndarray | Sequence[int]") -> "Objects":
        """The objects at ``keep`` (indices or a boolean mask), in order."""
        kp = None if self.keypoints is None else self.keypoints[keep]
        return Objects(self.boxes[keep], self.labels[keep], self.iscrowd[keep], kp)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Objects):
            return NotImplemented
        same_kp = (self.keypoints is None) == (other.keypoints is None) and (
            self.keypoints is None or np.array_equal(self.keypoints, other.keypoints)  # type: ignore[arg-type]
        )
        return bool(
            np.array_equal(self.boxes, other.boxes)
            and np.array_equal(self.labels, other.labels)
            and np.array_equal(self.iscrowd, other.iscrowd)
            and same_kp
        )

    __hash__ = None  # type: ignore[assignment]


def _numbers(v: Any, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """``v`` as a float64 array of ``shape`` (``-1``: any length) of finite numbers; ``ValueError`` otherwise."""
    try:
        arr = np.array(v, dtype=object)
    except (ValueError, TypeError):
        raise ValueError(f"{what} are not a list of {shape} numbers") from None
    if arr.size == 0 and shape[0] == -1:
        return np.zeros((0, *shape[1:]), np.float64)
    if arr.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, arr.shape)):
        raise ValueError(f"{what} have shape {list(arr.shape)}, not {['M' if d == -1 else d for d in shape]}")
    flat = arr.reshape(-1).tolist()
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in flat):
        raise ValueError(f"{what} hold a value that is not a number")
    try:
        out = np.array(flat, np.float64).reshape(arr.shape)
    except OverflowError:
        raise ValueError(f"{what} hold a value beyond float range") from None
    if not np.isfinite(out).all():
        raise ValueError(f"{what} hold a non-finite value")
    if (np.abs(out) > _FLOAT32_MAX).any():
        raise ValueError(f"{what} hold a value beyond float32 range")
    return out


def parse_objects(data: bytes, num_classes: Optional[int] = None, num_keypoints: int = 0) -> Objects:
    """A ``.objects.json`` member as :class:`Objects`; ``ValueError`` (one line) if it breaks the rule.

    The rule: a JSON object with ``boxes`` (``M`` lists of 4 finite numbers, ``x0 < x1`` and
    ``y0 < y1``), ``labels`` (``M`` class indices in ``[0, num_classes)``), optional ``iscrowd``
    (``M`` of 0/1/false/true), and, when ``num_keypoints`` is ``K > 0``, ``keypoints`` (``M`` lists of
    ``K`` ``[x, y, v]`` with finite ``x, y`` and ``v`` in 0, 1, 2); at most :data:`MAX_OBJECTS` objects.
    Other keys are ignored (room for later fields).
    """
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"objects of {len(data)} bytes (limit {MAX_JSON_BYTES})")
    try:
        v = _decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise ValueError(f"objects {data[:40]!r} are not JSON") from None
    if not isinstance(v, dict) or "boxes" not in v or "labels" not in v:
        raise ValueError("objects are not a JSON object with 'boxes' and 'labels'")
    boxes = _numbers(v["boxes"], "boxes", (-1, 4))
    m = len(boxes)
    if m > MAX_OBJECTS:
        raise ValueError(f"{m} objects (limit {MAX_OBJECTS})")
    raw = v["labels"]
    if not isinstance(raw, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        raise ValueError("box labels are not a JSON list of class indices")
    if len(raw) != m:
        raise ValueError(f"{m} boxes but {len(raw)} box labels")
    limit = num_classes if num_classes is not None else _INT64_MAX + 1
    bad = [x for x in raw if not 0 <= x < limit]
    if bad:
        raise ValueError(f"box label {bad[0]} outside [0, {num_classes if num_classes is not None else '2**63'})")
    flat = boxes.reshape(-1, 4)
    wrong = np.flatnonzero((flat[:, 0] >= flat[:, 2]) | (flat[:, 1] >= flat[:, 3]))
    if len(wrong):
        raise ValueError(f"box {flat[wrong[0]].tolist()} is empty or reversed (want x0 < x1, y0 < y1)")
    crowd = v.get("iscrowd", [0] * m)
    if not isinstance(crowd, list) or len(crowd) != m or not all(x in (0, 1) for x in crowd):
        raise ValueError(f"iscrowd is not a list of {m} values 0 or 1")
    kp = None
    if num_keypoints:
        if "keypoints" not in v:
            raise ValueError("objects have no 'keypoints'")
        kp = _numbers(v["keypoints"], "keypoints", (-1, num_keypoints, 3)).reshape(-1, num_keypoints, 3)
        if len(kp) != m:
            raise ValueError(f"{m} boxes but keypoints for {len(kp)} objects")
        if not np.isin(kp[:, :, 2], (0, 1, 2)).all():
            raise ValueError("a keypoint visibility is not 0, 1 or 2")
    return Objects(
        flat.astype(np.float32),
        np.array(raw, np.int64).reshape(m),
        np.array(crowd, bool).reshape(m),
        None if kp is None else kp.astype(np.float32),
    )


def objects_bytes(objects: Objects) -> bytes:
    """The ``.objects.json`` member of ``objects``: compact JSON, numbers as ``repr`` writes them
    (``iscrowd`` only when a crowd region is present; ``keypoints`` when the objects have them).

    Raises:
        ValueError: objects that :func:`parse_objects` would refuse (so no writer stores one).
    """
    d: dict[str, Any] = {
        "boxes": np.asarray(objects.boxes, np.float64).reshape(-1, 4).tolist(),
        "labels": [int(x) for x in np.asarray(objects.labels).reshape(-1)],
    }
    if np.asarray(objects.iscrowd).any():
        d["iscrowd"] = [int(bool(x)) for x in np.asarray(objects.iscrowd).reshape(-1)]
    k = 0
    if objects.keypoints is not None:
        kp = np.asarray(objects.keypoints, np.float64)
        k = kp.shape[1] if kp.ndim == 3 else 0
        d["keypoints"] = kp.tolist()
    data = json.dumps(d, separators=(",", ":"), allow_nan=False).encode("ascii")
    parse_objects(data, None, k)
    return data


__all__ = ["MAX_OBJECTS", "Objects", "objects_bytes", "parse_objects"]
