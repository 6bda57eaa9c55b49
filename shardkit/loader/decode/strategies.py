"""Decode strategies: the loader's output mode, chosen once (:func:`strategy_for`), as one object.

Each strategy has a worker-side stage (:meth:`DecodeStrategy.make`: a planned batch's good
samples -> the batch a worker sends) and a consumer-side finish (:meth:`DecodeStrategy.finish`:
that batch -> the batch the user gets, :meth:`DecodeStrategy.deliver`: -> what ``iter(loader)`` yields):

=====================  ====================================  ===============================  ==========================
strategy               worker makes                          consumer finishes                user gets
=====================  ====================================  ===============================  ==========================
:class:`WorkerDecode`  :class:`PixelBatch` (shared ring)     nothing                          ``(images, labels, ...)``
:class:`DeviceDecode`  :class:`JpegBatch` (bytes, geometry)  decode on the iteration's device ``(images, labels, ...)``
:class:`NoDecode`      :class:`RawBatch` (``raw=True``)      nothing                          the :class:`RawSample` list
:class:`ViewsDecode`   :class:`ViewBatch` (shared ring)      nothing                          ``(views, labels, ...)``
:class:`DeviceViews`   ``JpegViewBatch`` (bytes, geometry)   decode once, cut every view      ``(views, labels, ...)``
=====================  ====================================  ===============================  ==========================

Strategies hold no state: they travel to the workers with the dataset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Optional

import numpy as np
import torch

from shardkit.format import RawSample, fieldtable
from shardkit.format.fieldtable import Home
from shardkit.loader.batching import BatchSpec, batch_layout, decode_batch, drop_undecoded, skip
from shardkit.loader.batchtypes import Batch, JpegBatch, Jpegs, PixelBatch, RawBatch, ViewBatch
from shardkit.loader.config import DecodeOn, ImageConfig, LoaderConfig
from shardkit.loader.decode.backend import normalize_device
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry
from shardkit.loader.decode.devicetargets import encoded_targets
from shardkit.loader.decode.deviceviews import JpegViewBatch, decode_views_on_device, encode_views
from shardkit.loader.decode.multicrop import ViewDecoder, views_batch
from shardkit.loader.decode.worker import CropDecoder, Crops
from shardkit.loader.stats import Counters
from shardkit.loader.targetrows import PIXEL_TARGETS
from shardkit.loader.view import sample_bytes
from shardkit.private_apis import one_thread


class Consumer:
    """What the consumer side of one iteration offers a strategy's :meth:`~DecodeStrategy.finish`.

    Args:
        decoder: output size -> the :class:`DeviceDecoder` of this iteration's device.
        strict: raise on a bad sample instead of skipping it.
        counters: the iteration's counter vectors by worker; this process's own go in at ``-1`` on first use.
        source_of: a mixture's sample ids -> source index (``None``: one source).
    """

    def __init__(
        self,
        decoder: Callable[[int], DeviceDecoder],
        *,
        strict: bool,
        counters: dict[int, np.ndarray],
        source_of: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    ):
        self.decoder, self.strict, self.source_of = decoder, strict, source_of
        self._all = counters
        self._own: Optional[Counters] = None

    def counters(self) -> Counters:
        """This process's counters (skipped, decode_s), in the workers' layout, summed with theirs."""
        if self._own is None:
            self._own = Counters()
            self._own.v = np.zeros_like(next(iter(self._all.values())))
            self._all[-1] = self._own.v
        return self._own


class DeviceDecoders:
    """The consumer's :class:`DeviceDecoder` per (device, output size), each made on first use.

    Args:
        image: the loader's image options (a decoder for another size gets them at that size).
    """

    def __init__(self, image: ImageConfig):
        self.image = image
        self._made: dict[tuple[torch.device, int], DeviceDecoder] = {}

    def __len__(self) -> int:
        return len(self._made)

    def get(self, device: "torch.device | str" = "cpu", size: int = 0) -> DeviceDecoder:
        """The decoder of output ``size`` (0: the configured one) on ``device``."""
        image = self.image
        key = (normalize_device(device), size or image.size)  # "cuda" and "cuda:0": one decoder
        if key not in self._made:
            self._made[key] = DeviceDecoder(image if key[1] == image.size else image.updated(size=key[1]), key[0])
        return self._made[key]

    def where(self) -> str:
        """``", decoded on cpu by torchvision"``: where and by which library batches were decoded ("" if nowhere)."""
        decoders = {f"{dev} by {dec.backend}" for (dev, _), dec in self._made.items()}
        return f", decoded on {', '.join(sorted(decoders))}" if decoders else ""


class DecodeStrategy:
    """An output mode: what a worker makes of a planned batch, and what the consumer does with it."""

    uses_ring: ClassVar[bool] = False  #: the worker writes pixels into the transport's shared slots

    def decoder(self, image: ImageConfig, seed: int) -> Optional[CropDecoder]:
        """The worker's decoder for one iteration (``image`` at the epoch's output size)."""
        return CropDecoder(image, seed)

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        """Worker side: a planned batch's good samples -> the batch the worker sends."""
        raise NotImplementedError

    def finish(self, batch: Batch, consumer: Consumer) -> Batch:
        """Consumer side: the batch a worker sent -> the batch handed out (before it counts as handed out)."""
        return batch

    def deliver(self, batch: Batch, *, with_keys: bool, sources: Optional[Callable[[Batch], torch.Tensor]]) -> Any:
        """What the user gets: ``(images, labels)``, ``(images, labels, keys)``, with the sources last if asked."""
        assert isinstance(batch, PixelBatch)
        out: tuple[Any, ...] = (batch.images, batch.labels, batch.keys) if with_keys else (batch.images, batch.labels)
        if sources is not None:
            out = (*out, sources(batch))
        return out

    def slot_bytes(self, batch_size: int, size: int) -> int:
        """Bytes of one shared slot for a batch of ``size`` pixels (only where :attr:`uses_ring`)."""
        return 0

    def image_of(self, batch: Batch) -> Any:
        """The batch's ``image`` field: the images (or, :class:`ViewsDecode`, the views list)."""
        assert isinstance(batch, PixelBatch)
        return batch.images

    def deliver_fields(
        self, batch: Batch, names: tuple[str, ...], sources: Callable[[Batch], torch.Tensor]
    ) -> dict[str, Any]:
        """What the user gets with ``fields=names``: a dict of exactly those fields, in that order, each taken from
        where the field table says the batch keeps it (:class:`~shardkit.format.fieldtable.Home`)."""
        table = fieldtable.by_name()
        out: dict[str, Any] = {}
        for name in names:
            home = table[name].home
            if home is Home.ROWS:  # a row field the worker built
                out[name] = getattr(batch.extra, name)
            else:
                out[name] = _HOMES[home](self, batch, sources)
        return out


