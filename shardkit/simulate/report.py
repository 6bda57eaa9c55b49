"""The simulator's report: request rates per prefix and in total, bytes per node, time to the first batch.

:func:`peak_rate` is the one aggregation with a subtlety: the most requests sent in any window of
``window`` seconds (a sliding window, not fixed one-second bins, which can halve a burst that straddles
a bin edge); it is attained by a window starting at a request, so one sorted pass finds it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np


def peak_rate(times: np.ndarray, window: float = 1.0) -> int:
    """The most of ``times`` (seconds) inside any half-open window ``[t, t + window)``."""
    t = np.sort(np.asarray(times, dtype=np.float64))
    if not len(t):
        return 0
    return int((np.searchsorted(t, t + window, side="left") - np.arange(len(t))).max())


@dataclass(frozen=True)
class PrefixRow:
    """One prefix's requests (``""``: the dataset's root)."""

    prefix: str
    requests: int
    peak_get_per_s: int
    mean_get_per_s: float
    bytes: int


@dataclass(frozen=True)
class SimReport:
    """What :func:`shardkit.simulate.simulate` found (see :meth:`text` and :meth:`to_json`).

    Attributes:
        settings: the settings it assumed (block size, prefixes, budget, topology, model constants).
        prefixes: per prefix (GET and HEAD requests for shards and their indexes; the manifest apart).
        requests: all of them; ``by_kind``: per kind as the loader sends them (``HEAD``: a size probe, none
            on S3 or HTTP, whose sizes come from the manifest; ``GET index``: a sample index; ``GET``: a
            range of a shard, or a chunk of a cache download).
        peak_get_per_s: the most requests in any 1 s window, all prefixes together.
        mean_get_per_s: requests / duration (above the peak when everything happens within a second).
        duration_s: from the first epoch's start until the last batch was consumed.
        bytes_per_s_per_node: bytes read / duration / nodes.
        requests_per_gib: requests per GiB read from the store, the start-up requests included.
        store_bytes_per_epoch: bytes read from the object store in each epoch (shards, their indexes and
            cache downloads; a node cache's hits read none).
        first_batch_s: seconds until each rank's first batch (min, median, max), first epoch.
        epoch_s: each epoch's duration.
        img_per_s_per_rank: samples per rank and epoch / mean epoch duration.
        cache_hit_rate: shards a process opened that its node's cache held, over the epochs after the
            first (None without a cache, or with one epoch).
        startup_requests: the manifest's ``GET`` of every rank, sent when the ranks start (not under the
            limiter; not in the rows above, in ``requests_per_gib``).
        waited_s: seconds all processes together waited for the limiter.
        cache_waits: shard opens that found another process of the node downloading (or done downloading)
            the shard in the same epoch: one download per node, the others wait (None without a cache).
    """

    settings: dict[str, Any]
    prefixes: tuple[PrefixRow, ...]
    requests: int
    by_kind: dict[str, int]
    peak_get_per_s: int
    mean_get_per_s: float
    duration_s: float
    bytes: int
    bytes_per_s_per_node: float
    requests_per_gib: float
    first_batch_s: tuple[float, float, float]
    epoch_s: tuple[float, ...]
    img_per_s_per_rank: float
    cache_hit_rate: Optional[float]
    startup_requests: int
    waited_s: float
    store_bytes_per_epoch: tuple[int, ...] = ()
    cache_waits: Optional[int] = None
    notes: tuple[str, ...] = field(default=())

    @property
    def peak_get_per_s_per_prefix(self) -> dict[str, int]:
        """The most requests in any 1 s window, per prefix."""
        return {r.prefix: r.peak_get_per_s for r in self.prefixes}

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values (``shardkit simulate --json``)."""
        d = asdict(self)
        d["prefixes"] = [asdict(r) for r in self.prefixes]
        d["peak_get_per_s_per_prefix"] = self.peak_get_per_s_per_prefix
        d["max_peak_get_per_s_per_prefix"] = max(self.peak_get_per_s_per_prefix.values(), default=0)
        return d

    def text(self, rows: int = 8) -> str:
        """Tables for people."""
        s = self.settings
        lines = [
            f"{s['nodes']:,} nodes x {s['ranks_per_node']} ranks x {s['workers']} workers = "
            f"{s['processes']:,} reading processes, {s['img_per_s_per_rank']:,.0f} img/s per rank, "
            f"{s['epochs']} epoch(s) of {s['samples']:,} samples in {s['shards']:,} shards",
            f"block size {_size(s['block_size'])}{' (auto)' if s['block_size_auto'] else ''}, "
            f"{s['num_prefixes']} prefix(es), budget "
            + (
                f"{s['request_budget']:,.0f} GET/s per prefix ({s['process_rate']:.3g} GET/s per process)"
                if s["request_budget"]
                else "none"
            )
            + f", {'sample index' if s['index'] else 'header walk'}, {'node cache' if s['cache'] else 'no cache'}",
            "",
            f"{'prefix':<10} {'requests':>12} {'peak GET/s':>12} {'mean GET/s':>12} {'GiB':>10}",
        ]
        ordered = sorted(self.prefixes, key=lambda r: -r.peak_get_per_s)
        for r in ordered[:rows]:
            lines.append(
                f"{r.prefix or '(root)':<10} {r.requests:>12,} {r.peak_get_per_s:>12,} "
                f"{r.mean_get_per_s:>12,.0f} {r.bytes / 2**30:>10,.1f}"
            )
        if len(ordered) > rows:
            lines.append(f"... {len(ordered) - rows} more prefixes")
        lines += [
            f"{'total':<10} {self.requests:>12,} {self.peak_get_per_s:>12,} {self.mean_get_per_s:>12,.0f} "
            f"{self.bytes / 2**30:>10,.1f}",
            "",
            "requests: " + ", ".join(f"{k} {v:,}" for k, v in self.by_kind.items()),
            f"bytes/s per node {self.bytes_per_s_per_node / 1e6:,.1f} MB/s; {self.requests_per_gib:,.1f} requests per GiB "
            "(start-up included)",
            "store bytes per epoch (GiB): " + ", ".join(f"{b / 2**30:,.2f}" for b in self.store_bytes_per_epoch),
            "time to first batch (s): min {:.3g}, median {:.3g}, max {:.3g}".format(*self.first_batch_s),
            "epoch (s): "
            + ", ".join(f"{e:.3g}" for e in self.epoch_s)
            + f"; achieved {self.img_per_s_per_rank:,.0f} img/s per rank",
            f"limiter waits: {self.waited_s:,.0f} s over all processes",
            "cache hit rate after the first epoch: "
            + ("-" if self.cache_hit_rate is None else f"{100 * self.cache_hit_rate:.1f} %")
            + ("" if self.cache_waits is None else f"; {self.cache_waits:,} opens waited for a node's one download"),
            f"startup: {self.startup_requests:,} manifest requests (a GET per rank) when the ranks start, not limited",
        ]
        return "\n".join(lines + list(self.notes))


def _size(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k and n % (1 << k) == 0:
            return f"{n >> k} {unit}"
    return f"{n:,} B"
