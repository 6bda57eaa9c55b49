"""Multi-crop views in the worker: each sample decoded once, every view's crop cut from that one decode.

For ``views=[View(224, count=2), View(96, count=8)]`` a batch gets ten RandomResizedCrop boxes
per sample (:meth:`ViewDecoder.view_geometry`: view ``j`` of a sample reads columns
``[23 j, 23 j + 23)`` of the sample's counter-based uniforms, so each crop is a pure function of
(seed, epoch, sample id, view index), as the ``train`` preset's is of (seed, epoch, sample id)),
then per sample one JPEG decode at the DCT scale the view needing the most pixels allows (the
smallest ``min(box width, box height) / view size`` over its views), and per view one antialiased
resize (+ flip) from that decode into the view's row. The views of a batch are carved from one
buffer (one shared slot), allocated once per batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import torch

from shardkit.format import RawSample
from shardkit.loader.batching import Alloc, BatchSpec, read_headers, skip
from shardkit.loader.batchtypes import ViewBatch
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.cropgeometry import CROP_UNIFORMS, rrc_boxes, sample_uniforms
from shardkit.loader.decode.resample import dct_size, decoded_scale, resize_into
from shardkit.loader.decode.worker import CropDecoder, Crops
from shardkit.loader.stats import Counters
from shardkit.loader.view import expanded, sample_bytes


def view_buffers(n: int, cfg: ImageConfig, alloc: Alloc) -> list[torch.Tensor]:
    """One uint8 ``[n, 3, S_v, S_v]`` tensor per view, carved in order from one ``alloc`` of all their bytes."""
    flat = alloc((n * sample_bytes(cfg.views),))
    out, start = [], 0
    for v in expanded(cfg.views):
        size = n * 3 * v.size**2
        part = flat[start : start + size]
        if cfg.channels_last:
            out.append(part.view(n, v.size, v.size, 3).permute(0, 3, 1, 2))
        else:
            out.append(part.view(n, 3, v.size, v.size))
        start += size
    return out


class ViewDecoder(CropDecoder):
    """A :class:`CropDecoder` for ``cfg.views``: headers as the single-crop path, a box per view, one decode per sample.

    Args:
        cfg: image options with ``views``.
        seed: the loader's seed.
    """

    def __init__(self, cfg: ImageConfig, seed: int):
        super().__init__(cfg, seed)
        self.views = expanded(cfg.views)

    def view_geometry(self, sizes: np.ndarray, epoch: int, gids: np.ndarray) -> list[Crops]:
        """One :class:`Crops` per view (``boxes`` ``[n, 4]``, ``flips`` ``[n]``) for ``sizes`` ``[n, 2]`` (width, height)."""
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        u = sample_uniforms(self.seed, epoch, gids, CROP_UNIFORMS * len(self.views))
        out = []
        for j, v in enumerate(self.views):
            uj = u[:, CROP_UNIFORMS * j : CROP_UNIFORMS * (j + 1)]
            top, left, h, w = rrc_boxes(sizes[:, 0], sizes[:, 1], uj, v.scale, v.ratio)
            boxes = np.stack([left, top, left + w, top + h], axis=1).astype(np.float64).reshape(-1, 4)
            out.append(Crops(boxes, (uj[:, 22] < 0.5) if v.flip else np.zeros(len(sizes), bool)))
        return out

    def reductions(self, crops: list[Crops]) -> np.ndarray:
        """``[n]``: how much smaller than the stored image each sample may be decoded (its most demanding view)."""
        boxes = np.stack([np.asarray(c.boxes, np.float64).reshape(-1, 4) for c in crops], axis=1)
        return view_reductions(boxes, [v.size for v in self.views])

    def decode_views(
        self,
        datas: Sequence[bytes],
        sizes: Sequence[tuple[int, int]],
        crops: list[Crops],
        outs: list[torch.Tensor],
        failed: Callable[[int, Exception], None],
        times: Optional[list[float]] = None,
    ) -> list[int]:
        """Decode each of ``datas`` once and cut every view into the next free row of ``outs`` (one per view).

        A sample whose decode raises is reported to ``failed(i, exc)`` and leaves no row in any view.

        Returns:
            The indices into ``datas`` of the rows written, in order.
        """
        boxes = [c.boxes.tolist() for c in crops]  # type: ignore[union-attr]
        flips = [c.flips.tolist() for c in crops]
        reduce = self.reductions(crops).tolist()
        spent = times if times is not None else [0.0, 0.0]
        kept: list[int] = []
        for i, data in enumerate(datas):
            try:
                t0 = time.perf_counter()
                width, height = sizes[i]
                arr = self.decoder.decode(data, *dct_size(width, height, reduce[i]), self.fast)
                t1 = time.perf_counter()
                chw = torch.from_numpy(arr).permute(2, 0, 1)
                sx, sy = decoded_scale(width, height, arr.shape[1], arr.shape[0])
                row = len(kept)
                for j, out in enumerate(outs):
                    cut_into(chw, boxes[j][i], sx, sy, flips[j][i], out[row])
                spent[0] += t1 - t0
                spent[1] += time.perf_counter() - t1
            except Exception as exc:  # noqa: BLE001 - reported to the caller, who decides
                failed(i, exc)
                continue
            kept.append(i)
        return kept


def view_reductions(boxes: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """``[n]``: per sample the smallest ``min(box width, box height) / view size`` over its views.

    ``boxes`` is ``[n, V, 4]`` (stored-image pixels), ``sizes`` the ``V`` output sizes: how much smaller than
    the stored image a sample may be decoded so that every one of its views still has its output size.
    """
    b = np.asarray(boxes, np.float64).reshape(len(boxes), len(sizes), 4)
    per_view = np.minimum(b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]) / np.asarray(sizes, np.float64)
    return per_view.min(axis=1)


def cut_into(chw: torch.Tensor, box: Sequence[float], sx: float, sy: float, flip: bool, out: torch.Tensor) -> None:
    """Resize ``box`` (stored-image pixels) of the decoded ``chw`` (scaled ``sx``, ``sy`` from stored) into ``out``,
    rounded to decoded pixels as the single-crop path rounds it (``worker.resized_crop``), flipped if asked."""
    dh, dw = chw.shape[1], chw.shape[2]
    x0, y0 = min(dw - 1, int(round(box[0] * sx))), min(dh - 1, int(round(box[1] * sy)))
    x1, y1 = max(x0 + 1, min(dw, int(round(box[2] * sx)))), max(y0 + 1, min(dh, int(round(box[3] * sy))))
    resize_into(chw[:, y0:y1, x0:x1], out)
    if flip:
        out.copy_(out.flip(-1))


def views_batch(
    good: list[RawSample], *, spec: BatchSpec, decoder: ViewDecoder, counters: Counters, t0: Optional[float] = None
) -> ViewBatch:
    """:func:`~shardkit.loader.batching.decode_batch` for views: headers, every view's geometry, one decode per
    sample into its row of every view (one buffer for the batch); a bad sample is skipped with all its views."""
    t0 = time.perf_counter() if t0 is None else t0
    ok, sizes, gids_in = read_headers(good, decoder, spec, counters)
    crops = decoder.view_geometry(np.array(sizes, np.int64).reshape(-1, 2), spec.epoch, gids_in)
    outs = view_buffers(len(ok), decoder.cfg, spec.alloc)

    def failed(i: int, exc: Exception) -> None:  # any decoder failure is a bad sample
        skip(ok[i], f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)

    spent = [0.0, 0.0]
    kept = decoder.decode_views([s.jpeg for s in ok], sizes, crops, outs, failed, spent)  # type: ignore[misc]
    n = len(kept)
    counters.add("decode_s", spent[0])
    counters.add("resize_s", spent[1])
    counters.add("collate_s", time.perf_counter() - t0 - spent[0] - spent[1])
    counters.add("samples", n)
    counters.add("batches", 1)
    return ViewBatch(
        [v[:n] for v in outs],
        torch.tensor([ok[i].label for i in kept], dtype=torch.int64),
        torch.from_numpy(gids_in[kept]),
        [ok[i].key for i in kept],
    )
