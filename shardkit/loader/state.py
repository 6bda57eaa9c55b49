"""The loader's resumable state: the one owner of the state dict <-> (position, mixture schedule) mapping.

:func:`state_of` writes a state; :func:`resume_state`, a pure function of (state, :class:`DatasetIdentity`,
topology), reads one back as a :class:`Resumed` value: the :class:`~shardkit.plan.position.Position` to
continue from and the :class:`~shardkit.plan.remix.Schedule` of mixtures that plans each epoch.

Keys: ``format``, ``version``, ``dataset`` (fingerprints of the shard sizes, the shards' sha256s and the
class names, from the (first source's) manifest), ``plan`` (the ordering options), ``epoch``, ``history``
(segments of the epoch read with other topologies), ``world_size``, ``num_workers``, ``nodes``, ``batches_done``,
``size`` (the output image size set with ``set_epoch(..., size=)``, with ``views=`` the first view's, 0: the configured one; states saved
before it existed load at the configured size), ``mixture`` (:meth:`shardkit.plan.Mixture.describe` of
the mixture planning the epoch), ``labels`` (``merged`` or ``per_source``: a resume with the other is
refused), ``classes`` (a digest of ``loader.classes``: a remix that changes them is logged as a warning),
``next_mixture`` while a remix finishes an epoch with the saved mixture, and for several sources
``sources`` (each one's dataset fingerprint: shard sizes, contents, classes). For an appended, corrected or
selected split each fingerprint also holds the pinned ``generation`` and the ``snapshot``'s fingerprint
(:mod:`shardkit.loader.identity`), and a loaded state re-pins its generation first.

Loading refuses, naming the field, a state of another dataset (even one with the same shard layout),
other ordering options, another mixture (naming every difference, unless ``allow_remix``), a source of
the same shard sizes but other contents or classes (also when a remixed state finishes its epoch with
it), wrong types and out-of-range numbers. Version 1 states (fingerprint of the shard sizes only) and
states without ``mixture`` (one source, identified by its shard sizes) still load.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from shardkit.errors import ShardkitError
from shardkit.format.manifest import Manifest
from shardkit.format.snapshot import Snapshot
from shardkit.loader.config import plan_to_dict
from shardkit.loader.identity import (  # noqa: F401 - saved_generations: the loader reads it from here
    STATE_FORMAT,
    dataset_differences,
    dataset_fingerprint,
    saved_generations,
    where,
)
from shardkit.plan import LabelMode, Schedule, epoch_stream, mixture_diff, rank_split, resume_mixtures
from shardkit.plan.ordering import PlanConfig
from shardkit.plan.position import Position, Segment

log = logging.getLogger("shardkit.loader")

#: 2: the dataset fingerprint covers shard contents and classes; 1: shard sizes only (still loaded)
STATE_VERSION = 2


@dataclass(frozen=True, eq=False)
class DatasetIdentity:
    """What a state is saved from and checked against (:attr:`shardkit.ShardDataset.identity`).

    Attributes:
        snapshots: one per source (its pinned generation, corrections and selection).
        schedule: the mixtures planning each epoch now.
        label_mode: ``merged`` or ``per_source``.
        classes: the class names the labels index (``loader.classes``).
        plan: the ordering options.
    """

    snapshots: tuple[Snapshot, ...]
    schedule: Schedule
    label_mode: LabelMode
    classes: tuple[str, ...]
    plan: PlanConfig

    @property
    def manifests(self) -> tuple[Manifest, ...]:
        """The sources' pinned manifests."""
        return tuple(s.manifest for s in self.snapshots)


@dataclass(frozen=True, eq=False)
class Resumed:
    """A loaded state: where to continue, and which mixture plans each epoch."""

    position: Position
    schedule: Schedule


