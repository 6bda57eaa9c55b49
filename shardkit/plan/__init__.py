"""Planning: which sample each rank and worker reads, in which order, for every epoch -- pure functions.

* :mod:`.world` -- :class:`World`, the topology (ranks x workers); :mod:`.position` -- a frozen place in the epoch.
* :mod:`.epoch` -- one dataset's epoch: the shuffled shard stream, rank and worker splits, blocks, resume.
* :mod:`.member` -- :class:`Source` specs (``weight`` | ``repeat`` | ``choose``) and their checks.
* :mod:`.mixture` -- :class:`Mixture`: each epoch's count per source, and which samples (without
  replacement across epochs, as runs of each source's shuffled shard stream).
* :mod:`.interleave` -- the exact Sainte-Lague merge that spreads the sources over the epoch.
* :mod:`.mixplan` -- the mixed epoch over ranks x workers: shuffle blocks, resume, elastic resume.
* :mod:`.labels` -- classes merged by name (or per source), keys qualified by source.
* :mod:`.remix` -- refusing, or switching at the next epoch, when a state's mixture differs.

Everything is a pure function of (shard sizes, specs, seed, epoch, topology, batches done).
"""

from __future__ import annotations

from shardkit.plan.interleave import positions, prefix, window
from shardkit.plan.labels import LabelMode, LabelSpace, label_space, qualify_keys
from shardkit.plan.member import Source, SourceData, as_sources, check_data, check_specs
from shardkit.plan.mixplan import (
    Explicit,
    MixedEpoch,
    MixedStream,
    by_source,
    epoch_stream,
    mixed_epoch,
    remaining,
    spread_repeats,
    worker_plan,
)
from shardkit.plan.mixture import Mixture, selection, source_epoch, source_epochs, source_seed
from shardkit.plan.remix import check_remix, mixture_diff, resume_mixtures

__all__ = [
    "Explicit", "LabelMode", "LabelSpace", "MixedEpoch", "MixedStream", "Mixture", "Source", "SourceData", "as_sources", "by_source",
    "check_data", "check_remix", "check_specs", "epoch_stream", "label_space", "mixed_epoch", "mixture_diff",
    "positions", "prefix", "qualify_keys", "remaining", "resume_mixtures", "selection", "source_epoch", "source_epochs", "source_seed", "spread_repeats",
    "window", "worker_plan",
]
