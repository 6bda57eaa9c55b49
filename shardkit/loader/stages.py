"""The worker pipeline's stages: plan blocks -> raw samples -> decoded batches.

Each stage is a plain generator over the previous one's output, composed with
``webdataset.DataPipeline`` in :class:`shardkit.loader.dataset.ShardDataset`.
Batch boundaries are fixed by the plan: batch ``j`` of a worker holds the
samples emitted at positions ``[j*B, (j+1)*B)``; a sample that cannot be read
or decoded makes its batch one smaller, it never pulls a sample from the next
batch, so every rank yields the same number of batches and resume stays exact.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch

from ..errors import DataError
from ..plan import Block
from .decode import CropDecoder, apply_hook
from .pool import WorkerPool, new_segment
from .reader import RawSample, ShardReader, TarDamage
from .sources import ShardOpener

log = logging.getLogger("shardkit.loader")

#: names of the per-worker counters sent with every batch (cumulative over the epoch)
COUNTERS = ("samples", "skipped", "bytes_read", "read_s", "decode_s", "resize_s", "collate_s", "batches", "retries")


class Counters:
    """Cumulative per-worker counters of one epoch (a float64 vector, cheap to send)."""

    def __init__(self) -> None:
        self.v = np.zeros(len(COUNTERS), np.float64)

    def add(self, name: str, value: float) -> None:
        self.v[COUNTERS.index(name)] += value


@dataclass
class Batch:
    """What a worker sends for one planned batch.

    Attributes:
        images: uint8 ``[n, 3, S, S]`` (``n <= batch_size``; smaller when samples were skipped).
        labels: int64 ``[n]``.
        gids: int64 ``[n]`` global sample ids.
        keys: sample keys.
        worker: DataLoader worker id that made it.
        counters: the worker's cumulative :data:`COUNTERS` for this epoch.
        raw: with ``raw=True``: the batch's :class:`RawSample` objects instead of images.
        pool_slot: the worker's shared-memory slot holding ``images`` (-1: not pooled).
        pool_token: the slot's token (:mod:`shardkit.loader.pool`).
        copied: ``images`` is a copy (pinned), no longer the slot's memory.
    """

    images: torch.Tensor
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    worker: int = 0
    counters: np.ndarray = field(default_factory=lambda: np.zeros(len(COUNTERS)))
    raw: Optional[list[RawSample]] = None
    pool_slot: int = -1
    pool_token: int = 0
    copied: bool = False

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Sent from a worker: the image tensor travels through shared memory (torch's reducer);
        # labels and ids go inline as numpy arrays, not as two more shared-memory segments
        # (each one a file, a mapping and a file-descriptor hand-off per batch).
        return _rebuild_batch, (self.images, self.labels.numpy(), self.gids.numpy(), self.keys, self.worker, self.counters, self.raw,
                                self.pool_slot, self.pool_token, self.copied)

    def pin_memory(self, device: Any = None) -> "Batch":
        """Pinned copy (called by DataLoader's pin-memory thread)."""
        return replace(self, images=self.images.pin_memory(), labels=self.labels.pin_memory(), copied=True)


def _rebuild_batch(images: torch.Tensor, labels: np.ndarray, gids: np.ndarray, keys: list[str], worker: int, counters: np.ndarray,
                   raw: Optional[list[RawSample]], pool_slot: int, pool_token: int, copied: bool) -> Batch:
    return Batch(images, torch.from_numpy(labels), torch.from_numpy(gids), keys, worker, counters, raw, pool_slot, pool_token, copied)


def _skip(sample: RawSample, reason: str, strict: bool, counters: Counters) -> None:
    msg = f"sample {sample.key!r} of shard {sample.shard}: {reason}"
    if strict:
        raise DataError(f"{msg} (strict=True; pass strict=False to skip bad samples)")
    log.warning("shardkit: skipped %s", msg)
    counters.add("skipped", 1)


class BlockReader:
    """Reads the samples of plan blocks, keeping one shard open across consecutive blocks.

    Args:
        urls: shard URLs (manifest order).
        nbytes: shard sizes in bytes (for the cache).
        shard_offsets: global id of each shard's first sample.
        opener: opens shard URLs.
        counters: where read time and bytes are counted.
        num_classes: labels must lie in ``[0, num_classes)`` (None: any non-negative int64).
    """

    def __init__(self, urls: Sequence[str], nbytes: Sequence[int], shard_offsets: np.ndarray, opener: ShardOpener, counters: Counters,
                 num_classes: Optional[int] = None):
        self.urls, self.nbytes, self.offsets = urls, nbytes, shard_offsets
        self.num_classes = num_classes
        self.opener, self.counters = opener, counters
        self._shard = -1
        self._reader: Optional[ShardReader] = None
        self._damaged: dict[int, str] = {}
        self._counted = 0  # bytes of the open reader already counted
        self._retries = 0  # opener retries already counted

    def _count_bytes(self) -> None:
        if self._reader is not None:
            self.counters.add("bytes_read", self._reader.bytes_read - self._counted)
            self._counted = self._reader.bytes_read
        if self.opener.retries != self._retries:
            self.counters.add("retries", self.opener.retries - self._retries)
            self._retries = self.opener.retries

    def close(self) -> None:
        if self._reader is not None:
            self._count_bytes()
            self._counted = 0
            self._reader.close()
            self._reader = None
            self._shard = -1

    def _reader_for(self, shard: int, index: int) -> ShardReader:
        if self._reader is None or self._shard != shard or self._reader.index > index:
            self.close()
            self._reader = ShardReader(self.opener.open(self.urls[shard], self.nbytes[shard]), self.urls[shard], num_classes=self.num_classes)
            self._shard = shard
        return self._reader

    def read(self, gids: np.ndarray) -> list[RawSample]:
        """The samples ``gids`` (in the given, sequential order); unusable ones carry ``error``."""
        t0 = time.perf_counter()
        shards = np.searchsorted(self.offsets, gids, side="right") - 1
        out = []
        for gid, shard in zip(gids.tolist(), shards.tolist()):
            index = gid - int(self.offsets[shard])
            url = self.urls[shard]
            if shard in self._damaged:
                out.append(RawSample(key=f"#{index}", gid=gid, shard=url, index=index, error=self._damaged[shard]))
                continue
            try:
                s = self._reader_for(shard, index).read(index, gid)
            except TarDamage as exc:
                log.warning("shardkit: %s; samples after it are skipped", exc)
                self._damaged[shard] = str(exc)
                self.close()
                s = None
            if s is None:
                reason = self._damaged.get(shard) or f"shard ends before sample {index} (manifest disagrees)"
                s = RawSample(key=f"#{index}", gid=gid, shard=url, index=index, error=reason)
            out.append(s)
        self._count_bytes()
        self.counters.add("read_s", time.perf_counter() - t0)
        return out


def plan_blocks(blocks: Sequence[Block]) -> Iterator[Block]:
    """Stage 0: the worker's plan blocks."""
    yield from blocks


def _pieces(blocks: Iterable[Block], chunk: int) -> Iterator[tuple[np.ndarray, Optional[np.ndarray]]]:
    """``(gids to read, emission order or None)`` per read: a shuffled block at once; a block in
    stored order (no shuffle) ``chunk`` samples at a time, so an evaluation pass holds a batch or
    two of JPEG bytes per worker (the one emitted and the one read ahead), not its whole chunk."""
    for block in blocks:
        n = len(block.gids)
        if n > chunk and np.array_equal(block.order, np.arange(n)):
            for i in range(0, n, chunk):
                yield block.gids[i : i + chunk], None
        else:
            yield block.gids, block.order


class _BlockRead:
    """One read of ``reader`` on its own daemon thread: a worker process's exit never waits for
    it (a non-daemon thread would hold up the exit until a remote read finished)."""

    def __init__(self, reader: BlockReader, gids: np.ndarray):
        self.reader = reader
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._finished = self._close_after = False
        self._samples: list[RawSample] = []
        self._error: Optional[BaseException] = None
        threading.Thread(target=self._run, args=(gids,), name="shardkit-read", daemon=True).start()

    def _run(self, gids: np.ndarray) -> None:
        try:
            self._samples = self.reader.read(gids)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer by result()
            self._error = exc
        finally:
            with self._lock:
                self._finished, close = True, self._close_after
            self._done.set()
            if close:
                self.reader.close()

    def result(self) -> list[RawSample]:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._samples

    def close_reader_when_done(self) -> None:
        """Close the reader now, or (if this read still runs) on its thread when it ends."""
        with self._lock:
            if not self._finished:
                self._close_after = True
                return
        self.reader.close()


def read_blocks(blocks: Iterable[Block], *, reader: BlockReader, chunk: int = 64, read_ahead: bool = True) -> Iterator[RawSample]:
    """Stage 1: read each block sequentially, emit its samples in the block's shuffled order.

    With ``read_ahead`` the next block is read on a background thread while this one is
    emitted (decoded), so a remote shard's round trips (or a cold disk) overlap with
    decoding instead of stalling the worker (memory: two blocks of JPEG bytes per worker).
    A block's read starts only once the previous read has succeeded, so at most one read is
    in flight, the reader is never used by two threads, and a failed read surfaces at once.
    Closing the stage early does not wait for an in-flight read: its thread closes the
    reader when that read ends.
    """
    pieces = _pieces(blocks, chunk)
    if not read_ahead:
        try:
            for gids, order in pieces:
                yield from _emit(reader.read(gids), order)
        finally:
            reader.close()
        return
    inflight: Optional[tuple[_BlockRead, Optional[np.ndarray]]] = None
    try:
        first = next(pieces, None)
        if first is not None:
            inflight = _BlockRead(reader, first[0]), first[1]
        while inflight is not None:
            read, order = inflight
            inflight = None
            samples = read.result()  # raises the read's error here, in order
            nxt = next(pieces, None)
            if nxt is not None:
                inflight = _BlockRead(reader, nxt[0]), nxt[1]
            yield from _emit(samples, order)
    finally:
        if inflight is not None:
            inflight[0].close_reader_when_done()
        else:
            reader.close()


def _emit(samples: list[RawSample], order: Optional[np.ndarray]) -> Iterator[RawSample]:
    if order is None:
        yield from samples
    else:
        for i in order.tolist():
            yield samples[i]


class _one_thread:
    """Run torch ops single-threaded inside (restored on exit, also on errors)."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        if self.threads != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.threads != 1:
            torch.set_num_threads(self.threads)


def _alloc(shape: tuple[int, int, int, int], spec: "BatchSpec", channels_last: bool) -> tuple[torch.Tensor, int, int]:
    """A uint8 ``[n, 3, S, S]`` batch and its pool ``(slot, token)``.

    Inside DataLoader workers it lives in shared memory (so the hand-off to the main
    process copies nothing): a reused pool slot when one is free, else a new segment.
    With ``channels_last`` its bytes are laid out ``[n, S, S, 3]``.
    """
    n, c, h, w = shape
    phys = (n, h, w, c) if channels_last else shape
    slot, token = -1, 0
    if spec.pool is not None:
        t, slot, token = spec.pool.take(phys)
    elif spec.shared:
        t = new_segment(phys)
    else:
        t = torch.empty(phys, dtype=torch.uint8)
    return (t.permute(0, 3, 1, 2) if channels_last else t), slot, token


@dataclass
class BatchSpec:
    """How the batching stage works (picklable, no lambdas)."""

    batch_size: int
    num_batches: int  #: batches this worker still emits (fixed by the plan)
    epoch: int
    strict: bool = False
    raw: bool = False
    shared: bool = False
    worker: int = 0
    pool: Optional[WorkerPool] = None


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
                        torch.tensor([s.gid for s in good], dtype=torch.int64), [s.key for s in good], spec.worker, counters.v.copy(), good)
            continue
        assert decoder is not None
        # per-image resizes are tiny: torch's intra-op threads only add overhead (10x on a busy
        # machine). DataLoader workers run with 1 thread anyway; in the main process the user's
        # setting is restored before the batch is handed out.
        with _one_thread():
            batch = _decode_one_batch(good, spec=spec, decoder=decoder, counters=counters, t0=t0)
        yield batch


def _decode_one_batch(good: list[RawSample], *, spec: BatchSpec, decoder: CropDecoder, counters: Counters, t0: float) -> Batch:
    """Decode ``good`` into one preallocated ``[n, 3, S, S]`` uint8 tensor; bad images are skipped.

    Headers first (no pixels; an unreadable or oversized one skips its sample), then
    the crop geometry of the whole batch in one vectorised call, then one decode +
    crop/resize per sample straight into its slot of the batch.
    """
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
    crops = decoder.geometry(np.array(sizes, np.int64).reshape(-1, 2), spec.epoch, gids_in)
    boxes, flips = crops.boxes.tolist(), crops.flips.tolist()
    images, slot, token = _alloc((len(ok), 3, cfg.size, cfg.size), spec, cfg.channels_last)
    kept, keys = [], []
    before = decoder.times.copy()
    for i, s in enumerate(ok):
        out = images[len(kept)]
        try:
            decoder.decode_into(s.jpeg, sizes[i][0], sizes[i][1], boxes[i], flips[i], out)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - any decoder failure is a bad sample
            _skip(s, f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)
            continue
        apply_hook(cfg.hook, out, s)  # errors in the user's hook are the user's: not skipped
        kept.append(i)
        keys.append(s.key)
    n = len(kept)
    labels = torch.tensor([ok[i].label for i in kept], dtype=torch.int64)
    spent = decoder.times - before
    counters.add("decode_s", spent[0])
    counters.add("resize_s", spent[1])
    counters.add("collate_s", time.perf_counter() - t0 - spent.sum())
    counters.add("samples", n)
    counters.add("batches", 1)
    return Batch(images[:n], labels, torch.from_numpy(gids_in[kept]), keys, spec.worker, counters.v.copy(), pool_slot=slot, pool_token=token)
