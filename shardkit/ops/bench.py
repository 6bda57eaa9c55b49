"""The loader doctor behind ``shardkit bench``: throughput, per-stage costs, worker sweep, decode ceiling."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import torch

from shardkit.errors import ShardkitError
from shardkit.loader.api import load
from shardkit.loader.batching import BatchSpec, decode_batch
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from shardkit.loader.doctor import measure, slowest_stage, verdict
from shardkit.loader.fields import ALWAYS, OPT_IN, RowSpec, available, check_fields, parse_fields
from shardkit.loader.stats import Counters, LoaderStats
from shardkit.private_apis import one_thread


@dataclass(frozen=True)
class SweepPoint:
    """One worker count: steady-state throughput, time to the first batch, and where worker time went."""

    num_workers: int
    images_per_s: float
    mb_per_s: float
    stats: LoaderStats
    first_batch_s: float = 0.0
    stable: bool = False
    stop: str = ""
    #: img/s: half the difference between the last two timed windows (the figure's uncertainty)
    spread: float = 0.0


@dataclass
class BenchReport:
    """Result of :func:`bench`."""

    url: str
    batch_size: int
    points: list[SweepPoint] = field(default_factory=list)
    decode_ceiling: float = 0.0  #: img/s of decode + crop/resize alone, one core, in process
    decoder: str = ""
    step_ms: Optional[float] = None  #: the training step time to judge against (``--step-ms`` or measured)
    step_source: str = ""  #: where ``step_ms`` came from
    cpus: int = 1
    gpu: bool = False
    fields: tuple[str, ...] = ()  #: the fields each measured batch held (empty: ``(images, labels)`` tuples)

    @property
    def best(self) -> Optional[SweepPoint]:
        return max(self.points, key=lambda p: p.images_per_s) if self.points else None

    def verdict(self) -> Optional[str]:
        """Input-bound or not, at the best worker count, against :attr:`step_ms` (None without a step time)."""
        best = self.best
        if self.step_ms is None or best is None:
            return None
        return verdict(
            images_per_s=best.images_per_s,
            batch_size=self.batch_size,
            step_ms=self.step_ms,
            stats=best.stats,
            workers=best.num_workers,
            cpus=self.cpus,
            gpu=self.gpu,
        )

    def format(self) -> str:
        """A human-readable report (the first two columns, workers and img/s, are for scripts)."""
        shown = f", fields {', '.join(self.fields)}" if self.fields else ""
        lines = [f"shardkit bench {self.url}  (batch {self.batch_size}, decoder {self.decoder}{shown})", ""]
        lines.append(
            f"{'workers':>7}  {'img/s':>8}  {'1st batch':>9}  {'MB/s':>7}  {'read':>6}  {'decode':>6}  {'resize':>6}  "
            f"{'collate':>7}  {'wait/batch':>10}  steady"
        )
        for p in self.points:
            s = p.stats
            tot = max(1e-9, s.read_s + s.decode_s + s.resize_s + s.collate_s)
            pct = [100 * x / tot for x in (s.read_s, s.decode_s, s.resize_s, s.collate_s)]
            wait = 1000 * s.wait_s / max(1, s.batches)
            lines.append(
                f"{p.num_workers:>7}  {p.images_per_s:>8.0f}  {p.first_batch_s:>8.2f}s  {p.mb_per_s:>7.1f}  {pct[0]:>5.0f}%  {pct[1]:>5.0f}%  "
                f"{pct[2]:>5.0f}%  {pct[3]:>6.0f}%  {wait:>8.1f}ms  {'yes' if p.stable else 'no (' + p.stop + ')'}"
            )
        lines += [
            "",
            "img/s: steady state, timed from the moment every worker has delivered its first batch until two "
            "consecutive windows agree within 5 %; 1st batch: what every epoch start and resume pays",
            f"decode-only ceiling (decode + crop/resize, 1 core, in process): {self.decode_ceiling:.0f} img/s",
        ]
        small = next((p.stop for p in self.points if p.stop.startswith("too small")), "")
        if small:
            lines.append(
                f"the dataset is too small to measure ({small.split(': ', 1)[1]} warm-up and two windows "
                "within one epoch): the figures vary between runs; bench a larger dataset, or lower --batch-size or --window"
            )
        best = self.best
        if best is not None and best.images_per_s > 0:
            per_batch = self.batch_size / best.images_per_s
            stage, share = slowest_stage(best.stats)
            lines.append(
                f"best: {best.images_per_s:.0f} ± {best.spread:.0f} img/s with {best.num_workers} workers = "
                f"{1000 * per_batch:.1f} ms per batch of {self.batch_size}; the stage that limits it: {stage} "
                f"({share:.0%} of worker time)"
            )
            v = self.verdict()
            if v is not None:
                lines.append(f"verdict ({self.step_source}): {v}")
            else:
                lines.append(
                    f"a training step faster than {1000 * per_batch:.1f} ms per batch of {self.batch_size} (without data loading) "
                    "will wait on this loader: pass --step-ms T (or --model NAME) for a verdict"
                )
            lines.append(
                "in training: loader.report() (or log_every_epoch=True) gives the same diagnosis once per epoch"
            )
        return "\n".join(lines)


def decode_ceiling(
    url: str,
    *,
    image: ImageConfig,
    seed: int = 0,
    samples: int = 256,
    fields: Sequence[str] = (),
    **options: Any,
) -> tuple[float, str]:
    """img/s of the decode stage alone on the first ``samples`` samples (one core, bytes in memory).

    The same code as a worker's (:func:`shardkit.loader.batching.decode_batch`: headers, batch
    geometry, decode + crop/resize into one batch tensor, and the target ``fields`` moved with each
    crop), without reading or the hand-off.

    Raises:
        ValueError: the dataset has no samples (nothing to decode).
    """
    raw = load(url, batch_size=64, num_workers=0, raw=True, shuffle=False, pin_memory=False, **options)
    batches = [batch for batch in itertools.islice(raw, -(-samples // 64)) if len(batch)]
    if not batches:
        raise ShardkitError(f"{url} has no samples to decode: bench a split that holds samples")
    n = sum(len(b) for b in batches)
    dec = CropDecoder(image, seed)
    rows = RowSpec()
    if fields:
        rows = check_fields(tuple(fields), [raw.dataset.manifest], [url], min_visible=options.get("min_visible"))
    spec = BatchSpec(batch_size=64, num_batches=len(batches), epoch=0, rows=rows)
    with one_thread():
        decode_batch(batches[0][:16], spec=spec, decoder=dec, counters=Counters())  # warm up
        t = time.perf_counter()
        for b in batches:
            decode_batch(b, spec=spec, decoder=dec, counters=Counters())
        dt = time.perf_counter() - t
    backend = getattr(dec.decoder, "backend", "")  # decoder="torchvision": TorchCodec's decode_jpeg or torchvision's
    return (n / dt if dt > 0 else 0.0), dec.decoder.name + (f" via {backend}" if backend else "")


def bench(
    url: str,
    *,
    workers: Sequence[int] = (0, 1, 2),
    batches: int = 30,
    batch_size: int = 64,
    preset: str = "train",
    size: int = 224,
    window: int = 10,
    max_s: float = 30.0,
    step_ms: Optional[float] = None,
    step_source: str = "",
    clock: Callable[[], float] = time.perf_counter,
    fields: Optional[Sequence[str]] = None,
    **options: Any,
) -> BenchReport:
    """Measure the loader on ``url`` at each worker count, in steady state (:func:`shardkit.loader.doctor.measure`).

    The rate clock starts once every worker has delivered its first batch (start-up and the first
    shuffle block excluded; time to the first batch is reported on its own); at least ``batches``
    batches are timed, then windows of ``window`` batches until two agree within 5 %, or ``max_s``.
    A dataset with fewer batches per epoch than the warm-up and two windows is never called steady
    (``stop`` says it is too small): each window would span an epoch start.

    ``fields``: the batch fields to load, as training would ask ``load(fields=...)`` (default
    :func:`bench_fields`: every field the dataset stores, or ``(images, labels)`` tuples where that is
    an image and a class); target fields are moved with each crop of the ``preset``, as in training.

    Raises:
        ShardkitError: the split has no samples.
        ValueError: a field the dataset does not have (one line naming those it has), bad counts.
    """
    if batches < 1 or window < 1:
        raise ValueError(f"batches and window must be >= 1, got {batches}, {window}")
    from shardkit.format.snapshot import resolve

    snap = resolve(url, **(options.get("storage_options") or {}))  # a split, appended, corrected or a selection
    manifest = snap.manifest
    if snap.num_samples == 0:
        raise ShardkitError(f"{url} has no samples ({len(manifest.shards)} shards): there is nothing to measure")
    names = bench_fields(manifest) if fields is None else parse_fields(fields)
    if names:
        options = {**options, "fields": names}
    image = ImageConfig(preset=preset, size=size, decoder=options.get("decoder", "auto"))  # type: ignore[arg-type]
    device = options.pop("device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
    on_device = options.get("decode_on", "worker") == "device"
    report = BenchReport(
        url=url,
        batch_size=batch_size,
        step_ms=step_ms,
        step_source=step_source,
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        gpu=torch.cuda.is_available(),
        fields=names,
    )
    backend = ""
    for nw in workers:
        point, backend = _sweep_point(
            url,
            nw,
            batch_size=batch_size,
            preset=preset,
            size=size,
            device=device,
            on_device=on_device,
            batches=batches,
            window=window,
            max_s=max_s,
            clock=clock,
            options=options,
        )
        report.points.append(point)
    report.decode_ceiling, report.decoder = decode_ceiling(
        url, image=image, fields=names, **{k: v for k, v in options.items() if k not in ("decode_on", "fields")}
    )
    if on_device:
        report.decoder += f", decoded on {device} by {backend}"
    return report


def _sweep_point(
    url: str,
    nw: int,
    *,
    batch_size: int,
    preset: str,
    size: int,
    device: str,
    on_device: bool,
    batches: int,
    window: int,
    max_s: float,
    clock: Callable[[], float],
    options: dict[str, Any],
) -> tuple[SweepPoint, str]:
    """Measure a loader of ``nw`` workers on ``url`` (see :func:`bench`), and close it.

    Returns:
        the point, and the decoder that decoded the batches on ``device`` (``""`` unless ``on_device``).
    """
    backend = ""
    # persistent workers: a measurement longer than an epoch goes on without restarting them
    loader = load(
        url, batch_size=batch_size, num_workers=nw, preset=preset, size=size, persistent_workers=nw > 0, **options
    )
    try:
        passes = _passes((lambda: loader.iter_on(device)) if on_device else (lambda: iter(loader)))
        r = measure(
            (_batch_len(b) for b in passes),
            warm=max(1, nw),
            window=window,
            min_batches=batches,
            max_batches=max(batches, 100 * window),
            max_s=max_s,
            clock=clock,
        )
        st = loader.stats
        per_epoch, need = len(loader), max(1, nw) + 2 * window
        if per_epoch < need:  # every window spans an epoch start (refill, shuffle): figures vary 2x between runs
            r = replace(r, stable=False, stop=f"too small: {per_epoch} batches per epoch, a steady figure needs {need}")
        m = loader.dataset.manifest
        per_sample = sum(s.bytes for s in m.shards) / max(1, m.num_samples)  # workers read ahead: not bytes_read
        if on_device:
            backend = loader.device_decoder(device).backend  # the decoder that decoded the measured batches
    finally:
        loader.close()  # its workers must not compete with the next measurement
    mb_per_s = r.images_per_s * per_sample / 1e6
    return SweepPoint(nw, r.images_per_s, mb_per_s, st, r.first_batch_s, r.stable, r.stop, r.spread), backend


def bench_fields(manifest: Any) -> tuple[str, ...]:
    """The fields :func:`bench` loads by default: ``()`` (``(images, labels)`` tuples) for a dataset of an image and a
    class, else ``image`` and every field the dataset stores (its targets, captions, multi-labels), as training
    would ask for them; ``meta``, ``key`` and ``source`` (every dataset's) and the fields asked for by name only
    (``box_crowd``) are left out."""
    stored = tuple(f for f in available(manifest) if f not in ALWAYS and f not in OPT_IN)
    if set(stored) <= {"label"} and "label" in stored:
        return ()
    return ("image", *stored)


def _batch_len(batch: Any) -> int:
    """Samples in a batch: a dict batch's ``image`` (or first view), a tuple's first element."""
    images = batch["image"] if isinstance(batch, dict) else batch[0]
    return len(images[0]) if isinstance(images, list) else len(images)


def _passes(epoch: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """Batches of ``loader``, epoch after epoch (a small dataset does not end the measurement early;
    a window across an epoch boundary is slower than its neighbours, so it never ends it either)."""
    while True:
        n = 0
        for b in epoch():
            n += 1
            yield b
        if n == 0:
            return


def step_time_ms(model: str, *, batch_size: int, size: int, device: str, steps: int = 10) -> float:
    """Median milliseconds of one training step (forward, backward, SGD) of a torchvision ``model`` on
    random ``[batch_size, 3, size, size]`` inputs; bf16 autocast and channels-last on CUDA."""
    import statistics

    import torchvision

    dev = torch.device(device)
    net = torchvision.models.get_model(model, weights=None).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch_size, 3, size, size, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch_size,), device=dev)
    times = []
    for i in range(steps + 2):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:  # warm-up: kernels, allocator
            times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def plot(report: BenchReport, path: str) -> None:
    """Save a PNG: img/s per worker count (integer ticks), the decode-only ceiling for that many cores,
    and the rate a training step of ``step_ms`` consumes as a horizontal line (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    xs = [p.num_workers for p in report.points]
    ax.plot(xs, [p.images_per_s for p in report.points], "o-", lw=2, label="shardkit loader")
    ax.plot(
        xs,
        [report.decode_ceiling * min(max(1, x), report.cpus) for x in xs],
        "s--",
        color="gray",
        label=f"decode-only ceiling × min(workers, {report.cpus} CPUs)",
    )
    if report.step_ms:
        need = report.batch_size / (report.step_ms / 1000)
        ax.axhline(
            need, color="tab:red", ls=":", label=f"your step ({report.step_ms:.1f} ms/batch) consumes {need:.0f} img/s"
        )
    ax.set_xticks(sorted(set(xs)))
    ax.set_xlabel("DataLoader workers")
    ax.set_ylabel("images / s (steady state)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"shardkit bench (batch {report.batch_size}): below the red line, the GPU waits")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
