"""The loader doctor behind ``shardkit bench``: throughput, per-stage costs, worker sweep, decode ceiling."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..threads import one_thread
from .config import ImageConfig
from .batching import BatchSpec, decode_batch
from .decode import CropDecoder
from .loader import load
from .stats import Counters, LoaderStats


@dataclass(frozen=True)
class SweepPoint:
    """One worker count: wall-clock throughput and where worker time went."""

    num_workers: int
    images_per_s: float
    mb_per_s: float
    stats: LoaderStats


@dataclass
class BenchReport:
    """Result of :func:`bench`."""

    url: str
    batch_size: int
    points: list[SweepPoint] = field(default_factory=list)
    decode_ceiling: float = 0.0  #: img/s of decode + crop/resize alone, one core, in process
    decoder: str = ""

    @property
    def best(self) -> Optional[SweepPoint]:
        return max(self.points, key=lambda p: p.images_per_s) if self.points else None

    def format(self) -> str:
        """A human-readable report."""
        lines = [f"shardkit bench {self.url}  (batch {self.batch_size}, decoder {self.decoder})", ""]
        lines.append(f"{'workers':>7}  {'img/s':>8}  {'MB/s':>7}  {'read':>6}  {'decode':>6}  {'resize':>6}  {'collate':>7}  {'wait/batch':>10}")
        for p in self.points:
            s = p.stats
            tot = max(1e-9, s.read_s + s.decode_s + s.resize_s + s.collate_s)
            pct = [100 * x / tot for x in (s.read_s, s.decode_s, s.resize_s, s.collate_s)]
            wait = 1000 * s.wait_s / max(1, s.batches)
            lines.append(
                f"{p.num_workers:>7}  {p.images_per_s:>8.0f}  {p.mb_per_s:>7.1f}  {pct[0]:>5.0f}%  {pct[1]:>5.0f}%  {pct[2]:>5.0f}%  {pct[3]:>6.0f}%  {wait:>8.1f}ms"
            )
        lines += ["", f"decode-only ceiling (decode + crop/resize, 1 core, in process): {self.decode_ceiling:.0f} img/s"]
        best = self.best
        if best is not None and best.images_per_s > 0:
            per_batch = self.batch_size / best.images_per_s
            lines += [
                f"best: {best.images_per_s:.0f} img/s with {best.num_workers} workers = {1000 * per_batch:.1f} ms per batch of {self.batch_size}",
                f"input-bound check: a training step that takes less than {1000 * per_batch:.1f} ms per batch of {self.batch_size} "
                "(without data loading) will wait on this loader; slower steps will not.",
                "in training, loader.stats.wait_s (time the loop waited for data) should be a small fraction of the epoch.",
            ]
        return "\n".join(lines)


def decode_ceiling(url: str, *, image: ImageConfig, seed: int = 0, samples: int = 256, **options: Any) -> tuple[float, str]:
    """img/s of the decode stage alone on the first ``samples`` samples (one core, bytes in memory).

    The same code as a worker's (:func:`shardkit.loader.batching.decode_batch`: headers, batch
    geometry, decode + crop/resize into one batch tensor), without reading or the hand-off.
    """
    raw = load(url, batch_size=64, num_workers=0, raw=True, shuffle=False, pin_memory=False, **options)
    batches = [batch for batch in itertools.islice(raw, -(-samples // 64))]
    n = sum(len(b) for b in batches)
    dec = CropDecoder(image, seed)
    spec = BatchSpec(batch_size=64, num_batches=len(batches), epoch=0)
    with one_thread():
        decode_batch(batches[0][:16], spec=spec, decoder=dec, counters=Counters())  # warm up
        t = time.perf_counter()
        for b in batches:
            decode_batch(b, spec=spec, decoder=dec, counters=Counters())
        dt = time.perf_counter() - t
    return (n / dt if dt > 0 else 0.0), dec.decoder.name


def bench(
    url: str,
    *,
    workers: Sequence[int] = (0, 1, 2),
    batches: int = 30,
    batch_size: int = 64,
    preset: str = "train",
    size: int = 224,
    **options: Any,
) -> BenchReport:
    """Measure the loader on ``url``: one epoch-slice of ``batches`` batches per worker count.

    The first batch of every worker (start-up, first shuffle block) is excluded from the rate.
    """
    image = ImageConfig(preset=preset, size=size)  # type: ignore[arg-type]
    report = BenchReport(url=url, batch_size=batch_size)
    for nw in workers:
        loader = load(url, batch_size=batch_size, num_workers=nw, preset=preset, size=size, persistent_workers=False, **options)
        n, t0, warm = 0, 0.0, max(1, nw)
        for i, (images, _) in enumerate(loader):
            if i == warm - 1:
                t0 = time.perf_counter()
            elif i >= warm:
                n += len(images)
            if i >= batches + warm - 1:
                break
        dt = time.perf_counter() - t0
        st = loader.stats
        loader.close()  # its workers must not compete with the next measurement
        mb = st.bytes_read / 1e6 * (n / max(1, st.samples))
        report.points.append(SweepPoint(nw, n / dt if dt > 0 else 0.0, mb / dt if dt > 0 else 0.0, st))
    report.decode_ceiling, report.decoder = decode_ceiling(url, image=image, **options)
    return report


def plot(report: BenchReport, path: str) -> None:
    """Save a PNG of img/s per worker count with the decode ceiling (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [p.num_workers for p in report.points]
    ax.plot(xs, [p.images_per_s for p in report.points], "o-", label="loader")
    ax.plot(xs, [report.decode_ceiling * max(1, x) for x in xs], "--", label="decode-only ceiling x workers")
    ax.set_xlabel("workers")
    ax.set_ylabel("images / s")
    ax.set_title(f"shardkit bench (batch {report.batch_size})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
