"""The mixture stage: a mixed batch's labels into the mixture's label space, keys qualified by source, counts per source.

Runs after the decode stage in each worker of a loader over several sources
(:mod:`shardkit.plan`), once per batch, vectorised: a batch's sources come from its
sample ids (:meth:`shardkit.plan.Mixture.source_of`), what it should have held from
the worker's plan, so a sample skipped as unreadable is counted against its source.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from shardkit.loader.batching import Batch
from shardkit.loader.stats import Counters
from shardkit.plan import LabelSpace, qualify_keys


@dataclass(frozen=True)
class MixSpec:
    """What the mixture stage needs (picklable)."""

    batch_size: int
    gid_base: np.ndarray  #: first mixture sample id of each source of the epoch's mixture, plus the total
    rows: np.ndarray  #: index among the loader's sources of each of the epoch's sources
    labels: LabelSpace  #: over the loader's sources
    num_sources: int  #: the loader's sources
    map_label: bool = True  #: the batches' class labels are handed out (False: a dataset's may be -1, left alone)


def mixture_batches(
    batches: Iterable[Batch], *, planned: np.ndarray, spec: MixSpec, counters: Counters
) -> Iterator[Batch]:
    """Map labels, qualify keys (``"1/00000042"``) and count samples/skipped per source.

    ``planned``: the (loader's) source of each sample this worker emits, in emission order (batch ``j``
    is ``planned[j*B:(j+1)*B]``).
    """
    n, b = spec.num_sources, spec.batch_size
    for j, batch in enumerate(batches):
        src = spec.rows[np.searchsorted(spec.gid_base, batch.gids.numpy(), side="right") - 1]
        got = np.bincount(src, minlength=n)
        counters.add_sources("samples", got)
        counters.add_sources("skipped", np.bincount(planned[j * b : (j + 1) * b], minlength=n) - got)
        labels = batch.labels
        if spec.labels.tables is not None and len(src) and spec.map_label:
            labels = torch.from_numpy(spec.labels.map(src, batch.labels.numpy()))
        keys = qualify_keys(src.tolist(), batch.keys)
        out = batch.relabelled(labels, keys)  # raw=True: the samples carry the mixture's label and key too
        extra = batch.extra
        if extra is not None and extra.labels is not None and spec.labels.tables is not None:
            out = replace(out, extra=extra.with_labels(mixed_multi_hot(extra.labels, src, spec.labels)))  # type: ignore[type-var]
        yield out


def mixed_multi_hot(multi_hot: torch.Tensor, src: np.ndarray, space: LabelSpace) -> torch.Tensor:
    """A batch's multi-hot rows (each in its source's class space) in the mixture's: one zeros, one assignment."""
    rows, cols = multi_hot.nonzero(as_tuple=True)
    out = torch.zeros((len(multi_hot), len(space.classes)), dtype=torch.uint8)
    out[rows, torch.from_numpy(space.map(src[rows.numpy()], cols.numpy()))] = 1
    return out
