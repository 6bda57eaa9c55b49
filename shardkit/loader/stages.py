"""What one iteration of a :class:`~shardkit.loader.dataset.ShardDataset` runs, in each DataLoader worker.

:func:`worker_pipeline` finds out who the worker is, asks :func:`shardkit.plan.worker_plan`
what to read for the current epoch and resume point, and folds a ``webdataset.DataPipeline``
over the stages: plan blocks -> sequentially read raw samples in shuffled emission order
(:mod:`shardkit.loader.read.reader`) -> the planned batches, made by the dataset's decode strategy
(:mod:`shardkit.loader.batching`, :mod:`shardkit.loader.decode.strategies`) -> for a mixture,
labels, keys and per-source counts (:mod:`shardkit.loader.mixing`) -> for
:class:`~shardkit.loader.ShardLoader`'s private copy, transport envelopes
(:mod:`shardkit.loader.transport`).

Each source's :class:`~shardkit.storage.opener.ShardOpener` gets this worker's
:class:`~shardkit.storage.budget.ReadBudget` (:func:`process_budget`): the read size
(``block_size="auto"``) and request rate of one reading process of the world, with its phase;
the time its limiter made reads wait and the slow-downs it saw are added to the counters once per
batch (:func:`count_throttling`, a stage only when some source is limited).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from torch.utils.data import get_worker_info

from shardkit import plan as mix
from shardkit.format.manifest import Manifest
from shardkit.format.prefixes import prefix_of
from shardkit.format.sample import SampleRule
from shardkit.loader.batching import BatchSpec, plain_alloc, planned_batches
from shardkit.loader.mixing import MixSpec, mixture_batches
from shardkit.loader.read.blocks import BlockReader, indexed_shards
from shardkit.loader.read.reader import MixReader, plan_blocks, read_blocks
from shardkit.loader.read.stored import ReadMap
from shardkit.loader.stats import Counters
from shardkit.loader.transport import envelopes, failures_as_items
from shardkit.plan.world import World
from shardkit.storage import fs as storage
from shardkit.storage.budget import ReadBudget, RequestLimiter
from shardkit.storage.opener import ShardOpener, StorageConfig

if TYPE_CHECKING:
    from shardkit.loader.dataset import ShardDataset


def worker_pipeline(ds: "ShardDataset") -> Iterator[Any]:
    """This worker's batches (:class:`~shardkit.loader.transport.Envelope` objects for the loader's private copy)."""
    import webdataset as wds

    cfg = ds.config
    world = ds.world()
    pos = ds.position  # read once: this iteration's plan
    epoch = pos.epoch
    work = mix.worker_plan(
        ds.stream(pos), cfg.plan, world, epoch=epoch, batches_done=pos.batches_done, generation=len(pos.history)
    )
    num_batches = -(-work.num_samples // cfg.plan.batch_size)
    mixed = len(ds.sources) > 1
    counters = Counters(len(ds.sources) if mixed else 0)
    plan_mix = ds.mixture_for(epoch)
    # the epoch's sources among the loader's (they differ only while a remix finishes an epoch)
    rows = ds.source_rows(plan_mix)
    urls, nbytes = ds.urls, ds.shard_bytes
    if not np.array_equal(rows, np.arange(len(ds.sources))):
        urls = [u for k in rows.tolist() for u in ds.manifests[k].shard_urls()]
        nbytes = [s.bytes for k in rows.tolist() for s in ds.manifests[k].shards]
    sha: list[Optional[str]] = []
    content: list[Optional[str]] = []  # every shard's sha256 (the node cache's content key)
    for m in (ds.manifests[k] for k in rows.tolist()):
        sha += indexed_shards(m, m.shard_urls()) or [None] * len(m.shards)
        content += [s.sha256 for s in m.shards]
    sha256 = None if all(h is None for h in sha) else sha  # sample indexes, per shard (None: that shard is walked)
    openers = [_opener(ds, k, world, work.split.num_batches) for k in rows.tolist()]
    read_map = ReadMap.of([ds.snapshots[k] for k in rows.tolist()])  # planned -> stored positions, new labels
    readers = [
        BlockReader(
            urls,
            nbytes,
            plan_mix.shard_offsets,
            opener,
            counters,
            rule=SampleRule.of(ds.manifests[k]),
            sha256=sha256,
            content=content,
            read_map=read_map,
            max_hole=cfg.max_hole_bytes,
        )
        for k, opener in zip(rows.tolist(), openers)
    ]
    reader = MixReader(readers, plan_mix.gid_base, counters, rows, len(ds.sources)) if mixed else readers[0]
    strategy = ds.strategy
    decoder = strategy.decoder(cfg.image.at_size(pos.size), cfg.plan.seed)  # size: set_epoch(..., size=)
    in_worker = get_worker_info() is not None
    envelope = ds._envelopes
    writer = ds.ring.writer(world.worker) if envelope and ds.ring is not None and in_worker else None
    spec = BatchSpec(cfg.plan.batch_size, num_batches, epoch, cfg.strict, alloc=writer or plain_alloc, rows=ds.rows)
    stages: list[Callable[..., Iterator[Any]]] = [
        Const(work.blocks),
        Stage(read_blocks, reader=reader, chunk=cfg.plan.batch_size),
        Stage(planned_batches, spec=spec, output=strategy, decoder=decoder, counters=counters),
    ]
    limiters = tuple(o.limiter for o in openers if o.limiter is not None)
    if limiters:
        stages.append(Stage(count_throttling, limiters=limiters, counters=counters))
    if mixed:
        planned = rows[plan_mix.source_of(work.emission_order())].astype(np.int16)
        spec_mix = MixSpec(
            cfg.plan.batch_size, plan_mix.gid_base, rows, ds.labels, len(ds.sources), map_label=ds.yields_label
        )
        stages.append(Stage(mixture_batches, planned=planned, spec=spec_mix, counters=counters))
    if envelope:
        stages.append(Stage(envelopes, worker=world.worker, counters=counters, writer=writer))
        if in_worker:
            stages.append(Stage(failures_as_items, worker=world.worker))
    return iter(wds.DataPipeline(*stages))


def _opener(ds: "ShardDataset", k: int, world: World, batches_per_rank: Optional[int] = None) -> ShardOpener:
    """Source ``k``'s opener in this worker: remote, with the worker's :func:`process_budget`; local files
    (never limited) without a limiter and without the manifest walk that sizes one."""
    cfg = ds.storage_config(ds.sources[k])
    if storage.is_local(ds.sources[k].url):
        return ShardOpener(replace(cfg, request_budget=None))
    return ShardOpener(cfg, process_budget(ds.manifests[k], cfg, world, batches_per_rank))


def process_budget(
    manifest: Manifest, cfg: StorageConfig, world: World, batches_per_rank: Optional[int] = None
) -> ReadBudget:
    """The read size and request rate of reading process ``world`` (rank, worker) for ``manifest``'s shards:
    :meth:`StorageConfig.read_budget <shardkit.storage.opener.StorageConfig.read_budget>` with the
    manifest's mean bytes per sample and its prefixes (distinct :func:`~shardkit.format.prefixes.prefix_of`
    of its shard names, at least 1), shared by the workers that have batches to read (``batches_per_rank``: the
    epoch's batches of every rank; only ``min(num_workers, batches_per_rank)`` workers of a rank read)."""
    samples = sum(s.samples for s in manifest.shards)
    per_sample = sum(s.bytes for s in manifest.shards) / samples if samples else 0.0
    return cfg.read_budget(
        bytes_per_sample=per_sample,
        prefixes=len({prefix_of(s.name) for s in manifest.shards}),
        world_size=world.world_size,
        num_workers=world.num_workers,
        rank=world.rank,
        worker=world.worker,
        batches_per_rank=batches_per_rank,
    )


def count_throttling(src: Iterator[Any], *, limiters: tuple[RequestLimiter, ...], counters: Counters) -> Iterator[Any]:
    """Pass ``src`` through, adding the limiters' new waits and slow-downs to ``counters`` before each item."""
    waited, slowed = 0.0, 0
    for item in src:
        w, n = sum(lim.waited_s for lim in limiters), sum(lim.slowdowns for lim in limiters)
        counters.add("throttled_s", w - waited)
        counters.add("slowdowns", n - slowed)
        waited, slowed = w, n
        yield item


class Const:
    """Pipeline source: the plan's blocks (picklable)."""

    def __init__(self, blocks: tuple[Any, ...]) -> None:
        self.blocks = blocks

    def __call__(self) -> Iterator[Any]:
        return plan_blocks(self.blocks)


class Stage:
    """A generator stage with keyword arguments bound (picklable, unlike a lambda)."""

    def __init__(self, fn: Callable[..., Iterator[Any]], **kw: Any) -> None:
        self.fn, self.kw = fn, kw

    def __call__(self, src: Iterator[Any]) -> Iterator[Any]:
        return self.fn(src, **self.kw)