#: where a batch keeps each field that is not one of its rows (:class:`~shardkit.format.fieldtable.Home`)
def _images(strategy: DecodeStrategy, batch: Batch, sources: Callable[[Batch], torch.Tensor]) -> Any:
    return strategy.image_of(batch)


def _labels(strategy: DecodeStrategy, batch: Batch, sources: Callable[[Batch], torch.Tensor]) -> Any:
    return batch.labels


def _keys(strategy: DecodeStrategy, batch: Batch, sources: Callable[[Batch], torch.Tensor]) -> Any:
    return batch.keys


def _sources(strategy: DecodeStrategy, batch: Batch, sources: Callable[[Batch], torch.Tensor]) -> Any:
    return sources(batch)


_HOMES: dict[Home, Callable[[DecodeStrategy, Batch, Callable[[Batch], torch.Tensor]], Any]] = {
    Home.IMAGES: _images,
    Home.LABELS: _labels,
    Home.KEYS: _keys,
    Home.SOURCES: _sources,
}


class WorkerDecode(DecodeStrategy):
    """``decode_on="worker"``: the worker decodes, crops and resizes into one uint8 batch (a shared slot)."""

    uses_ring = True

    def __init__(self, planes: "tuple[str, ...]" = ()):
        self.planes = planes  #: the pixel targets (mask, instances) a slot holds beside the images

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        assert decoder is not None
        # per-image resizes are tiny: torch's intra-op threads only add overhead (10x on a busy
        # machine). DataLoader workers run with 1 thread anyway; in the main process the user's
        # setting is restored before the batch is handed out.
        with one_thread():
            return decode_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)

    def slot_bytes(self, batch_size: int, size: int) -> int:
        return batch_layout(batch_size, size, self.planes)[0]


