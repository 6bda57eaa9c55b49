"""What the loader counts: per-worker counters (cheap to send with each batch) and :class:`LoaderStats`.

A worker keeps one :class:`Counters` vector per epoch, cumulative, and sends a copy
with every batch in the transport envelope (:mod:`shardkit.loader.transport`); the
main process keeps the latest vector per worker and sums them into :class:`LoaderStats`.
Stages add to the counters once per batch or per block read, never per sample.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: names of the per-worker counters sent with every batch (cumulative over the epoch)
COUNTERS = (
    "samples",
    "skipped",
    "bytes_read",
    "read_s",
    "decode_s",
    "resize_s",
    "collate_s",
    "batches",
    "retries",
    "shards_withheld",
    "cache_refetches",
    "boxes_dropped",
    "slowdowns",
    "throttled_s",
    "cache_waits",
)
_INDEX = {name: i for i, name in enumerate(COUNTERS)}
#: per-source counters of a mixture, after :data:`COUNTERS` in the same vector (one row per source)
SOURCE_COUNTERS = ("samples", "skipped", "bytes_read")


class Counters:
    """Cumulative per-worker counters of one epoch (a float64 vector, cheap to send)."""

    def __init__(self, num_sources: int = 0) -> None:
        self.v = np.zeros(len(COUNTERS) + len(SOURCE_COUNTERS) * num_sources, np.float64)

    @property
    def num_sources(self) -> int:
        """Sources with a row of per-source counters (0: not a mixture)."""
        return (len(self.v) - len(COUNTERS)) // len(SOURCE_COUNTERS)

    def add(self, name: str, value: float) -> None:
        self.v[_INDEX[name]] += value

    def add_sources(self, name: str, values: "np.ndarray | Sequence[float]") -> None:
        """Add one value per source to the per-source counter ``name`` (a mixture's)."""
        j = len(COUNTERS) + SOURCE_COUNTERS.index(name)
        self.v[j : j + len(SOURCE_COUNTERS) * len(values) : len(SOURCE_COUNTERS)] += values


@dataclass(frozen=True)
class SourceStats:
    """What one source of a mixture contributed to the epoch so far."""

    samples: int = 0
    skipped: int = 0
    bytes_read: int = 0


@dataclass(frozen=True)
class LoaderStats:
    """What one epoch (or the epoch so far) cost.

    Worker-side seconds are summed over workers (time spent per stage; ``read_s`` is the wall
    time of reads, which run on a thread that overlaps decoding);
    ``wait_s`` is wall time the training loop spent waiting for the next batch;
    ``retries`` counts remote reads that failed and were retried (from the byte offset where they broke);
    ``shards_withheld`` counts shards whose samples were all withheld because the sample index the
    manifest promised was missing, damaged or for other bytes (each is logged once; their samples are
    counted in ``skipped``); ``cache_refetches`` counts ranges read again from the store because their
    bytes in the node cache failed a checksum (the cache entry was dropped; each is logged);
    ``slowdowns`` counts remote reads the store answered "slow down" (``503 SlowDown``, ``429``), each
    of which lowered that worker's request rate; ``throttled_s`` is the time workers waited for their
    request budget (summed over workers, like ``read_s``, of which it is a part); ``cache_waits`` counts
    node-cache misses that waited for another process of the node (sharing ``cache_dir``) to finish
    downloading the same shard or sample index, instead of downloading it again.
    """

    batches: int = 0
    samples: int = 0
    skipped: int = 0
    bytes_read: int = 0
    retries: int = 0
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    read_s: float = 0.0
    decode_s: float = 0.0
    resize_s: float = 0.0
    collate_s: float = 0.0
    shards_withheld: int = 0
    cache_refetches: int = 0
    #: boxes dropped because less than ``min_visible`` of their area stayed in the crop (target fields only)
    boxes_dropped: int = 0
    slowdowns: int = 0
    throttled_s: float = 0.0
    cache_waits: int = 0
    #: per source of a mixture (one entry for a single dataset: the totals)
    sources: tuple[SourceStats, ...] = ()

    @property
    def images_per_s(self) -> float:
        """Samples per second of wall time over the epoch so far."""
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def __str__(self) -> str:
        dropped = f", {self.boxes_dropped} boxes dropped (min_visible, crowd)" if self.boxes_dropped else ""
        if self.slowdowns or self.throttled_s:
            dropped += (
                f", {self.slowdowns} slow-downs from the store, {self.throttled_s:.2f} s waiting for the request budget"
            )
        return (
            f"{self.samples} samples in {self.batches} batches, {self.skipped} skipped{dropped}, "
            f"{self.bytes_read / 1e6:.1f} MB read, {self.retries} read retries, {self.images_per_s:.0f} img/s, waited {self.wait_s:.2f} s "
            f"(workers: read {self.read_s:.2f} s, decode {self.decode_s:.2f} s, resize {self.resize_s:.2f} s, collate {self.collate_s:.2f} s)"
        )


def summarise(
    per_worker: Iterable[np.ndarray], *, batches: int, wait_s: float, elapsed_s: float, num_sources: int = 1
) -> LoaderStats:
    """:class:`LoaderStats` from the latest :class:`Counters` vector of each worker (``num_sources`` > 1: a mixture's)."""
    vectors = list(per_worker)
    width = len(COUNTERS) + (len(SOURCE_COUNTERS) * num_sources if num_sources > 1 else 0)
    tot = np.sum(vectors, axis=0) if vectors else np.zeros(width)
    d = dict(zip(COUNTERS, tot.tolist()))
    if num_sources > 1:
        rows = tot[len(COUNTERS) : width].reshape(num_sources, len(SOURCE_COUNTERS)).astype(np.int64).tolist()
        sources = tuple(SourceStats(*r) for r in rows)
    else:
        sources = (SourceStats(int(d["samples"]), int(d["skipped"]), int(d["bytes_read"])),)
    return LoaderStats(
        batches=batches,
        samples=int(d["samples"]),
        skipped=int(d["skipped"]),
        bytes_read=int(d["bytes_read"]),
        retries=int(d["retries"]),
        wait_s=wait_s,
        elapsed_s=max(0.0, elapsed_s),
        read_s=d["read_s"],
        decode_s=d["decode_s"],
        resize_s=d["resize_s"],
        collate_s=d["collate_s"],
        shards_withheld=int(d["shards_withheld"]),
        cache_refetches=int(d["cache_refetches"]),
        boxes_dropped=int(d["boxes_dropped"]),
        slowdowns=int(d["slowdowns"]),
        throttled_s=d["throttled_s"],
        cache_waits=int(d["cache_waits"]),
        sources=sources,
    )


class EpochMeter:
    """What one pass of a loader measured: each worker's latest counters, the time the loop waited, batches handed out.

    Args:
        epoch: the epoch it counts (until :meth:`start`).
    """

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.counters: dict[int, np.ndarray] = {}  #: by worker (the consumer's own at -1)
        self.wait_s = 0.0
        self.batches = 0
        self.t0 = self.t1 = 0.0

    def start(self, epoch: int) -> None:
        """A new pass of ``epoch`` starts now."""
        self.epoch, self.counters, self.wait_s, self.batches = epoch, {}, 0.0, 0
        self.t0 = time.perf_counter()

    def stats(self, num_sources: int) -> LoaderStats:
        """The pass's :class:`LoaderStats` so far."""
        return summarise(
            self.counters.values(),
            batches=self.batches,
            wait_s=self.wait_s,
            elapsed_s=self.t1 - self.t0,
            num_sources=num_sources,
        )
