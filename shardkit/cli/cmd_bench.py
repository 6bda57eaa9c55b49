"""``shardkit bench URL``: the loader doctor (throughput, per-stage costs, worker sweep, decode ceiling)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardkit.cli import add_storage_arguments, positive_int, storage_options

if TYPE_CHECKING:
    from shardkit.ops.bench import BenchReport

HELP = "measure the loader on a dataset: img/s, MB/s, per-stage breakdown, worker sweep, decode-only ceiling"


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 0,1,2, got {text!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError("worker counts must be >= 0")
    return out


def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated field names like image,boxes, got {text!r}")
    return names


_LOADER_DEFAULT = object()  # --request-budget not given: the loader's default applies


def _budget(text: str) -> "float | None":
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected GET/s per prefix (> 0) or 'none', got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        metavar="URL",
        help="dataset split directory, selection folder, or either's manifest.json (path or fsspec URL)",
    )
    p.add_argument("--workers", type=_int_list, default=[0, 1, 2], help="worker counts to sweep (default 0,1,2)")
    p.add_argument(
        "--batches",
        type=positive_int,
        default=30,
        help="at least this many batches timed per worker count, then until the rate is stable (default 30)",
    )
    p.add_argument("--window", type=positive_int, default=10, help="batches per stability window (default 10)")
    p.add_argument("--max-seconds", type=float, default=30.0, help="time limit per worker count (default 30)")
    p.add_argument(
        "--step-ms",
        type=float,
        default=None,
        metavar="T",
        help="your training step time per batch (without data loading): the report says whether it is input-bound",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="measure the step time of a torchvision model (e.g. resnet50) instead of --step-ms",
    )
    p.add_argument(
        "--device",
        default=None,
        help="device for --model and --decode-on device (default: cuda if available, else cpu)",
    )
    p.add_argument(
        "--decode-on",
        choices=["worker", "device"],
        default="worker",
        help="where JPEGs are decoded: in the CPU workers (default) or on --device (TorchCodec's nvJPEG on CUDA)",
    )
    p.add_argument(
        "--decoder",
        choices=["auto", "simplejpeg", "pil", "torchvision"],
        default="auto",
        help="the CPU JPEG decoder (default auto: simplejpeg); torchvision: TorchCodec's decode_jpeg when installed",
    )
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--preset", choices=["train", "eval", "detect", "letterbox"], default="train")
    p.add_argument("--size", type=int, default=224, help="output image size (default 224)")
    p.add_argument(
        "--fields",
        type=_names,
        default=None,
        metavar="F1,F2",
        help="the batch fields to load, as load(fields=...) takes them, e.g. image,boxes,box_labels,box_count "
        "(default: every field the dataset stores; an image + class dataset: (images, labels) tuples)",
    )
    p.add_argument("--plot", metavar="PNG", help="also save a plot (needs matplotlib)")
    add_storage_arguments(p)
    p.add_argument(
        "--request-budget",
        type=_budget,
        default=_LOADER_DEFAULT,
        metavar="GET_PER_S",
        help="remote GET/s per prefix for all reading processes together (default: the loader's, 3500); "
        "'none': no limit",
    )


def run(args: argparse.Namespace) -> int:
    from shardkit.ops.bench import plot

    so = storage_options(args)
    opts: dict = {"storage_options": so} if so else {}
    if args.request_budget is not _LOADER_DEFAULT:
        opts["request_budget"] = args.request_budget
    if args.decoder != "auto":
        opts["decoder"] = args.decoder
    if args.decode_on != "worker":
        opts.update(decode_on=args.decode_on, device=args.device)
    step_ms, source = args.step_ms, "--step-ms"
    if args.step_ms is not None and args.step_ms <= 0:
        print("shardkit: error: --step-ms must be > 0", file=sys.stderr)
        return 2
    if args.model:
        import torch

        from shardkit.ops.bench import step_time_ms

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            step_ms = step_time_ms(args.model, batch_size=args.batch_size, size=args.size, device=device)
        except ValueError as exc:  # an unknown model name
            print(f"shardkit: error: --model {args.model}: {exc}", file=sys.stderr)
            return 2
        source = f"{args.model} step on {device}: {step_ms:.1f} ms"
    try:
        report = _bench(args, step_ms, source, opts)
    except ValueError as exc:  # a field the dataset does not have, an unknown field: one line naming the fix
        print(f"shardkit bench: error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    _print_storage(args.url, so, opts, report)
    if args.plot:
        try:
            plot(report, args.plot)
            print(f"plot saved to {args.plot}")
        except ImportError:
            print(
                "--plot needs matplotlib: pip install matplotlib (the numbers above are complete without it)",
                file=sys.stderr,
            )
            return 1
    return 0


def _bench(args: argparse.Namespace, step_ms: "float | None", source: str, opts: dict) -> "BenchReport":
    from shardkit.ops.bench import bench

    return bench(
        args.url,
        workers=args.workers,
        batches=args.batches,
        batch_size=args.batch_size,
        preset=args.preset,
        size=args.size,
        window=args.window,
        max_s=args.max_seconds,
        step_ms=step_ms,
        step_source=source,
        fields=args.fields,
        **opts,
    )


def _print_storage(url: str, so: dict, opts: dict, report: "BenchReport") -> None:
    """For a remote dataset: the read size and request rate each worker got, and what the budget cost."""
    from shardkit.format.snapshot import resolve
    from shardkit.loader.doctor import storage_report
    from shardkit.loader.stages import process_budget
    from shardkit.plan.world import World
    from shardkit.storage import fs
    from shardkit.storage.opener import StorageConfig

    if fs.is_local(url) or not report.points:
        return
    cfg = StorageConfig(storage_options=so, **{k: v for k, v in opts.items() if k == "request_budget"})
    manifest = resolve(url, **so).manifest
    for point in report.points:
        world = World(0, 1, 0, max(1, point.num_workers))
        line = storage_report(process_budget(manifest, cfg, world), point.stats)
        print(f"{point.num_workers} workers: {line}")
