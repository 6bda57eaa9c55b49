"""Multi-crop views decoded on the training device: each sample decoded once there, every view cut from it.

``load(url, views=[...], decode_on="device")``. The worker half (:func:`encode_views`) reads each
sample's header and draws every view's crop box and flip with the worker path's own
:meth:`~shardkit.loader.decode.multicrop.ViewDecoder.view_geometry` (a pure function of seed, epoch,
sample id and view index), then sends the JPEG bytes once per sample, ``[n, V, 4]`` boxes and
``[n, V]`` flips (:class:`JpegViewBatch`). The consumer half (:func:`decode_views_on_device`)

1. decodes each sample once with the :class:`~shardkit.loader.decode.device.DeviceDecoder` of its
   device (:meth:`~shardkit.loader.decode.device.DeviceDecoder.decode`: one batched call behind a
   ``stream_barrier``, bisection of a failing batch, the CPU fallback per sample). The batched decoders
   (nvJPEG, libjpeg-turbo through TorchCodec/torchvision) decode at full resolution; the CPU fallback
   decodes at the DCT scale the sample's most demanding view allows
   (:func:`~shardkit.loader.decode.multicrop.view_reductions`), as the worker path does;
2. cuts every view with :func:`~shardkit.loader.decode.cropresize.resized_crops`: one call per
   :class:`~shardkit.loader.view.View` group over the whole batch (``count x n`` crops), each box rounded
   into decoded pixels as the worker path rounds it, into ``[n, 3, S_v, S_v]`` uint8 tensors carved in
   view order from one allocation on the device (channels-last unless the config says otherwise).

A sample no decoder reads is dropped from every view (the batch one smaller, counted in ``skipped``;
:class:`~shardkit.DataError` with ``strict``), so row ``i`` of every view is the same sample.
With ``device="cpu"`` everything runs on CPU tensors, which is how the tests check it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np
import torch
from torch import Tensor

from shardkit.format import RawSample
from shardkit.loader.batching import BatchSpec, drop_undecoded, read_headers
from shardkit.loader.batchtypes import Batch, ViewBatch
from shardkit.loader.decode.cropresize import axis_params, resized_crops
from shardkit.loader.decode.device import DeviceDecoder
from shardkit.loader.decode.jpegroute import Jpeg, jpeg_route
from shardkit.loader.decode.multicrop import ViewDecoder, view_reductions
from shardkit.loader.decode.resample import dct_size
from shardkit.loader.rows import FieldRows
from shardkit.loader.stats import Counters
from shardkit.loader.view import View, expanded, sample_bytes


@dataclass(frozen=True, eq=False)
class JpegViews:
    """A batch's encoded images and every view's crop geometry (``views=`` with ``decode_on="device"``).

    Attributes:
        data: uint8 ``[total bytes]``: the samples' JPEG bytes, one after another (each sample once).
        offsets: int64 ``[n + 1]``: sample ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
        sizes: int64 ``[n, 2]`` (width, height) from the headers.
        boxes: float64 ``[n, V, 4]``: view ``j``'s crop box of sample ``i`` (left, top, right, bottom, stored pixels).
        flips: bool ``[n, V]``.
        routes: each sample's :func:`~shardkit.loader.decode.jpegroute.jpeg_route`.
        shards: each sample's shard URL (names a sample that cannot be decoded).
        groups: the :class:`View` groups at this epoch's sizes (``set_epoch(size=)``), the sizes the consumer
            cuts at (``()``: the decoder's ``cfg.views``).
    """

    data: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    boxes: np.ndarray
    flips: np.ndarray
    routes: tuple[Optional[str], ...]
    shards: tuple[str, ...]
    groups: tuple[View, ...] = ()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def tensors(self) -> list[Tensor]:
        """The samples' bytes as 1-D uint8 tensors (views of :attr:`data`)."""
        flat, off = torch.from_numpy(self.data), self.offsets.tolist()
        return [flat[a:b] for a, b in zip(off, off[1:])]


@dataclass
class JpegViewBatch(Batch):
    """Encoded JPEGs and every view's geometry (``views=`` with ``decode_on="device"``, before the consumer decodes).

    Attributes:
        jpegs: the samples' bytes and geometry.
        labels: int64 ``[n]``.
        gids: int64 ``[n]``.
        keys: sample keys.
        extra: the rows of the other fields asked for (``fields=``), or ``None``.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ("jpegs",)
    jpegs: JpegViews
    labels: Tensor
    gids: Tensor
    keys: list[str]
    extra: Optional[FieldRows] = None


@dataclass(frozen=True)
class DecodedViews:
    """What :func:`device_views` returns for one batch.

    Attributes:
        views: one uint8 ``[n, 3, S_v, S_v]`` tensor per view, in order, on the decoder's device.
        kept: int64 ``[n]`` (numpy) positions of the returned samples in the input.
        errors: ``(position, message)`` of each dropped sample (no decoder could read it).
    """

    views: list[Tensor]
    kept: np.ndarray
    errors: tuple[tuple[int, str], ...] = ()


def encode_views(
    good: list[RawSample], *, spec: BatchSpec, decoder: ViewDecoder, counters: Counters, t0: Optional[float] = None
) -> JpegViewBatch:
    """Worker side: headers (an unreadable or oversized one skips its sample), every view's geometry, no pixels.

    ``samples`` counts what is sent; the consumer subtracts what it cannot decode.
    """
    t0 = time.perf_counter() if t0 is None else t0
    ok, sizes, gids = read_headers(good, decoder, spec, counters)
    size_arr = np.array(sizes, np.int64).reshape(-1, 2)
    crops = decoder.view_geometry(size_arr, spec.epoch, gids)
    datas: list[bytes] = [s.jpeg for s in ok]  # type: ignore[misc] # a read sample has its bytes
    lengths = np.fromiter((len(d) for d in datas), np.int64, len(datas))
    offsets = np.zeros(len(ok) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    encoded = JpegViews(
        np.frombuffer(bytearray().join(datas), np.uint8),  # one copy, writable
        offsets,
        size_arr,
        np.stack([np.asarray(c.boxes, np.float64).reshape(-1, 4) for c in crops], axis=1),
        np.stack([np.asarray(c.flips, bool) for c in crops], axis=1),
        tuple(jpeg_route(d) for d in datas),
        tuple(s.shard for s in ok),
        decoder.cfg.views,  # the epoch's sizes: the consumer's decoder has the configured ones
    )
    counters.add("collate_s", time.perf_counter() - t0)
    counters.add("samples", len(ok))
    counters.add("batches", 1)
    return JpegViewBatch(
        encoded, torch.tensor([s.label for s in ok], dtype=torch.int64), torch.from_numpy(gids), [s.key for s in ok]
    )


def cut_views(
    images: list[Tensor],
    sizes: np.ndarray,
    boxes: np.ndarray,
    flips: np.ndarray,
    groups: Sequence[View],
    *,
    channels_last: bool,
    device: torch.device,
    max_canvas_pixels: int,
) -> list[Tensor]:
    """Cut every view of ``images`` (``3 x H x W`` uint8 on ``device``, decoded at any scale of the stored size).

    Args:
        images: the decoded samples.
        sizes: int64 ``[n, 2]`` stored (width, height): the boxes' units.
        boxes: float64 ``[n, V, 4]``; ``flips``: bool ``[n, V]`` (``V = sum(count)``, in view order).
        groups: the :class:`View` groups; one :func:`resized_crops` call per group over the whole batch.
        channels_last: lay each view's bytes out ``[n, S, S, 3]``.
        device: where the views are allocated (one allocation for all of them).
        max_canvas_pixels: the canvas cap of :func:`resized_crops`.

    Returns:
        One uint8 ``[n, 3, S_v, S_v]`` tensor per view, in order.
    """
    n = len(images)
    flat = torch.empty((n * sample_bytes(tuple(groups)),), dtype=torch.uint8, device=device)
    dims = np.array([img.shape[1:] for img in images], np.float64).reshape(-1, 2)  # decoded (height, width)
    stored = np.asarray(sizes, np.float64).reshape(-1, 2)
    out: list[Tensor] = []
    start, j = 0, 0
    for g in groups:
        k, s = g.count, g.size
        part = flat[start : start + k * n * 3 * s * s]
        group = part.view(k * n, s, s, 3).permute(0, 3, 1, 2) if channels_last else part.view(k * n, 3, s, s)
        if n:  # rows view-major: crop c of sample i is row c * n + i
            b = np.asarray(boxes[:, j : j + k], np.float64).transpose(1, 0, 2).reshape(-1, 4)
            clamp = np.ones(k * n, bool)  # the box rounded into decoded pixels, as the worker path cuts it
            px = axis_params(s, np.tile(stored[:, 0], k), np.tile(dims[:, 1], k), b[:, 0], b[:, 2], clamp)
            py = axis_params(s, np.tile(stored[:, 1], k), np.tile(dims[:, 0], k), b[:, 1], b[:, 3], clamp)
            f = np.asarray(flips[:, j : j + k], bool).T.reshape(-1)
            resized_crops(images * k, px, py, f, group, max_canvas_pixels)
        out += [group[c * n : (c + 1) * n] for c in range(k)]
        start += k * n * 3 * s * s
        j += k
    return out


def device_views(
    decoder: DeviceDecoder,
    jpegs: Sequence[Jpeg],
    sizes: np.ndarray,
    boxes: np.ndarray,
    flips: np.ndarray,
    routes: Optional[Sequence[Optional[str]]] = None,
    groups: Sequence[View] = (),
) -> DecodedViews:
    """Decode each of ``jpegs`` once on ``decoder.device`` and cut every view of ``decoder.cfg.views``.

    Args:
        decoder: the device's decoder (its ``cfg`` has the views); its ``stats`` count the batch.
        jpegs: the samples' encoded bytes (``bytes`` or 1-D uint8 CPU tensors).
        sizes: int64 ``[n, 2]`` (width, height) from their headers.
        boxes: float64 ``[n, V, 4]`` every view's box; ``flips``: bool ``[n, V]``.
        routes: their :func:`jpeg_route` if already known; else computed here.
        groups: the view groups to cut (the epoch's sizes); ``()``: ``decoder.cfg.views``.

    Returns:
        :class:`DecodedViews`; a sample no decoder reads is dropped from every view and listed in ``errors``.
    """
    cfg = decoder.cfg
    groups = tuple(groups) or cfg.views
    views = expanded(groups)
    sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
    n = len(sizes)
    if len(jpegs) != n or len(boxes) != n or len(flips) != n:
        raise ValueError(f"got {len(jpegs)} images, {n} sizes, {len(boxes)} boxes and {len(flips)} flips; must match")
    boxes = np.asarray(boxes, np.float64).reshape(n, len(views), 4)
    flips = np.asarray(flips, bool).reshape(n, len(views))
    reduce = view_reductions(boxes, [v.size for v in views]).tolist()
    # the size the CPU fallback asks for: the DCT scale the most demanding view allows (the batched call: full size)
    ask = np.array([dct_size(w, h, r) for (w, h), r in zip(sizes.tolist(), reduce)], np.int64).reshape(-1, 2)
    decoded, errors = decoder.decode(jpegs, ask, routes)
    kept = np.array([i for i, img in enumerate(decoded) if img is not None], np.int64)
    images = [decoded[i] for i in kept.tolist()]
    del decoded
    out = cut_views(
        images,
        sizes[kept],
        boxes[kept],
        flips[kept],
        groups,
        channels_last=cfg.channels_last,
        device=decoder.device,
        max_canvas_pixels=decoder.max_canvas_pixels,
    )
    decoder.stats.samples += len(kept)
    decoder.stats.corrupt += len(errors)
    decoder.stats.batches += 1
    return DecodedViews(out, kept, tuple(errors))


def decode_views_on_device(
    batch: JpegViewBatch,
    decoder: DeviceDecoder,
    *,
    strict: bool,
    counters: Counters,
    source_of: Optional[Callable[[np.ndarray], np.ndarray]] = None,
) -> ViewBatch:
    """Consumer side: decode ``batch`` on ``decoder``'s device and cut its views (:func:`device_views`).

    A sample no decoder can read is dropped from every view, the batch one smaller: the worker path's skip
    rule (logged and counted in ``skipped``; :class:`~shardkit.DataError` with ``strict``). ``source_of`` (a
    mixture's: sample ids -> source index) moves a dropped sample from its source's ``samples`` to its
    ``skipped``, as the workers count theirs.
    """
    jp = batch.jpegs
    t0 = time.perf_counter()
    out = device_views(decoder, jp.tensors(), jp.sizes, jp.boxes, jp.flips, jp.routes, jp.groups)
    drop_undecoded(batch, out.errors, jp.shards, strict=strict, counters=counters, source_of=source_of)
    counters.add("decode_s", time.perf_counter() - t0)
    return ViewBatch(out.views, *batch.rows_at(out.kept))
