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
from shardkit.loader.rows import FieldRows
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
        if (
            extra is not None
            and spec.labels.tables is not None
            and (extra.box_labels is not None or extra.mask is not None)
        ):
            out = replace(out, extra=mixed_targets(out.extra, src, spec.labels))  # type: ignore[type-var,arg-type]
        yield out


def mixed_targets(rows: FieldRows, src: np.ndarray, space: LabelSpace) -> FieldRows:
    """A batch's box labels (padding -1 kept) and masks (255 kept; a 256-entry table per source) in the mixture's
    class space (each row comes from source ``src[row]``)."""
    box_labels, mask = rows.box_labels, rows.mask
    if box_labels is not None and box_labels.numel():
        live = box_labels >= 0
        r = live.nonzero(as_tuple=True)[0].numpy()
        box_labels = box_labels.clone()
        box_labels[live] = torch.from_numpy(space.map(src[r], box_labels[live].numpy()))
    if mask is not None and len(mask):
        luts = mask_tables(space)
        flat = mask.reshape(len(mask), -1).long()
        mask = luts[torch.from_numpy(src).long()].gather(1, flat).reshape(mask.shape)
    return rows.updated(box_labels=box_labels, mask=mask)


def mask_tables(space: LabelSpace) -> torch.Tensor:
    """uint8 ``[sources, 256]``: each source's mask value -> the mixture's (255, "no class", stays 255)."""
    tables = space.tables or ()
    out = torch.full((len(tables), 256), 255, dtype=torch.uint8)
    for i, t in enumerate(tables):
        out[i, : min(len(t), 255)] = torch.from_numpy(np.asarray(t[:255], np.int64)).to(torch.uint8)
    return out


def background_first(space: LabelSpace, class_lists: "list[list[str]]") -> LabelSpace:
    """A merged detection space with ``"background"`` first (torchvision's convention: box labels >= 1, mask 0 is
    the background) when every source lists it first; other spaces unchanged."""
    if space.tables is None or not space.classes or "/" in space.classes[0]:
        return space  # one class space, or per-source names
    if not all(cl and cl[0] == "background" for cl in class_lists):
        return space
    order = ["background"] + [c for c in space.classes if c != "background"]
    index = {c: i for i, c in enumerate(order)}
    return LabelSpace(tuple(order), tuple(np.array([index[c] for c in cl], np.int64) for cl in class_lists))


def mixed_multi_hot(multi_hot: torch.Tensor, src: np.ndarray, space: LabelSpace) -> torch.Tensor:
    """A batch's multi-hot rows (each in its source's class space) in the mixture's: one zeros, one assignment."""
    rows, cols = multi_hot.nonzero(as_tuple=True)
    out = torch.zeros((len(multi_hot), len(space.classes)), dtype=torch.uint8)
    out[rows, torch.from_numpy(space.map(src[rows.numpy()], cols.numpy()))] = 1
    return out
