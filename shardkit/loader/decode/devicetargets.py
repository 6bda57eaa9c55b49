"""``decode_on="device"`` with target fields: the worker moves the targets, the consumer decodes the pixels.

The worker knows each sample's crop before any pixel is decoded, and the consumer's device decoder decodes at
full resolution and cuts the box rounded exactly as :func:`~shardkit.loader.decode.cropresize.axis_params` says
(the same function the device resize uses, here with decoded = stored sizes). So the worker builds the target
fields of the batch it sends (:func:`~shardkit.loader.targetrows.target_rows`) with those boxes; a sample whose
mask cannot be read is skipped here, and one the device cannot decode drops every field of its row
(:meth:`~shardkit.loader.batchtypes.Batch.rows_at`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from shardkit.format import RawSample
from shardkit.loader.config import Preset
from shardkit.loader.decode.cropresize import axis_params, letterbox_params
from shardkit.loader.decode.device import BatchGeometry
from shardkit.loader.decode.worker import MAX_EVAL_ASPECT, Crops
from shardkit.loader.fields import RowSpec
from shardkit.loader.rows import FieldRows
from shardkit.loader.targetrows import PIXEL_TARGETS, decode_masks, target_rows


def device_boxes(sizes: np.ndarray, boxes: np.ndarray, preset: Preset, size: int) -> np.ndarray:
    """``[n, 4]`` the boxes the device resize really cuts (full-resolution decode), in stored pixels."""
    sizes = np.asarray(sizes, np.float64).reshape(-1, 2)
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if preset is Preset.EVAL:
        clamp = sizes.max(1) > MAX_EVAL_ASPECT * sizes.min(1)
    else:
        clamp = np.ones(len(sizes), bool)
    window = preset in (Preset.DETECT, Preset.LETTERBOX)
    out = np.empty_like(boxes)
    for axis, (lo, hi) in enumerate(((0, 2), (1, 3))):
        if window:
            p = letterbox_params(size, sizes[:, axis], sizes[:, axis], boxes[:, lo], boxes[:, hi])
        else:
            p = axis_params(size, sizes[:, axis], sizes[:, axis], boxes[:, lo], boxes[:, hi], clamp)
        out[:, lo], out[:, hi] = p[:, 0], p[:, 0] + p[:, 1] * size
    return out


def encoded_targets(
    ok: list[RawSample], geo: BatchGeometry, spec: RowSpec, preset: Preset, size: int
) -> tuple[BatchGeometry, list[tuple[int, str]], Optional[FieldRows], int]:
    """The target fields of the samples ``ok`` (those of ``geo.kept``) for a batch sent to the device.

    Returns:
        ``(geo, errors, rows, dropped)``: ``geo`` without the samples whose mask cannot be read, ``errors`` their
        ``(position in ok, reason)``, the target rows of the rest and the boxes dropped below ``min_visible``.
    """
    masks: Optional[list] = None
    errors: list[tuple[int, str]] = []
    keep = np.arange(len(ok))
    if any(f in spec.targets for f in PIXEL_TARGETS):
        masks, errors = decode_masks(ok, [tuple(s) for s in geo.sizes.tolist()], spec.targets)
        bad = {i for i, _ in errors}
        keep = np.array([i for i in range(len(ok)) if i not in bad], np.int64)
        masks = [masks[i] for i in keep.tolist()]
    crops = Crops(np.asarray(geo.crops.boxes)[keep], np.asarray(geo.crops.flips)[keep])
    geo = replace(
        geo,
        kept=geo.kept[keep],
        sizes=geo.sizes[keep],
        crops=crops,
        routes=tuple(geo.routes[i] for i in keep.tolist()),
    )
    used = device_boxes(geo.sizes, crops.boxes, preset, size)  # type: ignore[arg-type]
    rows, dropped = target_rows([ok[i] for i in keep.tolist()], masks, used, crops.flips, size, spec)
    return geo, errors, rows, dropped


__all__ = ["device_boxes", "encoded_targets"]
