"""The decode stage: raw samples -> the planned batches, each decoded into one preallocated uint8 tensor.

With ``decode_on="device"`` the worker only reads each header and computes the crop
geometry (:func:`encode_batch`); the batch carries the JPEG bytes (:class:`Jpegs`) and
the consumer decodes it on its device (:func:`decode_on_device`, called by
:class:`~shardkit.loader.ShardLoader`), with the same skip rule.

Batch boundaries are fixed by the plan: batch ``j`` of a worker holds the samples
emitted at positions ``[j*B, (j+1)*B)``; a sample that cannot be read or decoded
makes its batch one smaller, it never pulls a sample from the next batch, so every
rank yields the same number of batches and resume stays exact.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import numpy as np
import torch

from shardkit.compat import one_thread
from shardkit.errors import DataError
from shardkit.format import RawSample
from shardkit.loader.config import DecodeOn
from shardkit.loader.decode.worker import CropDecoder, Crops, apply_batch_hook, apply_hook
from shardkit.loader.stats import Counters

if TYPE_CHECKING:
    from shardkit.loader.decode.device import DeviceDecoder

log = logging.getLogger("shardkit.loader")


@dataclass(frozen=True, eq=False)
class Jpegs:
    """A batch's encoded images and crop geometry (``decode_on="device"``), made by :func:`encode_batch`.

    One flat buffer, not ``n`` bytes objects: it pickles as a few arrays, and the decoder takes
    zero-copy slices of it (:meth:`tensors`).

    Attributes:
        data: uint8 ``[total bytes]``: the samples' JPEG bytes, one after another.
        offsets: int64 ``[n + 1]``: sample ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
        sizes: int64 ``[n, 2]`` (width, height) from the headers.
        boxes: float64 ``[n, 4]`` crop boxes (:class:`~shardkit.loader.decode.worker.Crops`).
        flips: bool ``[n]``.
        routes: each sample's :func:`~shardkit.loader.decode.device.jpeg_route`.
        shards: each sample's shard URL (names a sample that cannot be decoded).
        size: the output size the worker's geometry is for (``size`` of the epoch's image options).
    """

    data: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    boxes: np.ndarray
    flips: np.ndarray
    routes: tuple[Optional[str], ...]
    shards: tuple[str, ...]
    size: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def tensors(self) -> list[torch.Tensor]:
        """The samples' bytes as 1-D uint8 tensors (views of :attr:`data`)."""
        flat, off = torch.from_numpy(self.data), self.offsets.tolist()
        return [flat[a:b] for a, b in zip(off, off[1:])]