class ViewsDecode(DecodeStrategy):
    """``views=``: the worker decodes each sample once and cuts every view into its own uint8 tensor (one shared slot)."""

    uses_ring = True

    def __init__(self, image: ImageConfig):
        self.image = image  # the slot holds every view of a full batch

    def decoder(self, image: ImageConfig, seed: int) -> Optional[CropDecoder]:
        return ViewDecoder(image, seed)

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        assert isinstance(decoder, ViewDecoder)
        with one_thread():
            return views_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)

    def deliver(self, batch: Batch, *, with_keys: bool, sources: Optional[Callable[[Batch], torch.Tensor]]) -> Any:
        """``(views, labels)``, ``(views, labels, keys)``, with the sources last if asked; ``views`` a list."""
        assert isinstance(batch, ViewBatch)
        out: tuple[Any, ...] = (batch.views, batch.labels, batch.keys) if with_keys else (batch.views, batch.labels)
        if sources is not None:
            out = (*out, sources(batch))
        return out

    def slot_bytes(self, batch_size: int, size: int) -> int:
        return batch_size * sample_bytes(self.image.views)

    def image_of(self, batch: Batch) -> Any:
        assert isinstance(batch, ViewBatch)
        return batch.views


class DeviceViews(ViewsDecode):
    """``views=`` with ``decode_on="device"``: the worker sends each JPEG once with every view's geometry, the
    consumer decodes it once on its device and cuts every view (:mod:`shardkit.loader.decode.deviceviews`)."""

    uses_ring = False

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        assert isinstance(decoder, ViewDecoder)
        return encode_views(good, spec=spec, decoder=decoder, counters=counters, t0=t0)

    def finish(self, batch: Batch, consumer: Consumer) -> Batch:
        assert isinstance(batch, JpegViewBatch)
        return decode_views_on_device(
            batch,
            consumer.decoder(0),
            strict=consumer.strict,
            counters=consumer.counters(),
            source_of=consumer.source_of,
        )

    def slot_bytes(self, batch_size: int, size: int) -> int:
        return 0


class DeviceDecode(DecodeStrategy):
    """``decode_on="device"``: the worker sends JPEG bytes and crop geometry, the consumer decodes on its device."""

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        assert decoder is not None
        return encode_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)

    def finish(self, batch: Batch, consumer: Consumer) -> Batch:
        assert isinstance(batch, JpegBatch)
        return decode_on_device(
            batch,
            consumer.decoder(batch.jpegs.size),
            strict=consumer.strict,
            counters=consumer.counters(),
            source_of=consumer.source_of,
        )


class NoDecode(DecodeStrategy):
    """``raw=True``: the samples as read (bytes, label, key); the user gets the list of :class:`RawSample`."""

    def decoder(self, image: ImageConfig, seed: int) -> Optional[CropDecoder]:
        return None

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch:
        counters.add("samples", len(good))
        counters.add("batches", 1)
        return RawBatch(
            good,
            torch.tensor([s.label for s in good], dtype=torch.int64),
            torch.tensor([s.gid for s in good], dtype=torch.int64),
            [s.key for s in good],
        )

    def deliver(self, batch: Batch, *, with_keys: bool, sources: Optional[Callable[[Batch], torch.Tensor]]) -> Any:
        assert isinstance(batch, RawBatch)
        return batch.samples  # keys and sources are in the samples


