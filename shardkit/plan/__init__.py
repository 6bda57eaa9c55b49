"""Planning: which sample each rank and worker reads, in which order, for every epoch -- pure functions.

A single dataset is the one-source mixture: one planner serves both.

* :mod:`.world` -- :class:`World`, the topology (ranks x workers); :mod:`.position` -- a frozen place in the epoch.
* :mod:`.ordering` -- :class:`PlanConfig`, the options that decide order and split, and their defaults.
* :mod:`.member` -- :class:`Source` specs (``weight`` | ``repeat`` | ``choose``) and their checks.
* :mod:`.mixture` -- :class:`Mixture`: each epoch's count per source, and which samples (without
  replacement across epochs, as runs of each source's shuffled shard stream).
* :mod:`.stream` -- streams: an epoch's samples in order (one source's runs, the interleaved sources, a listed rest).
* :mod:`.interleave` -- the exact Sainte-Lague merge that spreads the sources over the epoch.
* :mod:`.split` -- the stream over ranks (pad / drop) and workers (one contiguous chunk each).
* :mod:`.blocks` -- shuffle blocks and what one worker emits.
* :mod:`.epoch` -- the planner: :func:`epoch_stream`, :func:`worker_plan`, resume and elastic resume.
* :mod:`.labels` -- classes merged by name (or per source), keys qualified by source.
* :mod:`.remix` -- refusing, or switching at the next epoch, when a state's mixture differs; :class:`Schedule`.

Everything is a pure function of (shard sizes, specs, seed, epoch, topology, batches done).
"""

from __future__ import annotations

from shardkit.plan.blocks import Block, WorkerPlan, block_bounds, block_perm, by_source, spread_repeats
from shardkit.plan.epoch import epoch_stream, mixed_epoch, remaining, replanned, worker_plan
from shardkit.plan.interleave import positions, prefix, window
from shardkit.plan.labels import LabelMode, LabelSpace, label_space, qualify_keys
from shardkit.plan.member import Source, SourceData, as_sources, check_data, check_specs
from shardkit.plan.mixture import Mixture, selection, source_epoch, source_epochs, source_seed
from shardkit.plan.ordering import SHUFFLE_BUFFER, SHUFFLE_INITIAL, EpochPolicy, PlanConfig
from shardkit.plan.position import Position, Segment
from shardkit.plan.remix import Schedule, check_remix, mixture_diff, resume_mixtures
from shardkit.plan.split import RankSplit, partition_ranges, rank_split, worker_chunks
from shardkit.plan.stream import Explicit, MixedEpoch, MixedStream, Stream, shard_offsets, sizes_fingerprint
from shardkit.plan.world import World

__all__ = [
    "SHUFFLE_BUFFER",
    "SHUFFLE_INITIAL",
    "Block",
    "EpochPolicy",
    "Explicit",
    "LabelMode",
    "LabelSpace",
    "MixedEpoch",
    "MixedStream",
    "Mixture",
    "PlanConfig",
    "Position",
    "RankSplit",
    "Schedule",
    "Segment",
    "Source",
    "SourceData",
    "Stream",
    "WorkerPlan",
    "World",
    "as_sources",
    "block_bounds",
    "block_perm",
    "by_source",
    "check_data",
    "check_remix",
    "check_specs",
    "epoch_stream",
    "label_space",
    "mixed_epoch",
    "mixture_diff",
    "partition_ranges",
    "positions",
    "prefix",
    "qualify_keys",
    "rank_split",
    "remaining",
    "replanned",
    "resume_mixtures",
    "selection",
    "shard_offsets",
    "sizes_fingerprint",
    "source_epoch",
    "source_epochs",
    "source_seed",
    "spread_repeats",
    "window",
    "worker_chunks",
    "worker_plan",
]