@dataclass
class Batch:
    """One planned batch: data only (which worker made it and where its bytes live is the
    transport's business, :mod:`shardkit.loader.transport`).

    Attributes:
        images: uint8 ``[n, 3, S, S]`` (``n <= batch_size``; smaller when samples were skipped).
        labels: int64 ``[n]``.
        gids: int64 ``[n]`` global sample ids.
        keys: sample keys.
        raw: with ``raw=True``: the batch's :class:`RawSample` objects instead of images.
        encoded: with ``decode_on="device"``: the samples' JPEG bytes and crop geometry instead of
            images (``images`` is empty until :func:`decode_on_device`).
    """

    images: torch.Tensor
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    raw: Optional[list[RawSample]] = None
    encoded: Optional[Jpegs] = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Sent from a worker: the image tensor travels through shared memory (torch's reducer);
        # labels and ids go inline as numpy arrays, not as two more shared-memory segments
        # (each one a file, a mapping and a file-descriptor hand-off per batch); so do encoded bytes.
        return _rebuild_batch, (self.images, self.labels.numpy(), self.gids.numpy(), self.keys, self.raw, self.encoded)

    def pin_memory(self, device: Any = None) -> "Batch":
        """Pinned copy (called by DataLoader's pin-memory thread)."""
        return self.copied(torch.Tensor.pin_memory)

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """The batch with ``images`` and ``labels`` replaced by ``copy(tensor)`` (e.g. a pinned copy)."""
        return replace(self, images=copy(self.images), labels=copy(self.labels))


def _rebuild_batch(images: torch.Tensor, labels: np.ndarray, gids: np.ndarray, keys: list[str], raw: Optional[list[RawSample]],
                   encoded: Optional[Jpegs] = None) -> Batch:
    return Batch(images, torch.from_numpy(labels), torch.from_numpy(gids), keys, raw, encoded)


def _skip(sample: RawSample, reason: str, strict: bool, counters: Counters) -> None:
    _skip_key(sample.key, sample.shard, reason, strict, counters)


def _skip_key(key: str, shard: str, reason: str, strict: bool, counters: Counters) -> None:
    msg = f"sample {key!r} of shard {shard}: {reason}"
    if strict:
        raise DataError(f"{msg} (strict=True; pass strict=False to skip bad samples)")
    log.warning("shardkit: skipped %s", msg)
    counters.add("skipped", 1)


#: ``alloc(shape) -> uint8 tensor``: where a batch's pixels are written (the transport's slots, or plain memory)
Alloc = Callable[[tuple[int, ...]], torch.Tensor]


def plain_alloc(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 tensor in process memory."""
    return torch.empty(shape, dtype=torch.uint8)


def _alloc_images(n: int, size: int, channels_last: bool, alloc: Alloc) -> torch.Tensor:
    """A uint8 ``[n, 3, S, S]`` batch from ``alloc``; with ``channels_last`` its bytes are laid out ``[n, S, S, 3]``."""
    if channels_last:
        return alloc((n, size, size, 3)).permute(0, 3, 1, 2)
    return alloc((n, 3, size, size))


@dataclass
class BatchSpec:
    """How the batching stage works (picklable, no lambdas)."""

    batch_size: int
    num_batches: int  #: batches this worker still emits (fixed by the plan)
    epoch: int
    strict: bool = False
    raw: bool = False
    alloc: Alloc = plain_alloc  #: where batch pixels go (a module-level function or a picklable object)


def decode_batches(samples: Iterable[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters) -> Iterator[Batch]:
    """Stage 2: cut emissions into the planned batches, decode each into one preallocated uint8 tensor."""
    it = iter(samples)
    for _ in range(spec.num_batches):
        group = [s for _, s in zip(range(spec.batch_size), it)]
        t0 = time.perf_counter()
        good = []
        for s in group:
            if s.error:
                _skip(s, s.error, spec.strict, counters)
            else:
                good.append(s)
        if spec.raw:
            counters.add("samples", len(good))
            counters.add("batches", 1)
            yield Batch(torch.empty(0, dtype=torch.uint8), torch.tensor([s.label for s in good], dtype=torch.int64),
                        torch.tensor([s.gid for s in good], dtype=torch.int64), [s.key for s in good], good)
            continue
        assert decoder is not None
        if decoder.cfg.decode_on is DecodeOn.DEVICE:
            yield encode_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)
            continue
        # per-image resizes are tiny: torch's intra-op threads only add overhead (10x on a busy
        # machine). DataLoader workers run with 1 thread anyway; in the main process the user's
        # setting is restored before the batch is handed out.
        with one_thread():
            batch = decode_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)
        yield batch


def decode_batch(good: list[RawSample], *, spec: BatchSpec, decoder: CropDecoder, counters: Counters, t0: Optional[float] = None) -> Batch:
    """Decode ``good`` into one preallocated ``[n, 3, S, S]`` uint8 tensor; bad images are skipped.

    Headers first (no pixels; an unreadable or oversized one skips its sample), then
    the crop geometry of the whole batch in one vectorised call, then one decode +
    crop/resize (+ flip) per sample straight into its row of the batch, then the user's
    per-sample ``hook`` and batch-level ``batch_hook``. Counters are updated once per batch.
    """
    t0 = time.perf_counter() if t0 is None else t0
    cfg = decoder.cfg
    ok, sizes = [], []
    for s in good:
        try:
            sizes.append(decoder.header(s.jpeg))  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - any header failure is a bad sample
            _skip(s, f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)
            continue
        ok.append(s)
    gids_in = np.fromiter((s.gid for s in ok), np.int64, len(ok))
    crops = decoder.geometry(np.array(sizes, np.int64).reshape(-1, 2), spec.epoch, gids_in, eval_boxes=False)
    images = _alloc_images(len(ok), cfg.size, cfg.channels_last, spec.alloc)

    def failed(i: int, exc: Exception) -> None:  # any decoder failure is a bad sample
        _skip(ok[i], f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)

    spent = [0.0, 0.0]
    kept = decoder.decode_batch([s.jpeg for s in ok], sizes, crops, images, failed, spent)  # type: ignore[misc]
    n = len(kept)
    images = images[:n]
    if cfg.hook is not None:  # errors in the user's hooks are the user's: not skipped
        for row, i in enumerate(kept):
            apply_hook(cfg.hook, images[row], ok[i])
    keys = [ok[i].key for i in kept]
    labels = torch.tensor([ok[i].label for i in kept], dtype=torch.int64)
    if cfg.batch_hook is not None:
        apply_batch_hook(cfg.batch_hook, images, labels, keys)
    counters.add("decode_s", spent[0])
    counters.add("resize_s", spent[1])
    counters.add("collate_s", time.perf_counter() - t0 - spent[0] - spent[1])
    counters.add("samples", n)
    counters.add("batches", 1)
    return Batch(images, labels, torch.from_numpy(gids_in[kept]), keys)


def encode_batch(good: list[RawSample], *, spec: BatchSpec, decoder: CropDecoder, counters: Counters, t0: Optional[float] = None) -> Batch:
    """``decode_on="device"``, worker side: headers and crop geometry only, no pixels.

    The worker path's first two steps (:func:`~shardkit.loader.decode.device.batch_geometry`: an
    unreadable or oversized header skips its sample here, as in :func:`decode_batch`); the
    batch carries the kept samples' bytes in one flat buffer (:class:`Jpegs`), labels, ids
    and keys. ``samples`` counts what is sent; the consumer subtracts what it cannot decode.
    """
    from shardkit.loader.decode.device import (
        batch_geometry,  # here: shardkit.loader.decode.device imports the loader package
    )

    t0 = time.perf_counter() if t0 is None else t0
    gids = np.fromiter((s.gid for s in good), np.int64, len(good))
    geo = batch_geometry(decoder, [s.jpeg for s in good], spec.epoch, gids)  # type: ignore[misc]
    for i, reason in geo.errors:
        _skip(good[i], reason, spec.strict, counters)
    ok = [good[i] for i in geo.kept.tolist()]
    lengths = np.fromiter((len(s.jpeg) for s in ok), np.int64, len(ok))  # type: ignore[arg-type]
    offsets = np.zeros(len(ok) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(bytearray().join(s.jpeg for s in ok), np.uint8)  # type: ignore[misc] # one copy, writable
    encoded = Jpegs(data, offsets, geo.sizes, np.asarray(geo.crops.boxes, np.float64).reshape(-1, 4), np.asarray(geo.crops.flips, bool),
                    geo.routes, tuple(s.shard for s in ok), decoder.cfg.size)
    counters.add("collate_s", time.perf_counter() - t0)
    counters.add("samples", len(ok))
    counters.add("batches", 1)
    return Batch(torch.empty(0, dtype=torch.uint8), torch.tensor([s.label for s in ok], dtype=torch.int64),
                 torch.from_numpy(gids[geo.kept]), [s.key for s in ok], encoded=encoded)


def counters_like(v: np.ndarray) -> Counters:
    """Zeroed :class:`Counters` of ``v``'s layout (the consumer's own, summed with the workers')."""
    c = Counters()
    c.v = np.zeros_like(v)
    return c


def decode_on_device(batch: Batch, decoder: "DeviceDecoder", *, strict: bool, counters: Counters,
                     source_of: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Batch:
    """``decode_on="device"``, consumer side: decode, crop and resize ``batch.encoded`` with ``decoder``.

    A sample no decoder can read is dropped, the batch one smaller: the worker path's skip
    rule (logged and counted in ``skipped``; :class:`~shardkit.DataError` with ``strict``).
    ``source_of`` (a mixture's: sample ids -> source index) moves a dropped sample from its
    source's ``samples`` to its ``skipped``, as the workers count theirs.
    Returns the batch with ``images`` on the decoder's device and ``encoded`` gone.
    """
    jp = batch.encoded
    assert jp is not None
    t0 = time.perf_counter()
    out = decoder(jp.tensors(), jp.sizes, Crops(jp.boxes, jp.flips), jp.routes)
    for i, reason in out.errors:
        _skip_key(batch.keys[i], jp.shards[i], reason, strict, counters)
    counters.add("samples", -len(out.errors))
    if source_of is not None and out.errors:
        lost = np.bincount(source_of(batch.gids.numpy()[[i for i, _ in out.errors]]), minlength=counters.num_sources)
        counters.add_sources("samples", -lost)
        counters.add_sources("skipped", lost)
    counters.add("decode_s", time.perf_counter() - t0)
    if not out.errors:
        return Batch(out.images, batch.labels, batch.gids, batch.keys)
    kept = torch.from_numpy(out.kept)
    return Batch(out.images, batch.labels[kept], batch.gids[kept], [batch.keys[i] for i in out.kept.tolist()])