def strategy_for(config: LoaderConfig) -> DecodeStrategy:
    """The output mode of ``config``: raw samples, multi-crop views, device decode or worker decode."""
    if config.raw:
        return NoDecode()
    if config.image.views:
        return DeviceViews(config.image) if config.image.decode_on is DecodeOn.DEVICE else ViewsDecode(config.image)
    if config.image.decode_on is DecodeOn.DEVICE:
        return DeviceDecode()
    return WorkerDecode(tuple(f for f in PIXEL_TARGETS if f in config.fields))


def encode_batch(
    good: list[RawSample], *, spec: BatchSpec, decoder: CropDecoder, counters: Counters, t0: Optional[float] = None
) -> JpegBatch:
    """``decode_on="device"``, worker side: headers and crop geometry only, no pixels.

    The worker path's first two steps (:func:`~shardkit.loader.decode.device.batch_geometry`: an
    unreadable or oversized header skips its sample here, as in :func:`~shardkit.loader.batching.decode_batch`); the
    batch carries the kept samples' bytes in one flat buffer (:class:`Jpegs`), labels, ids
    and keys. ``samples`` counts what is sent; the consumer subtracts what it cannot decode.
    """
    t0 = time.perf_counter() if t0 is None else t0
    gids = np.fromiter((s.gid for s in good), np.int64, len(good))
    geo = batch_geometry(decoder, [s.jpeg for s in good], spec.epoch, gids)  # type: ignore[misc]
    for i, reason in geo.errors:
        skip(good[i], reason, spec.strict, counters)
    ok = [good[i] for i in geo.kept.tolist()]
    extra = None
    if spec.rows.targets:  # moved here, with the boxes the device will cut (devicetargets.py)
        geo, bad, extra, dropped = encoded_targets(ok, geo, spec.rows, decoder.cfg.preset, decoder.cfg.size)
        for i, reason in bad:
            skip(ok[i], reason, spec.strict, counters)
        ok = [good[i] for i in geo.kept.tolist()]
        counters.add("boxes_dropped", dropped)
    lengths = np.fromiter((len(s.jpeg) for s in ok), np.int64, len(ok))
    offsets = np.zeros(len(ok) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(bytearray().join(s.jpeg for s in ok), np.uint8)  # one copy, writable
    encoded = Jpegs(
        data,
        offsets,
        geo.sizes,
        np.asarray(geo.crops.boxes, np.float64).reshape(-1, 4),
        np.asarray(geo.crops.flips, bool),
        geo.routes,
        tuple(s.shard for s in ok),
        decoder.cfg.size,
    )
    counters.add("collate_s", time.perf_counter() - t0)
    counters.add("samples", len(ok))
    counters.add("batches", 1)
    return JpegBatch(
        encoded,
        torch.tensor([s.label for s in ok], dtype=torch.int64),
        torch.from_numpy(gids[geo.kept]),
        [s.key for s in ok],
        extra,
    )


def decode_on_device(
    batch: JpegBatch,
    decoder: DeviceDecoder,
    *,
    strict: bool,
    counters: Counters,
    source_of: Optional[Callable[[np.ndarray], np.ndarray]] = None,
) -> PixelBatch:
    """``decode_on="device"``, consumer side: decode, crop and resize ``batch.jpegs`` with ``decoder``.

    A sample no decoder can read is dropped, the batch one smaller: the worker path's skip
    rule (logged and counted in ``skipped``; :class:`~shardkit.DataError` with ``strict``).
    ``source_of`` (a mixture's: sample ids -> source index) moves a dropped sample from its
    source's ``samples`` to its ``skipped``, as the workers count theirs.
    Returns a :class:`PixelBatch` with ``images`` on the decoder's device.
    """
    jp = batch.jpegs
    t0 = time.perf_counter()
    out = decoder(jp.tensors(), jp.sizes, Crops(jp.boxes, jp.flips), jp.routes)
    drop_undecoded(batch, out.errors, jp.shards, strict=strict, counters=counters, source_of=source_of)
    counters.add("decode_s", time.perf_counter() - t0)
    return PixelBatch(out.images, *batch.rows_at(out.kept))
