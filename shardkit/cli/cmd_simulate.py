"""``shardkit simulate``: the requests a cluster's loaders send to the store, per prefix (maps to
:func:`shardkit.simulate.simulate`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardkit.simulate import Dataset

HELP = (
    "replay the planner and the read schedule for a cluster (a dataset's manifest, or a synthetic one) "
    "and report GET/s per prefix, bytes/s per node and time to the first batch"
)


def _block_size(text: str) -> "int | str":
    from shardkit.cli.convert_args import parse_size

    return "auto" if text.strip().lower() == "auto" else parse_size(text)


def _budget(text: str) -> "float | None":
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GET/s per prefix or 'none', not {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardkit.cli import add_storage_arguments, positive_int
    from shardkit.simulate.settings import SimSettings
    from shardkit.storage.budget import REQUEST_BUDGET

    d = SimSettings()
    p.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        help="a split folder, a selection folder, or either's manifest (only manifests are read)",
    )
    g = p.add_argument_group("synthetic dataset (instead of URL)")
    g.add_argument("--shards", type=positive_int, metavar="N")
    g.add_argument("--samples-per-shard", type=positive_int, metavar="K")
    g.add_argument("--bytes-per-sample", type=positive_int, metavar="B")
    g.add_argument(
        "--prefixes", type=positive_int, default=1, metavar="P", help="shards spread as convert --prefixes P"
    )
    g.add_argument("--no-index", action="store_true", help="read with the tar header walk (no sample indexes)")
    c = p.add_argument_group("cluster")
    c.add_argument("--nodes", type=positive_int, default=d.nodes)
    c.add_argument("--ranks-per-node", type=positive_int, default=d.ranks_per_node)
    c.add_argument("--workers", type=int, default=d.workers, help="DataLoader workers per rank (0: none)")
    c.add_argument("--img-per-s-per-rank", type=float, default=d.img_per_s_per_rank, metavar="R")
    c.add_argument("--epochs", type=positive_int, default=d.epochs)
    c.add_argument("--batch-size", type=positive_int, default=d.batch_size)
    c.add_argument("--seed", type=int, default=d.seed)
    c.add_argument(
        "--block-size", type=_block_size, default=d.block_size, metavar="SIZE|auto", help="read size (default auto)"
    )
    c.add_argument(
        "--request-budget",
        type=_budget,
        default=d.request_budget,
        metavar="R|none",
        help=f"GET/s per prefix for the whole world (default {REQUEST_BUDGET:,.0f}; none: no limiter)",
    )
    c.add_argument("--cache", action="store_true", help="a node-local shard cache across epochs")
    c.add_argument(
        "--node-affinity", action="store_true", help="each node reads the same share of the shards every epoch"
    )
    c.add_argument("--latency-ms", type=float, default=d.latency_s * 1e3, help="model: ms to a request's first byte")
    c.add_argument(
        "--mb-per-s-per-process", type=float, default=d.bytes_per_s_per_process / 1e6, help="model: MB/s per process"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_storage_arguments(p)


def _dataset(url: str, options: dict) -> "Dataset":
    """The simulator's view of the split or selection at ``url``: the samples that are in (a selection's or a
    corrected split's kept samples, modelled as stored together: the gaps between them are not replayed)."""
    from shardkit.format.snapshot import resolve
    from shardkit.simulate import Dataset

    snap = resolve(url, **options)
    data = Dataset.of_manifest(snap.manifest)
    if snap.subset.is_everything:
        return data
    kept = snap.shard_sizes
    assert data.sample_bytes is not None
    return Dataset(data.names, kept, data.sample_bytes * kept + 1024, data.indexed, data.layout, data.sample_bytes)


def run(args: argparse.Namespace) -> int:
    from shardkit.cli import option_error, storage_options
    from shardkit.errors import ShardkitError
    from shardkit.simulate import Dataset, SimSettings, simulate

    synthetic = (args.shards, args.samples_per_shard, args.bytes_per_sample)
    try:
        if args.url is not None:
            if any(v is not None for v in synthetic) or args.prefixes != 1:
                raise ValueError(
                    "give a URL or --shards/--samples-per-shard/--bytes-per-sample [--prefixes], not both "
                    "(a dataset's prefixes are its manifest's)"
                )
            data = _dataset(args.url, storage_options(args))
        elif all(v is not None for v in synthetic):
            data = Dataset.synthetic(*synthetic, prefixes=args.prefixes, indexed=True)
        else:
            raise ValueError("give a dataset URL, or all of --shards N --samples-per-shard K --bytes-per-sample B")
        settings = SimSettings(
            nodes=args.nodes,
            ranks_per_node=args.ranks_per_node,
            workers=args.workers,
            img_per_s_per_rank=args.img_per_s_per_rank,
            epochs=args.epochs,
            batch_size=args.batch_size,
            seed=args.seed,
            block_size=args.block_size,
            request_budget=args.request_budget,
            index=not args.no_index,
            cache=args.cache,
            node_affinity=args.node_affinity,
            latency_s=args.latency_ms / 1e3,
            bytes_per_s_per_process=args.mb_per_s_per_process * 1e6,
        )
    except ValueError as exc:
        raise ShardkitError(option_error(exc, args)) from None
    report = simulate(data, settings)
    print(json.dumps(report.to_json(), indent=1) if args.json else report.text())
    return 0
