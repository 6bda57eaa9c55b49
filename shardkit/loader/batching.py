"""The decode stage: raw samples -> the planned batches, each decoded into one preallocated uint8 tensor.

Batch boundaries are fixed by the plan: batch ``j`` of a worker holds the samples
emitted at positions ``[j*B, (j+1)*B)``; a sample that cannot be read or decoded
makes its batch one smaller, it never pulls a sample from the next batch, so every
rank yields the same number of batches and resume stays exact.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import torch

from ..errors import DataError
from ..threads import one_thread
from .decode import CropDecoder, apply_batch_hook, apply_hook
from .reader import RawSample
from .stats import Counters

log = logging.getLogger("shardkit.loader")


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
    """

    images: torch.Tensor
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    raw: Optional[list[RawSample]] = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Sent from a worker: the image tensor travels through shared memory (torch's reducer);
        # labels and ids go inline as numpy arrays, not as two more shared-memory segments
        # (each one a file, a mapping and a file-descriptor hand-off per batch).
        return _rebuild_batch, (self.images, self.labels.numpy(), self.gids.numpy(), self.keys, self.raw)

    def pin_memory(self, device: Any = None) -> "Batch":
        """Pinned copy (called by DataLoader's pin-memory thread)."""
        return self.copied(torch.Tensor.pin_memory)

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """The batch with ``images`` and ``labels`` replaced by ``copy(tensor)`` (e.g. a pinned copy)."""
        return replace(self, images=copy(self.images), labels=copy(self.labels))


def _rebuild_batch(images: torch.Tensor, labels: np.ndarray, gids: np.ndarray, keys: list[str], raw: Optional[list[RawSample]]) -> Batch:
    return Batch(images, torch.from_numpy(labels), torch.from_numpy(gids), keys, raw)


def _skip(sample: RawSample, reason: str, strict: bool, counters: Counters) -> None:
    msg = f"sample {sample.key!r} of shard {sample.shard}: {reason}"
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
