"""Benchmark: shardkit GpuAugment vs per-image torchvision v2 vs Kornia, same chain.

The chain: random resized crop (input-size -> size), horizontal flip, rotation
(+-15 deg, bilinear), colour jitter (0.4, 0.4, 0.4, 0.1), random grayscale
(0.2), ImageNet normalisation, output bfloat16 channels_last. Inputs are
uint8 [B, 3, S, S] already on the device; every contender includes its
uint8 -> float conversion and the final cast. Figures are medians over
``--repeats`` runs of ``--iters`` batches, synchronised on CUDA.

    python tools/bench_augment.py                      # CPU, small iteration counts
    python tools/bench_augment.py --device cuda --compile --e2e

``--e2e`` also times a JPEG-decoding DataLoader alone against the same loader
wrapped in DevicePrefetcher + GpuAugment, and the main process's CPU seconds
per batch for both.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    GpuAugment,
    HorizontalFlip,
    Normalize,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
)
from shardkit.loader.prefetch import DevicePrefetcher


def shardkit_aug(
    size: int, compile: bool, compile_mode: str | None, compute_dtype: torch.dtype = torch.float32
) -> Callable[[torch.Tensor], torch.Tensor]:
    ops = [
        RandomResizedCrop(size),
        HorizontalFlip(0.5),
        RandomRotation(15),
        ColorJitter(0.4, 0.4, 0.4, 0.1),
        RandomGrayscale(0.2),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ]
    aug = GpuAugment(
        ops, output_dtype=torch.bfloat16, memory_format="channels_last", seed=0, compute_dtype=compute_dtype
    )
    if not compile:
        return aug
    # what GpuAugment(compile=True) does, with a selectable mode: eager sampling, compiled apply
    apply = torch.compile(aug.apply, dynamic=False, mode=compile_mode)

    def run(x: torch.Tensor) -> torch.Tensor:
        return apply(x, aug.sample_params(x.shape[0], (x.shape[2], x.shape[3]), x.device))[0]

    return run


def torchvision_per_image(size: int) -> Callable[[torch.Tensor], torch.Tensor]:
    from torchvision.transforms import InterpolationMode, v2

    t = v2.Compose(
        [
            v2.RandomResizedCrop(size, antialias=False),
            v2.RandomHorizontalFlip(),
            v2.RandomRotation(15, interpolation=InterpolationMode.BILINEAR),
            v2.ToDtype(torch.float32, scale=True),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.RandomGrayscale(0.2),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )

    def run(x: torch.Tensor) -> torch.Tensor:
        out = torch.stack([t(img) for img in x])
        return out.to(dtype=torch.bfloat16, memory_format=torch.channels_last)

    return run


def kornia_sequential(size: int, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor] | None:
    try:
        import kornia.augmentation as K
    except ImportError:
        return None
    aug = K.AugmentationSequential(
        K.RandomResizedCrop((size, size)),
        K.RandomHorizontalFlip(),
        K.RandomRotation(15.0),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1),
        K.RandomGrayscale(p=0.2),
        K.Normalize(mean=torch.tensor(IMAGENET_MEAN), std=torch.tensor(IMAGENET_STD)),
    ).to(device)

    def run(x: torch.Tensor) -> torch.Tensor:
        out = aug(x.float().div_(255))
        return out.to(dtype=torch.bfloat16, memory_format=torch.channels_last)

    return run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_all(
    contenders: dict[str, tuple[Callable[[torch.Tensor], object], torch.Tensor, int]], repeats: int, warmup: int
) -> dict[str, float]:
    """Median images/s of each ``(fn, batch, iters)``; the timed runs of the
    contenders are interleaved so that background load hits them alike."""
    for fn, x, _ in contenders.values():
        for _ in range(warmup):
            fn(x)
        sync(x.device)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (fn, x, iters) in contenders.items():
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(x)
            sync(x.device)
            rates[name].append(iters * x.shape[0] / (time.perf_counter() - t0))
    return {name: statistics.median(r) for name, r in rates.items()}


def resnet50_overhead(aug: Callable, x: torch.Tensor, iters: int) -> dict[str, float]:
    """ResNet-50 bf16 channels_last training step (SGD) with and without the augmentation in front."""
    from torchvision.models import resnet50

    device = x.device
    model = resnet50().to(device=device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    labels = torch.randint(0, 1000, (x.shape[0],), device=device)
    ready = aug(x)

    def step(inp: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(inp), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    res = time_all(
        {"model": (lambda _: step(ready), x, iters), "aug+model": (lambda inp: step(aug(inp)), x, iters)},
        repeats=3,
        warmup=2,
    )
    return {
        "resnet50_step_img_s": res["model"],
        "resnet50_aug_step_img_s": res["aug+model"],
        "overhead_pct": 100 * (res["model"] / res["aug+model"] - 1),
    }


def make_batch(batch: int, size: int, device: torch.device) -> torch.Tensor:
    from shardkit.demo.sampledata import make_image

    imgs = [torch.from_numpy(make_image(i % 8, i, (size, size))).permute(2, 0, 1) for i in range(min(batch, 32))]
    x = torch.stack([imgs[i % len(imgs)] for i in range(batch)])
    return x.to(device)


# --- end to end --------------------------------------------------------------


class _JpegSet(torch.utils.data.Dataset):
    def __init__(self, size: int, n_unique: int = 64, length: int = 100_000):
        from PIL import Image

        from shardkit.demo.sampledata import make_image

        self.blobs = []
        for i in range(n_unique):
            buf = io.BytesIO()
            Image.fromarray(make_image(i % 8, i, (size, size))).save(buf, format="JPEG", quality=90)
            self.blobs.append(torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8))
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        from torchvision.io import decode_jpeg

        return decode_jpeg(self.blobs[i % len(self.blobs)]), i % 1000


def end_to_end(args: argparse.Namespace, device: torch.device, aug: Callable) -> dict[str, float]:
    ds = _JpegSet(args.input_size)
    workers = args.workers if args.workers is not None else min(8, os.cpu_count() or 1)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        drop_last=True,
    )
    n = args.e2e_batches

    def measure(make_iter: Callable[[], object], consume: Callable[[object], None]) -> tuple[float, float]:
        it = iter(make_iter())
        for _ in range(2):  # warm-up (workers started, first batches)
            consume(next(it))
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            consume(next(it))
        sync(device)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return n * args.batch / wall, cpu / n

    def touch(b: object) -> None:
        x = b[0]  # type: ignore[index]
        x.view(-1)[0].item() if device.type == "cpu" else None

    loader_rate, loader_cpu = measure(lambda: loader, touch)
    pf_rate, pf_cpu = measure(lambda: DevicePrefetcher(loader, device=device, transform=aug), lambda b: None)
    return {
        "loader_img_s": loader_rate,
        "loader_main_cpu_s_per_batch": loader_cpu,
        "prefetch_aug_img_s": pf_rate,
        "prefetch_aug_main_cpu_s_per_batch": pf_cpu,
        "workers": workers,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224, help="output size")
    ap.add_argument("--input-size", type=int, default=256, help="size the loader ships")
    ap.add_argument("--iters", type=int, default=None, help="batches per timed run (default 20 on CUDA, 2 on CPU)")
    ap.add_argument(
        "--repeats", type=int, default=None, help="timed runs, median reported (default 5 on CUDA, 3 on CPU)"
    )
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time GpuAugment under torch.compile",
    )
    ap.add_argument(
        "--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs or reduce-overhead"
    )
    ap.add_argument(
        "--half-compute",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time GpuAugment(compute_dtype=torch.float16)",
    )
    ap.add_argument("--kornia", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--torchvision", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--tv-images",
        type=int,
        default=None,
        help="images per run for the per-image torchvision loop (default: the batch)",
    )
    ap.add_argument(
        "--e2e",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time loader alone vs loader + prefetch + augmentation",
    )
    ap.add_argument("--e2e-batches", type=int, default=10)
    ap.add_argument(
        "--resnet50",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also time a ResNet-50 bf16 train step with and without the augmentation",
    )
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    iters = args.iters or (20 if cuda else 2)
    repeats = args.repeats or (5 if cuda else 3)
    warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    name = torch.cuda.get_device_name(device) if cuda else f"CPU ({torch.get_num_threads()} threads)"
    print(
        f"device: {name}; torch {torch.__version__}; batch {args.batch}; {args.input_size}^2 uint8 -> {args.size}^2 bf16 channels_last; median of {repeats} x {iters} batches",
        flush=True,
    )

    x = make_batch(args.batch, args.input_size, device)
    aug = shardkit_aug(args.size, False, None)
    contenders: dict[str, tuple[Callable, torch.Tensor, int]] = {"shardkit": (aug, x, iters)}
    if args.half_compute:
        contenders["shardkit_fp16"] = (shardkit_aug(args.size, False, None, torch.float16), x, iters)
    if args.compile:
        caug = shardkit_aug(args.size, True, args.compile_mode)
        t0 = time.perf_counter()
        caug(x)
        sync(device)
        print(f"  (torch.compile of GpuAugment.apply took {time.perf_counter() - t0:.0f} s)", flush=True)
        contenders["shardkit_compiled"] = (caug, x, iters)
    if args.kornia:
        k = kornia_sequential(args.size, device)
        if k is None:
            print("  kornia: not installed")
        else:
            contenders["kornia"] = (k, x, iters)
    if args.torchvision:
        contenders["torchvision_per_image"] = (torchvision_per_image(args.size), x[: args.tv_images or args.batch], 1)
    results: dict[str, float] = time_all(contenders, repeats, warmup)
    labels = {
        "shardkit": "shardkit GpuAugment (eager)",
        "shardkit_fp16": "shardkit GpuAugment (eager, fp16 compute)",
        "shardkit_compiled": "shardkit GpuAugment (torch.compile)",
        "kornia": "Kornia AugmentationSequential",
        "torchvision_per_image": "torchvision v2, loop over images",
    }
    for name, rate in results.items():
        print(f"  {labels[name]:<44}{rate:>12,.0f} img/s")
    best = max(v for k, v in results.items() if k.startswith("shardkit"))
    for other in ("kornia", "torchvision_per_image"):
        if other in results:
            print(f"  shardkit (best) / {other}: {best / results[other]:.1f}x")
    if args.resnet50:
        fast = contenders["shardkit_compiled"][0] if "shardkit_compiled" in contenders else aug
        r50 = resnet50_overhead(fast, x, max(1, iters // 2))
        results.update(r50)
        print(
            f"  ResNet-50 bf16 train step: {r50['resnet50_step_img_s']:,.0f} img/s alone, "
            f"{r50['resnet50_aug_step_img_s']:,.0f} img/s with GpuAugment in front ({r50['overhead_pct']:.1f}% overhead)"
        )
    if args.e2e:
        e2e = end_to_end(args, device, aug)
        results.update({f"e2e_{k}": v for k, v in e2e.items()})
        print(
            f"  end to end ({e2e['workers']} workers): loader alone {e2e['loader_img_s']:,.0f} img/s, "
            f"main CPU {e2e['loader_main_cpu_s_per_batch'] * 1e3:.1f} ms/batch; loader + prefetch + GpuAugment "
            f"{e2e['prefetch_aug_img_s']:,.0f} img/s, main CPU {e2e['prefetch_aug_main_cpu_s_per_batch'] * 1e3:.1f} ms/batch"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": name, "batch": args.batch, "size": args.size, "input_size": args.input_size, **results},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