def classes_digest(classes: "tuple[str, ...] | list[str]") -> str:
    """A short hash of the class names the labels index (``loader.classes``), in order."""
    return hashlib.sha256(json.dumps(list(classes)).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- writing


def state_of(
    position: Position, ident: DatasetIdentity, *, world_size: int, num_workers: int, nodes: int = 1
) -> dict[str, Any]:
    """The state dict of ``position`` (what ``ShardLoader.state_dict()`` returns)."""
    return {
        **_plan_keys(position, ident, world_size=world_size, num_workers=num_workers, nodes=nodes),
        **_mixture_keys(ident, position.epoch),
    }


def _plan_keys(
    position: Position, ident: DatasetIdentity, *, world_size: int, num_workers: int, nodes: int
) -> dict[str, Any]:
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "dataset": dataset_fingerprint(ident.snapshots[0]),
        "plan": plan_to_dict(ident.plan),
        "epoch": position.epoch,
        "history": [
            [s.world_size, s.num_workers, s.batches_done, *([s.nodes] if s.nodes != 1 else [])]
            for s in position.history
        ],
        "world_size": world_size,
        "num_workers": num_workers,
        "nodes": nodes,
        "batches_done": position.batches_done,
        "size": position.size,
    }


def _mixture_keys(ident: DatasetIdentity, epoch: int) -> dict[str, Any]:
    """The keys that identify the mixture of ``epoch`` (and a pending switch)."""
    now = ident.schedule.mixture_for(epoch)
    out: dict[str, Any] = {
        "mixture": now.describe(),
        "labels": ident.label_mode.value,
        "classes": classes_digest(ident.classes),
    }
    if now is not ident.schedule.mixture:
        out["next_mixture"] = ident.schedule.mixture.describe()
    if len(ident.manifests) > 1:
        out["sources"] = [dataset_fingerprint(m) for m in ident.snapshots]
    return out


# --------------------------------------------------------------------------- reading


def resume_state(
    state: Any,
    ident: DatasetIdentity,
    *,
    world_size: int,
    num_workers: int,
    nodes: int = 1,
    allow_remix: bool = False,
) -> Resumed:
    """Where ``state`` continues on ``world_size`` x ``num_workers`` readers on ``nodes`` nodes, and with which mixtures.

    On the saved topology the position is the saved one (exact resume); on another one, what was
    consumed becomes a finished segment of the history (elastic resume). The mixtures: the saved one
    (with its bookkeeping) when it is this dataset's; with ``allow_remix`` another one finishes the
    saved epoch as saved and the current one takes over at the next epoch boundary.

    Raises:
        ShardkitError: not a loader state, an unknown version, another dataset (shard sizes, contents or
            classes differ), another mixture or labels mode, other ordering options, or a field of the wrong
            type or out of range (named).
    """
    schedule, checked = _resume_mixture(state, ident, allow_remix=allow_remix)
    position = _position(
        state, ident, schedule, world_size=world_size, num_workers=num_workers, nodes=nodes, dataset_checked=checked
    )
    return Resumed(position, schedule)


def _int(state: dict[str, Any], name: str, low: int) -> int:
    v = state.get(name)
    if type(v) is not int:
        raise ShardkitError(f"loader state field {name!r} must be an int, got {type(v).__name__} {v!r}")
    if v < low:
        raise ShardkitError(f"loader state field {name!r} must be >= {low}, got {v}")
    return v


def _check_dataset(state: dict[str, Any], snap: Snapshot) -> None:
    saved: Any
    if state.get("version") == 1:  # shard sizes were all a version 1 state recorded
        saved = {"shard_sizes": state.get("fingerprint")}
    else:
        saved = state.get("dataset")
        if not isinstance(saved, dict):
            raise ShardkitError(
                f"loader state field 'dataset' must be a dict of fingerprints, got {type(saved).__name__}"
            )
    differ = dataset_differences(saved, snap, complete=state.get("version") != 1)
    if differ:
        raise ShardkitError(
            f"loader state belongs to another dataset ({', '.join(differ)} differ from {where(snap) or 'this manifest'}); "
            "resume with the dataset it was saved from"
        )


def _check_plan(state: dict[str, Any], plan: PlanConfig) -> None:
    mine, saved = plan_to_dict(plan), state.get("plan")
    if not isinstance(saved, dict):
        raise ShardkitError(f"loader state field 'plan' must be a dict, got {type(saved).__name__}")
    saved = {"node_affinity": False, **saved}  # a state from before the option read it as off
    for k, v in mine.items():
        if k in saved and type(saved[k]) is not type(v):
            raise ShardkitError(
                f"loader state field 'plan.{k}' must be {type(v).__name__}, got {type(saved[k]).__name__} {saved[k]!r}"
            )
    if saved != mine:
        diff = {k: (saved.get(k), v) for k, v in mine.items() if saved.get(k) != v}
        raise ShardkitError(
            f"loader state was saved with other ordering options {diff} (saved, now); use the same options to resume"
        )


