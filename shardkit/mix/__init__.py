"""Weighted mixtures of several datasets, planned exactly and resumably.

* :mod:`.source` -- :class:`Source` specs (``weight`` | ``repeat`` | ``choose``) and their checks.
* :mod:`.mixture` -- :class:`Mixture`: each epoch's count per source, and which samples (without
  replacement across epochs, as runs of each source's shuffled shard stream).
* :mod:`.interleave` -- the exact Sainte-Lague merge that spreads the sources over the epoch.
* :mod:`.plan` -- the mixed epoch over ranks x workers: shuffle blocks, resume, elastic resume.
* :mod:`.labels` -- classes merged by name (or per source), keys qualified by source.
* :mod:`.remix` -- refusing, or switching at the next epoch, when a state's mixture differs.

Everything is a pure function of (shard sizes, specs, seed, epoch, topology, batches done).
"""

from __future__ import annotations

from .interleave import positions, prefix, window
from .labels import LabelMode, LabelSpace, label_space, qualify_keys
from .mixture import Mixture, selection, source_epoch, source_epochs, source_seed
from .plan import Explicit, MixedEpoch, MixedStream, by_source, epoch_stream, mixed_epoch, remaining, spread_repeats, worker_plan
from .remix import check_remix, mixture_diff, resume_mixtures
from .source import Source, SourceData, as_sources, check_data, check_specs

__all__ = [
    "Explicit", "LabelMode", "LabelSpace", "MixedEpoch", "MixedStream", "Mixture", "Source", "SourceData", "as_sources", "by_source",
    "check_data", "check_remix", "check_specs", "epoch_stream", "label_space", "mixed_epoch", "mixture_diff",
    "positions", "prefix", "qualify_keys", "remaining", "resume_mixtures", "selection", "source_epoch", "source_epochs", "source_seed", "spread_repeats",
    "window", "worker_plan",
]
