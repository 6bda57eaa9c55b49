"""The mixture part of the loader's state: which sources and specs planned the epoch, checked on resume.

:func:`mixture_state` adds ``mixture`` (:meth:`shardkit.plan.Mixture.describe` of the mixture
planning the epoch), ``labels`` (``merged`` or ``per_source``: a resume with the other is refused), ``classes``
(a digest of ``loader.classes``: a remix that changes them is logged as a warning), ``next_mixture`` while a remix finishes an epoch with the saved mixture,
and for several sources ``sources`` (each one's dataset fingerprint: shard sizes, contents,
classes) to the state of :mod:`shardkit.loader.state`. :func:`resume_mixture` checks them with
:func:`shardkit.plan.resume_mixtures` (refusing another mixture, naming the difference, unless
``allow_remix``; a source of the same shard sizes but other contents or classes is refused, naming
the source and what differs, also when a remixed state finishes its epoch with it) and sets the dataset's mixtures. A state without ``mixture`` (older shardkit)
is one source, identified by its shard sizes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from shardkit.errors import ShardkitError
from shardkit.loader.state import STATE_FORMAT, dataset_differences, dataset_fingerprint
from shardkit.plan import Mixture, mixture_diff, resume_mixtures

log = logging.getLogger("shardkit.loader")

if TYPE_CHECKING:
    from shardkit.loader.dataset import ShardDataset


def mixture_state(ds: "ShardDataset", epoch: int) -> dict[str, Any]:
    """The state keys that identify the mixture of ``epoch`` (and a pending switch)."""
    now = ds.mixture_for(epoch)
    out: dict[str, Any] = {"mixture": now.describe(), "labels": ds.label_mode.value, "classes": classes_digest(ds.classes)}
    if now is not ds.mixture:
        out["next_mixture"] = ds.mixture.describe()
    if len(ds.sources) > 1:
        out["sources"] = [dataset_fingerprint(m) for m in ds.manifests]
    return out


def classes_digest(classes: "tuple[str, ...] | list[str]") -> str:
    """A short hash of the class names the labels index (``loader.classes``), in order."""
    return hashlib.sha256(json.dumps(list(classes)).encode()).hexdigest()[:16]


def _saved(state: dict[str, Any], ds: "ShardDataset") -> dict[str, Any]:
    saved = state.get("mixture")
    if isinstance(saved, dict) and isinstance(saved.get("sources"), list):
        return saved
    if saved is not None:
        raise ShardkitError(f"loader state field 'mixture' must be a dict with 'sources', got {type(saved).__name__}")
    d = state.get("dataset")
    fp = d.get("shard_sizes") if isinstance(d, dict) else state.get("fingerprint")
    return {"epoch_size": None, "sources": [{"fingerprint": fp, "samples": 0, "weight": None, "repeat": None, "choose": None}]}


def resume_mixture(ds: "ShardDataset", state: Any, *, allow_remix: bool) -> tuple[Any, Mixture, Mixture]:
    """Check ``state``'s mixture against ``ds``'s: ``(state, mixture of its epoch, mixture of the epochs after)``.

    The state is the one to check the rest of (:func:`shardkit.loader.state.from_state`): for a
    mixture its dataset fingerprint is the current first source's (the checks here replaced it).
    The caller hands the mixtures to :meth:`ShardDataset.remix` once the whole state is accepted.

    Raises:
        ShardkitError: another mixture without ``allow_remix`` (every difference named), or a source
            whose contents or classes differ from the saved one's.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT or type(state.get("epoch")) is not int:
        return state, ds.mixture, ds.mixture  # from_state names what is wrong
    labels = state.get("labels")
    if labels is not None and labels != ds.label_mode.value:
        raise ShardkitError(f"loader state field 'labels' is {labels!r} but this loader's labels are {ds.label_mode.value!r}: the same label "
                            f"index would name another class; resume with labels={labels!r}")
    saved, epoch = _saved(state, ds), state["epoch"]
    if not allow_remix and len(saved["sources"]) == 1 == len(ds.sources) and \
            saved["sources"][0].get("fingerprint") != ds.mixture.describe()["sources"][0]["fingerprint"]:
        return state, ds.mixture, ds.mixture  # one dataset for another: from_state's message names what differs
    if not allow_remix and len(ds.sources) == 1 and isinstance(state.get("dataset"), dict) and dataset_differences(state["dataset"], ds.manifest):
        return state, ds.mixture, ds.mixture  # the same shape, other data: from_state's message names what differs
    mid = bool(state.get("batches_done") or state.get("history"))
    nxt = state.get("next_mixture")
    now, later = resume_mixtures(saved, ds.mixture, epoch, mid_epoch=mid, allow_remix=allow_remix,
                                 saved_next=nxt if isinstance(nxt, dict) else None)
    remixed = bool(mixture_diff(saved, ds.mixture.describe()))
    fps = state.get("sources")
    if len(ds.sources) > 1 and isinstance(fps, list):
        if not (remixed or allow_remix):
            pairs = list(enumerate(zip(fps, ds.manifests)))
        else:  # mid-epoch, the saved mixture finishes its epoch with the current source of the same shard sizes: the same data only
            sizes = [dataset_fingerprint(m)["shard_sizes"] for m in ds.manifests]
            pairs = [(i, (a, ds.manifests[sizes.index(a.get("shard_sizes"))])) for i, a in enumerate(fps)
                     if mid and isinstance(a, dict) and a.get("shard_sizes") in sizes]
        for i, (a, m) in pairs:
            differ = dataset_differences(a, m) if isinstance(a, dict) else ["fingerprints"]
            if differ:
                raise ShardkitError(f"loader state's source {i} is another dataset than {m.url or 'this source'} ({', '.join(differ)} "
                                    f"differ); resume with the sources it was saved from (at least to finish epoch {epoch}), or start "
                                    "the new sources at an epoch boundary (allow_remix=True with a state saved between epochs)")
    saved_classes = state.get("classes")
    if saved_classes is not None and saved_classes != classes_digest(ds.classes):
        if not allow_remix:
            raise ShardkitError("loader state field 'classes' does not match this loader's classes (loader.classes); resume with the "
                                "sources and labels it was saved with")
        log.warning("shardkit: the remixed sources index other classes than the saved state (%d now): from the rest of epoch %d on, "
                    "a label index may name another class than in the checkpoint's training; loader.classes lists them", len(ds.classes), epoch)
    if remixed or len(ds.sources) > 1:
        state = {**state, "version": 2, "dataset": dataset_fingerprint(ds.manifest)}  # checked above, per source
    return state, now, later