def _position(
    state: Any,
    ident: DatasetIdentity,
    schedule: Schedule,
    *,
    world_size: int,
    num_workers: int,
    nodes: int,
    dataset_checked: bool,
) -> Position:
    """The state's :class:`Position` on ``world_size`` x ``num_workers`` readers (``dataset_checked``: the
    mixture checks compared every source's fingerprints already)."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ShardkitError(
            "not a shardkit loader state (missing 'format'); pass what ShardLoader.state_dict() returned"
        )
    if state.get("version") not in (1, STATE_VERSION):
        raise ShardkitError(
            f"loader state version {state.get('version')!r} is not supported (this shardkit reads 1 and {STATE_VERSION})"
        )
    if not dataset_checked:
        _check_dataset(state, ident.snapshots[0])
    _check_plan(state, ident.plan)
    epoch = _int(state, "epoch", 0)
    saved_ws, saved_nw = _int(state, "world_size", 1), _int(state, "num_workers", 1)
    saved_nodes = _int(state, "nodes", 1) if "nodes" in state else 1
    done = _int(state, "batches_done", 0)
    hist = state.get("history")
    if not isinstance(hist, list):
        raise ShardkitError(f"loader state field 'history' must be a list, got {type(hist).__name__}")
    history = []
    for i, seg in enumerate(hist):
        if (
            not isinstance(seg, (list, tuple))
            or len(seg) not in (3, 4)
            or any(type(v) is not int for v in seg)
            or min(seg[0], seg[1], *seg[3:]) < 1
            or seg[2] < 0
        ):
            raise ShardkitError(
                f"loader state field 'history[{i}]' must be [world_size >= 1, num_workers >= 1, batches_done >= 0] "
                f"and optionally nodes >= 1, got {seg!r}"
            )
        history.append(Segment(*seg))
    stream = epoch_stream(
        schedule.mixture_for(epoch), ident.plan, epoch, history, world_size=saved_ws, nodes=saved_nodes
    )
    total = rank_split(len(stream), saved_ws, ident.plan).num_batches
    if done > total:
        raise ShardkitError(
            f"loader state field 'batches_done' is {done}, but epoch {epoch} has only {total} batches per rank on {saved_ws} rank(s)"
        )
    size = _int(state, "size", 0) if "size" in state else 0
    pos = Position(epoch, done, tuple(history), size)
    if (saved_ws, saved_nw, saved_nodes) != (world_size, num_workers, nodes):
        pos = pos.replanned(saved_ws, saved_nw, saved_nodes)
    return pos


def _saved_mixture(state: dict[str, Any]) -> dict[str, Any]:
    saved = state.get("mixture")
    if isinstance(saved, dict) and isinstance(saved.get("sources"), list):
        return saved
    if saved is not None:
        raise ShardkitError(f"loader state field 'mixture' must be a dict with 'sources', got {type(saved).__name__}")
    d = state.get("dataset")  # a state without a mixture (older shardkit): one source, known by its shard sizes
    fp = d.get("shard_sizes") if isinstance(d, dict) else state.get("fingerprint")
    return {
        "epoch_size": None,
        "sources": [{"fingerprint": fp, "samples": 0, "weight": None, "repeat": None, "choose": None}],
    }


def _check_order(saved: dict[str, Any], current: Any) -> None:
    """One line when ``current`` has the saved mixture's sources (by their shard sizes) in another order."""
    theirs = [d.get("fingerprint") for d in saved.get("sources", []) if isinstance(d, dict)]
    mine = [d["fingerprint"] for d in current.describe()["sources"]]
    if len(theirs) < 2 or theirs == mine or sorted(map(str, theirs)) != sorted(map(str, mine)):
        return
    left = list(enumerate(mine))
    order = []
    for fp in theirs:  # the current source each saved one is (the first unmatched one with its shard sizes)
        j = next(k for k, (i, f) in enumerate(left) if f == fp)
        order.append(left.pop(j)[0])
    urls = [current.sources[i].url for i in order]
    raise ShardkitError(
        f"loader state was saved with the same sources in another order: the checkpoint had them as "
        f"[{', '.join(urls)}] (now sources {order} in that order); pass the sources in the checkpoint's order"
    )


