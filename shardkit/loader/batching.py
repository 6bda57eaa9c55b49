"""The batching stage: raw samples -> the planned batches, each made by the loader's output strategy.

Batch boundaries are fixed by the plan: batch ``j`` of a worker holds the samples
emitted at positions ``[j*B, (j+1)*B)``; a sample that cannot be read or decoded
makes its batch one smaller, it never pulls a sample from the next batch, so every
rank yields the same number of batches and resume stays exact.

:func:`planned_batches` cuts the samples and applies the skip rule (:func:`skip`); what
a batch becomes is the strategy's choice (:mod:`shardkit.loader.decode.strategies`): pixels
decoded here by :func:`decode_batch` into one preallocated uint8 tensor, the raw samples,
or the encoded JPEGs and their crop geometry for the consumer's device.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional, Protocol

import numpy as np
import torch

from shardkit.errors import DataError
from shardkit.format import RawSample
from shardkit.loader.batchtypes import Batch, PixelBatch
from shardkit.loader.decode.worker import CropDecoder
from shardkit.loader.fields import RowSpec
from shardkit.loader.rows import field_rows
from shardkit.loader.stats import Counters
from shardkit.loader.targetrows import PIXEL_TARGETS, PLANE_BYTES, Pixels, decode_masks, target_rows

log = logging.getLogger("shardkit.loader")


def skip(sample: RawSample, reason: str, strict: bool, counters: Counters) -> None:
    """Skip a bad sample: logged and counted (``skipped``); with ``strict`` a :class:`~shardkit.DataError` instead."""
    skip_key(sample.key, sample.shard, reason, strict, counters)


def skip_key(key: str, shard: str, reason: str, strict: bool, counters: Counters) -> None:
    """:func:`skip` by key and shard (a sample whose bytes are gone, e.g. on the consumer's device)."""
    msg = f"sample {key!r} of shard {shard}: {reason}"
    if strict:
        raise DataError(f"{msg} (strict=True; pass strict=False to skip bad samples)")
    log.warning("shardkit: skipped %s", msg)
    counters.add("skipped", 1)


def drop_undecoded(
    batch: Batch,
    errors: "Iterable[tuple[int, str]]",
    shards: "tuple[str, ...]",
    *,
    strict: bool,
    counters: Counters,
    source_of: Optional[Callable[[np.ndarray], np.ndarray]] = None,
) -> None:
    """Count the samples of ``batch`` the consumer could not decode (``errors``: position, reason) the way the
    workers count a bad sample: each skipped (logged; :class:`~shardkit.DataError` with ``strict``) and taken out
    of ``samples``; with ``source_of`` (a mixture's: sample ids -> source index), moved from its source's
    ``samples`` to its ``skipped``. ``shards[i]`` is sample ``i``'s shard URL."""
    errors = list(errors)
    for i, reason in errors:
        skip_key(batch.keys[i], shards[i], reason, strict, counters)
    counters.add("samples", -len(errors))
    per_row = None if batch.extra is None else batch.extra.box_dropped
    if per_row is not None and errors:  # the worker counted the boxes these rows dropped: they are not handed out
        counters.add("boxes_dropped", -int(per_row[[i for i, _ in errors]].sum()))
    if source_of is not None and errors:
        lost = np.bincount(source_of(batch.gids.numpy()[[i for i, _ in errors]]), minlength=counters.num_sources)
        counters.add_sources("samples", -lost)
        counters.add_sources("skipped", lost)


#: ``alloc(shape) -> uint8 tensor``: where a batch's pixels are written (the transport's slots, or plain memory)
Alloc = Callable[[tuple[int, ...]], torch.Tensor]


def plain_alloc(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 tensor in process memory."""
    return torch.empty(shape, dtype=torch.uint8)


#: byte alignment of each part of a batch slot (images, then each pixel target plane): an int16 view needs an even
#: offset, and whole cache lines keep the planes' writes apart
ALIGN = 64


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def batch_layout(n: int, size: int, planes: "Sequence[str]") -> tuple[int, list[tuple[str, int]]]:
    """``(total bytes, [(plane, byte offset)])`` of a batch of ``n`` images of ``size`` px with the pixel target
    ``planes`` (in :data:`PIXEL_TARGETS` order) after them, each part starting at a multiple of :data:`ALIGN`."""
    pixels = n * size * size
    at, offsets = _aligned(3 * pixels), []
    for name in planes:
        offsets.append((name, at))
        at = _aligned(at + PLANE_BYTES[name] * pixels)
    return at, offsets


def _alloc_batch(
    n: int, size: int, channels_last: bool, alloc: Alloc, targets: "tuple[str, ...] | frozenset[str]"
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The batch's images (:func:`_alloc_images`) and its pixel target planes (``mask`` uint8, ``instances``
    int16, ``[n, S, S]``), all from one ``alloc`` when there are planes (:func:`batch_layout`): the transport then
    hands the whole batch over by its slot (a mask pickled on its own costs the main process a new shared segment
    per batch)."""
    names = [f for f in PIXEL_TARGETS if f in targets]
    if not names:
        return _alloc_images(n, size, channels_last, alloc), {}
    pixels = n * size * size
    total, offsets = batch_layout(n, size, names)
    flat = alloc((total,))
    head = flat[: 3 * pixels]
    images = head.view(n, size, size, 3).permute(0, 3, 1, 2) if channels_last else head.view(n, 3, size, size)
    planes = {}
    for name, at in offsets:
        plane = flat[at : at + PLANE_BYTES[name] * pixels]
        planes[name] = (plane.view(torch.int16) if PLANE_BYTES[name] == 2 else plane).view(n, size, size)
    return images, planes


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
    alloc: Alloc = plain_alloc  #: where batch pixels go (a module-level function or a picklable object)
    rows: RowSpec = RowSpec()  #: the row fields each batch carries (``fields=``; none by default)


class MakeBatch(Protocol):
    """A strategy's worker side: one planned batch's good samples -> the batch it sends."""

    def make(
        self, good: list[RawSample], *, spec: BatchSpec, decoder: Optional[CropDecoder], counters: Counters, t0: float
    ) -> Batch: ...


def planned_batches(
    samples: Iterable[RawSample],
    *,
    spec: BatchSpec,
    output: MakeBatch,
    decoder: Optional[CropDecoder],
    counters: Counters,
) -> Iterator[Batch]:
    """Stage 2: cut emissions into the planned batches, skip the samples that failed to read, ``output`` makes each batch."""
    it = iter(samples)
    for _ in range(spec.num_batches):
        group = [s for _, s in zip(range(spec.batch_size), it)]
        t0 = time.perf_counter()
        good = []
        for s in group:
            if s.error:
                skip(s, s.error, spec.strict, counters)
            else:
                good.append(s)
        batch = output.make(good, spec=spec, decoder=decoder, counters=counters, t0=t0)
        yield with_rows(batch, good, spec.rows) if spec.rows.fields else batch


def with_rows(batch: Batch, good: list[RawSample], spec: RowSpec) -> Batch:
    """``batch`` carrying the row fields of ``spec`` of its samples, found by id among ``good`` (a strategy
    drops the samples it cannot decode: row ``i`` is the sample of ``batch.gids[i]``, not ``good[i]``)."""
    by_gid = {s.gid: s for s in good}
    rows = field_rows([by_gid[g] for g in batch.gids.tolist()], spec).with_targets(batch.extra)
    return replace(batch, extra=rows)  # type: ignore[type-var]


def read_headers(
    good: list[RawSample], decoder: Any, spec: BatchSpec, counters: Counters
) -> tuple[list[RawSample], list[tuple[int, int]], np.ndarray]:
    """``(samples whose header reads, their (width, height), their gids)``; a sample whose header cannot be read
    (or declares too many pixels) is skipped and counted. ``decoder`` has a ``header(jpeg)``."""
    ok, sizes = [], []
    for s in good:
        try:
            sizes.append(decoder.header(s.jpeg))
        except Exception as exc:  # noqa: BLE001 - any header failure is a bad sample
            skip(s, f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)
            continue
        ok.append(s)
    return ok, sizes, np.fromiter((s.gid for s in ok), np.int64, len(ok))


def decode_batch(
    good: list[RawSample], *, spec: BatchSpec, decoder: CropDecoder, counters: Counters, t0: Optional[float] = None
) -> PixelBatch:
    """Decode ``good`` into one preallocated ``[n, 3, S, S]`` uint8 tensor; bad images are skipped.

    Headers first (no pixels; an unreadable or oversized one skips its sample), then
    the crop geometry of the whole batch in one vectorised call, then one decode +
    crop/resize (+ flip) per sample straight into its row of the batch, then the user's
    per-sample ``hook`` and batch-level ``batch_hook``. Counters are updated once per batch.
    With target fields (``spec.rows.targets``) the batch carries them, moved with each sample's crop
    (:mod:`shardkit.loader.targetrows`; a mask that cannot be read skips its sample, counted).
    """
    t0 = time.perf_counter() if t0 is None else t0
    cfg = decoder.cfg
    ok, sizes, gids_in = read_headers(good, decoder, spec, counters)
    targets = spec.rows.targets
    masks = None
    if any(f in targets for f in PIXEL_TARGETS):
        ok, sizes, gids_in, masks = _with_masks(ok, sizes, spec, counters)
    crops = decoder.geometry(np.array(sizes, np.int64).reshape(-1, 2), spec.epoch, gids_in, eval_boxes=False)
    images, planes = _alloc_batch(len(ok), cfg.size, cfg.channels_last, spec.alloc, targets)

    def failed(i: int, exc: Exception) -> None:  # any decoder failure is a bad sample
        skip(ok[i], f"cannot decode image ({type(exc).__name__}: {exc})", spec.strict, counters)

    spent = [0.0, 0.0]
    used = np.zeros((len(ok), 4), np.float64) if targets else None
    kept = decoder.decode_batch([s.jpeg for s in ok], sizes, crops, images, failed, spent, used)  # type: ignore[misc]
    n = len(kept)
    images = images[:n]
    extra = None
    if targets:
        assert used is not None
        extra, dropped = target_rows(
            [ok[i] for i in kept],
            None if masks is None else [masks[i] for i in kept],
            used[:n],
            crops.flips[kept],
            cfg.size,
            spec.rows,
            {name: plane[:n] for name, plane in planes.items()},
        )
        counters.add("boxes_dropped", dropped)
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
    return PixelBatch(images, labels, torch.from_numpy(gids_in[kept]), keys, extra)


def _with_masks(
    ok: list[RawSample], sizes: list[tuple[int, int]], spec: BatchSpec, counters: Counters
) -> tuple[list[RawSample], list[tuple[int, int]], np.ndarray, list[Optional[Pixels]]]:
    """``(samples, sizes, gids, masks)`` of the samples of ``ok`` whose mask decodes; the others skipped, counted."""
    masks, errors = decode_masks(ok, sizes, spec.rows.targets)
    bad = {i for i, _ in errors}
    for i, reason in errors:
        skip(ok[i], reason, spec.strict, counters)
    keep = [i for i in range(len(ok)) if i not in bad]
    ok2 = [ok[i] for i in keep]
    return (
        ok2,
        [sizes[i] for i in keep],
        np.fromiter((s.gid for s in ok2), np.int64, len(ok2)),
        [masks[i] for i in keep],
    )


def apply_batch_hook(hook: Callable, images: "torch.Tensor", labels: "torch.Tensor", keys: list[str]) -> None:
    """Run the user's batch hook on ``images`` (``[n, 3, S, S]`` uint8) in place, checking its result."""
    res = hook(images, labels, keys)
    if res is None or res is images:
        return
    if tuple(res.shape) != tuple(images.shape) or str(res.dtype) != str(images.dtype):
        raise ValueError(
            f"batch hook returned {res.dtype} {tuple(res.shape)}; it must return uint8 {tuple(images.shape)}"
        )
    images.copy_(res)


def apply_hook(hook: Optional[Callable], image: "torch.Tensor", sample: object) -> None:
    """Run the user's per-sample hook on ``image`` (3 x S x S uint8) in place, checking its result."""
    if hook is None:
        return
    res = hook(image, sample)
    if res is image:
        return
    if tuple(res.shape) != tuple(image.shape) or str(res.dtype) != str(image.dtype):
        raise ValueError(
            f"sample hook returned {res.dtype} {tuple(res.shape)}; it must return uint8 {tuple(image.shape)}"
        )
    image.copy_(res)
