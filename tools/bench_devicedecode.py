"""Benchmark: decode_on="device" (shardkit.loader.decode.device.DeviceDecoder) vs the worker path (CropDecoder).

Same shards for both: tests/support/data.write_dataset, 256-px JPEGs (341 x 256, q90,
photo-like), train preset at 224^2. Per batch, in one process:

* worker path: what a loader worker does (header, batch geometry, one DCT-scaled
  decode + antialiased resize per sample), single-threaded;
* device path: the worker-side half (headers + geometry, :func:`batch_geometry`)
  and then :class:`DeviceDecoder` (batched decode_jpeg on the device, one batched
  crop/resize/flip), then the rest of the augmentation chain of
  tools/bench_augment.py on the device (rotation 15 deg, colour jitter, random
  grayscale, normalisation -> bf16 channels_last; the crop and flip are the decoder's).

Reported: img/s of each part (on CPU everything on one thread: figures per core), the main
process's CPU seconds per batch, peak device
memory per batch (CUDA), and the decoder's fallback counts. ``--resnet50``: a ResNet-50 bf16
train step alone vs fed by the whole device path in the same stream (its cost to training). ``--e2e`` also runs the
loader with ``--workers`` workers, both through DevicePrefetcher + the same chain:
``decode_on="worker"`` (decode in the workers) against ``decode_on="device"`` (workers read
and compute geometry; the prefetcher decodes on the device in its side stream).

    python tools/bench_devicedecode.py                          # CPU smoke run (small)
    python tools/bench_devicedecode.py --device cuda --e2e --resnet50 --json out.json
    python tools/bench_devicedecode.py --backend torchvision    # the device path through torchvision's decoder

``--compare-backends``: only the batched decode (one ``decode_jpeg(list, device=...)`` call per batch, as
:class:`DeviceDecoder` makes it) through TorchCodec and through torchvision, interleaved (the order alternates
every round), ``--rounds`` rounds over the batches; the median img/s of each (what choosing TorchCodec costs)::

    python tools/bench_devicedecode.py --compare-backends --images 256 --batch 256 --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_augment import resnet50_overhead  # noqa: E402

import shardkit  # noqa: E402
from shardkit.augment import (  # noqa: E402
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    GpuAugment,
    Normalize,
    RandomGrayscale,
    RandomRotation,
)
from shardkit.loader.config import ImageConfig  # noqa: E402
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry  # noqa: E402
from shardkit.loader.decode.resample import channels_last_empty
from shardkit.loader.decode.worker import CropDecoder  # noqa: E402
from shardkit.loader.prefetch import DevicePrefetcher  # noqa: E402
from tests.support.data import write_dataset  # noqa: E402

SEED, EPOCH = 0, 0


def chain(device: torch.device) -> GpuAugment:
    """tools/bench_augment.py's chain after its crop and flip."""
    ops = [
        RandomRotation(15),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomGrayscale(0.2),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]
    return GpuAugment(ops, output_dtype=torch.bfloat16, memory_format="channels_last", seed=0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_batches(url: str, batch: int) -> list[list[Any]]:
    """Every batch of the split as the loader's raw samples (JPEG bytes, label, gid), read once."""
    loader = shardkit.load(url, raw=True, batch_size=batch, num_workers=0, shuffle=False, drop_last=True)
    return [list(b) for b in loader]


def worker_path(cfg: ImageConfig) -> Callable[[list[Any]], torch.Tensor]:
    cd = CropDecoder(cfg, SEED)

    def run(samples: list[Any]) -> torch.Tensor:
        jpegs = [s.jpeg for s in samples]
        sizes = [cd.header(j) for j in jpegs]
        crops = cd.geometry(np.array(sizes), EPOCH, np.array([s.gid for s in samples]))
        out = channels_last_empty((len(jpegs), 3, cfg.size, cfg.size))
        for i, j in enumerate(jpegs):
            cd.decode_into(j, sizes[i][0], sizes[i][1], crops.boxes[i].tolist(), bool(crops.flips[i]), out[i])
        return out

    return run


def device_path(cfg: ImageConfig, dec: DeviceDecoder, aug: GpuAugment | None) -> Callable[[list[Any]], torch.Tensor]:
    cd = CropDecoder(cfg, SEED)

    def run(samples: list[Any]) -> torch.Tensor:
        jpegs = [s.jpeg for s in samples]
        geo = batch_geometry(cd, jpegs, EPOCH, np.array([s.gid for s in samples]))
        x = dec([jpegs[i] for i in geo.kept], geo.sizes, geo.crops, geo.routes).images
        return aug(x) if aug is not None else x

    return run


def timed(
    name: str, fn: Callable[[list[Any]], torch.Tensor], batches: list[list[Any]], device: torch.device, repeats: int
) -> dict[str, float]:
    """Median img/s over ``repeats`` passes over ``batches`` (one warm-up batch first), CPU s/batch, peak memory."""
    fn(batches[0])
    sync(device)
    rates, cpus = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        for b in batches:
            n += len(fn(b))
        sync(device)
        rates.append(n / (time.perf_counter() - t0))
        cpus.append((time.process_time() - c0) / len(batches))
    res = {f"{name}_img_s": statistics.median(rates), f"{name}_main_cpu_s_per_batch": statistics.median(cpus)}
    if device.type == "cuda":
        res[f"{name}_peak_mib"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        res[f"{name}_retained_mib"] = (torch.cuda.memory_allocated(device) - base) / 2**20  # > 0 after the run: a leak
    print(
        f"  {name:<34}{res[f'{name}_img_s']:>10,.0f} img/s   main CPU {res[f'{name}_main_cpu_s_per_batch'] * 1e3:7.1f} ms/batch"
        + (f"   peak {res[f'{name}_peak_mib']:,.0f} MiB" if device.type == "cuda" else ""),
        flush=True,
    )
    return res


def compare_backends(batches: list[list[Any]], device: torch.device, rounds: int) -> dict[str, Any]:
    """Median img/s of the batched decode alone through each installed backend, interleaved, alternating order."""
    from shardkit.loader.decode.backend import BACKENDS, import_backend
    from shardkit.loader.decode.device import _as_tensor, _decode_list

    backends = []
    for b in BACKENDS:
        try:
            import_backend(b)
            backends.append(b)
        except Exception as exc:  # noqa: BLE001 - measure what is installed
            print(f"  {b}: not importable ({type(exc).__name__}: {exc})")
    tensors = [[_as_tensor(s.jpeg) for s in batch] for batch in batches]
    n = sum(len(t) for t in tensors)
    for b in backends:  # warm-up (first call loads libraries)
        _decode_list(tensors[0][:4], device, b)
    rates: dict[str, list[float]] = {b: [] for b in backends}
    for r in range(rounds):
        for b in backends if r % 2 == 0 else backends[::-1]:
            sync(device)
            t0 = time.perf_counter()
            for t in tensors:
                _decode_list(t, device, b)
            sync(device)
            rates[b].append(n / (time.perf_counter() - t0))
    res: dict[str, Any] = {"compare_rounds": rounds, "compare_images_per_round": n}
    for b in backends:
        res[f"decode_only_{b}_img_s"] = statistics.median(rates[b])
        res[f"decode_only_{b}_runs"] = [round(x, 1) for x in rates[b]]
        print(
            f"  batched decode only, {b:<12}{statistics.median(rates[b]):>10,.0f} img/s median of {rounds} "
            f"(min {min(rates[b]):,.0f}, max {max(rates[b]):,.0f})",
            flush=True,
        )
    if len(backends) == 2:
        res["torchcodec_over_torchvision"] = res["decode_only_torchcodec_img_s"] / res["decode_only_torchvision_img_s"]
        paired = statistics.median(
            a / b for a, b in zip(rates["torchcodec"], rates["torchvision"])
        )  # same round: same load
        res["torchcodec_over_torchvision_paired"] = paired
        print(
            f"  torchcodec / torchvision: {res['torchcodec_over_torchvision']:.3f} (ratio of medians), "
            f"{paired:.3f} (median of the per-round ratios)",
            flush=True,
        )
    return res


def end_to_end(url: str, cfg: ImageConfig, device: torch.device, args: argparse.Namespace) -> dict[str, float]:
    """The loader with ``--workers`` workers + DevicePrefetcher + chain: ``decode_on="worker"`` vs ``decode_on="device"``."""
    aug = chain(device)
    opts = dict(
        batch_size=args.batch, num_workers=args.workers, preset="train", size=cfg.size, drop_last=True, seed=SEED
    )
    n = args.e2e_batches

    def measure(batches: Callable[[], Any], consume: Callable[[Any], torch.Tensor]) -> tuple[float, float]:
        it, done = iter(batches()), 0
        consume(next(it))  # warm-up: workers started
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        while done < n:
            try:
                b = next(it)
            except StopIteration:  # next epoch
                it = iter(batches())
                continue
            consume(b)
            done += 1
        sync(device)
        return n * args.batch / (time.perf_counter() - t0), (time.process_time() - c0) / n

    worker_loader = shardkit.load(url, **opts)
    pf = DevicePrefetcher(worker_loader, device=device, transform=aug)
    w_rate, w_cpu = measure(lambda: pf, lambda b: b[0])
    worker_loader.close()
    device_loader = shardkit.load(url, decode_on="device", **opts)
    pf = DevicePrefetcher(device_loader, device=device, transform=aug)
    d_rate, d_cpu = measure(lambda: pf, lambda b: b[0])
    device_loader.close()
    st = device_loader.device_decoder(device).stats
    print(
        f"  end to end, {args.workers} workers + prefetch + chain: decode_on=worker {w_rate:,.0f} img/s (main CPU {w_cpu * 1e3:.1f} ms/batch); "
        f"decode_on=device {d_rate:,.0f} img/s (main CPU {d_cpu * 1e3:.1f} ms/batch; batched {st.batched}, fallback {dict(st.fallback)})",
        flush=True,
    )
    return {
        "e2e_worker_decode_img_s": w_rate,
        "e2e_worker_main_cpu_s_per_batch": w_cpu,
        "e2e_device_decode_img_s": d_rate,
        "e2e_device_main_cpu_s_per_batch": d_cpu,
        "e2e_workers": args.workers,
        "e2e_device_fallback": dict(st.fallback),
        "e2e_device_corrupt": st.corrupt,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=None, help="default 256 on CUDA, 32 on CPU")
    ap.add_argument("--images", type=int, default=None, help="images in the shards (default 2048 on CUDA, 96 on CPU)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="passes over the images, median reported (default 3 on CUDA, 1 on CPU)",
    )
    ap.add_argument(
        "--e2e",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time the loader with --workers workers, both ways",
    )
    ap.add_argument("--e2e-batches", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--resnet50",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time a ResNet-50 bf16 train step alone and fed by the device path (decode + crop + chain)",
    )
    ap.add_argument("--out", default=None, help="directory for the shards (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    ap.add_argument(
        "--backend",
        choices=["torchcodec", "torchvision"],
        default=None,
        help="the device path's JPEG backend (default: TorchCodec when installed)",
    )
    ap.add_argument(
        "--compare-backends",
        action="store_true",
        help="only time the batched decode through TorchCodec vs torchvision, interleaved (--rounds)",
    )
    ap.add_argument("--rounds", type=int, default=9, help="rounds of --compare-backends (median reported)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.batch = args.batch or (256 if cuda else 32)
    images = args.images or (2048 if cuda else 96)
    repeats = args.repeats or (3 if cuda else 1)
    name = torch.cuda.get_device_name(device) if cuda else f"CPU ({torch.get_num_threads()} threads)"
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or tmp
        t0 = time.perf_counter()
        ds = write_dataset(
            os.path.join(root, "train"),
            num_samples=images,
            shard_size=256,
            num_classes=8,
            size=(341, 256),
            distinct_images=32,
        )
        batches = raw_batches(ds.url, args.batch)
        print(
            f"device: {name}; torch {torch.__version__}; {images} 341x256 JPEGs ({time.perf_counter() - t0:.0f} s to write) in batches of "
            f"{args.batch} -> {args.size}^2; median of {repeats} passes",
            flush=True,
        )
        cfg = ImageConfig(preset="train", size=args.size)
        res: dict[str, Any] = {"device": name, "batch": args.batch, "images": images, "size": args.size}

        def save() -> None:  # after every part: a run cut short by a time limit keeps what it measured
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(res, f, indent=1)

        if args.compare_backends:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # one core per decode, as on a shared machine; figures per core on CPU
            res["threads"] = 1
            res.update(compare_backends(batches, device, args.rounds))
            torch.set_num_threads(threads)
            save()
            return 0
        dec = DeviceDecoder(cfg, device, backend=args.backend)
        res["backend"] = dec.backend
        print(f"  device path backend: {dec.backend}", flush=True)
        aug = chain(device)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as in a loader worker
        res.update(timed("worker_cropdecoder_1thread", worker_path(cfg), batches, torch.device("cpu"), repeats))
        if cuda:  # on CPU the device path runs on 1 thread too: per-core figures, no oversubscription
            torch.set_num_threads(threads)
        save()
        parts = {
            "device_decode_only": lambda b: dec.decode([s.jpeg for s in b], np.array([[341, 256]] * len(b)))[0],
            "device_decode_crop": device_path(cfg, dec, None),
            "device_decode_crop_augment": device_path(cfg, dec, aug),
        }
        for part, fn in parts.items():
            res.update(timed(part, fn, batches, device, repeats))
            save()
        if args.resnet50:
            feed = device_path(cfg, dec, aug)
            cycle = iter(range(1 << 62))

            def fed(_: torch.Tensor) -> torch.Tensor:  # the next batch through the whole device path
                return feed(batches[next(cycle) % len(batches)])

            r50 = resnet50_overhead(fed, torch.empty(args.batch, device=device), max(2, len(batches)))
            res.update({f"device_path_{k}": v for k, v in r50.items()})
            print(
                f"  ResNet-50 bf16 train step: {r50['resnet50_step_img_s']:,.0f} img/s alone, {r50['resnet50_aug_step_img_s']:,.0f} img/s "
                f"fed by decode + crop + chain in the same stream ({r50['overhead_pct']:.1f}% overhead)",
                flush=True,
            )
            save()
        res["device_decoder_stats"] = {
            "batched": dec.stats.batched,
            "fallback": dict(dec.stats.fallback),
            "retried": dec.stats.retried,
            "corrupt": dec.stats.corrupt,
        }
        print(f"  decoder stats: {res['device_decoder_stats']}")
        if args.e2e:
            try:
                res.update(end_to_end(ds.url, cfg, device, args))
            except Exception as exc:  # noqa: BLE001 - keep the figures measured so far
                res["e2e_error"] = f"{type(exc).__name__}: {exc}"
                print(f"  end to end failed: {res['e2e_error']}")
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