def _resume_mixture(state: Any, ident: DatasetIdentity, *, allow_remix: bool) -> tuple[Schedule, bool]:
    """Check ``state``'s mixture against ``ident``'s: ``(the schedule to plan with, whether every source's data
    was checked here)``; when not, :func:`_position` checks the (first source's) dataset fingerprint.

    Raises:
        ShardkitError: another mixture without ``allow_remix`` (every difference named), another labels mode,
            or a source whose contents or classes differ from the saved one's.
    """
    current, manifests = ident.schedule.mixture, ident.snapshots
    unchanged = (Schedule(current), False)
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT or type(state.get("epoch")) is not int:
        return unchanged  # _position names what is wrong
    labels = state.get("labels")
    if labels is not None and labels != ident.label_mode.value:
        raise ShardkitError(
            f"loader state field 'labels' is {labels!r} but this loader's labels are {ident.label_mode.value!r}: the same label "
            f"index would name another class; resume with labels={labels!r}"
        )
    saved, epoch = _saved_mixture(state), state["epoch"]
    if (
        not allow_remix
        and len(saved["sources"]) == 1 == len(manifests)
        and saved["sources"][0].get("fingerprint") != current.describe()["sources"][0]["fingerprint"]
    ):
        return unchanged  # one dataset for another: _position's message names what differs
    if (
        not allow_remix
        and len(manifests) == 1
        and isinstance(state.get("dataset"), dict)
        and dataset_differences(state["dataset"], manifests[0])
    ):
        return unchanged  # the same shape, other data: _position's message names what differs
    if not allow_remix:
        _check_order(saved, current)
    mid = bool(state.get("batches_done") or state.get("history"))
    nxt = state.get("next_mixture")
    now, later = resume_mixtures(
        saved, current, epoch, mid_epoch=mid, allow_remix=allow_remix, saved_next=nxt if isinstance(nxt, dict) else None
    )
    remixed = bool(mixture_diff(saved, current.describe()))
    fps = state.get("sources")
    if len(manifests) > 1 and isinstance(fps, list):
        if not (remixed or allow_remix):
            pairs = list(enumerate(zip(fps, manifests)))
        else:  # mid-epoch, the saved mixture finishes its epoch with the current source of the same shard sizes: the same data only
            sizes: list[Any] = [dataset_fingerprint(m)["shard_sizes"] for m in manifests]
            pairs = [
                (i, (a, manifests[sizes.index(a.get("shard_sizes"))]))
                for i, a in enumerate(fps)
                if mid and isinstance(a, dict) and a.get("shard_sizes") in sizes
            ]
        for i, (a, m) in pairs:
            differ = dataset_differences(a, m) if isinstance(a, dict) else ["fingerprints"]
            if differ:
                raise ShardkitError(
                    f"loader state's source {i} is another dataset than {where(m) or 'this source'} ({', '.join(differ)} "
                    f"differ); resume with the sources it was saved from (at least to finish epoch {epoch}), or start "
                    "the new sources at an epoch boundary (allow_remix=True with a state saved between epochs)"
                )
    saved_classes = state.get("classes")
    if saved_classes is not None and saved_classes != classes_digest(ident.classes):
        if not allow_remix:
            raise ShardkitError(
                "loader state field 'classes' does not match this loader's classes (loader.classes); resume with the "
                "sources and labels it was saved with"
            )
        log.warning(
            "shardkit: the remixed sources index other classes than the saved state (%d now): from the rest of epoch %d on, "
            "a label index may name another class than in the checkpoint's training; loader.classes lists them",
            len(ident.classes),
            epoch,
        )
    return Schedule.switching(now, later, epoch), bool(remixed or len(manifests) > 1)  # checked above, per source
