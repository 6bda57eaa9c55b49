"""The loader's resumable state: a plain dict, checked field by field when it is loaded.

Keys: ``format``, ``version``, ``dataset`` (fingerprints of the shard sizes, the
shards' sha256s and the class names, from the manifest), ``plan`` (the ordering
options), ``epoch``, ``history`` (segments of the epoch read with other
topologies), ``world_size``, ``num_workers``, ``batches_done`` and ``size`` (the output
image size set with ``set_epoch(..., size=)``, 0: the configured one; states saved
before it existed load at the configured size). Loading refuses,
naming the field, a state of another dataset (even one with the same shard
layout), other ordering options, wrong types and out-of-range numbers.
Version 1 states (fingerprint of the shard sizes only) still load.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from shardkit.errors import ShardkitError
from shardkit.format.manifest import Manifest
from shardkit.loader.config import plan_to_dict
from shardkit.plan.epoch import PlanConfig
from shardkit.plan.position import Position, Segment, fingerprint

STATE_FORMAT = "shardkit-loader-state"
#: 2: the dataset fingerprint covers shard contents and classes; 1: shard sizes only (still loaded)
STATE_VERSION = 2


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dataset_fingerprint(manifest: Manifest) -> dict[str, str]:
    """What identifies a dataset's data: its shard sizes, the shards' sha256s and its classes."""
    return {
        "shard_sizes": fingerprint(manifest.shard_sizes),
        "shard_sha256": _digest(",".join(s.sha256 for s in manifest.shards)),
        "classes": _digest(json.dumps(list(manifest.classes))),
    }


def to_state(position: Position, *, manifest: Manifest, plan: PlanConfig, world_size: int, num_workers: int) -> dict[str, Any]:
    """The state dict of ``position``."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "dataset": dataset_fingerprint(manifest),
        "plan": plan_to_dict(plan),
        "epoch": position.epoch,
        "history": [[s.world_size, s.num_workers, s.batches_done] for s in position.history],
        "world_size": world_size,
        "num_workers": num_workers,
        "batches_done": position.batches_done,
        "size": position.size,
    }


def _int(state: dict[str, Any], name: str, low: int) -> int:
    v = state.get(name)
    if type(v) is not int:
        raise ShardkitError(f"loader state field {name!r} must be an int, got {type(v).__name__} {v!r}")
    if v < low:
        raise ShardkitError(f"loader state field {name!r} must be >= {low}, got {v}")
    return v


_WHAT = {"shard_sizes": "shard sizes", "shard_sha256": "shard contents (sha256)", "classes": "class names"}


def dataset_differences(saved: dict[str, Any], manifest: Manifest, *, complete: bool = True) -> list[str]:
    """What differs between saved dataset fingerprints and ``manifest``'s, one phrase each (empty: the same).

    ``complete``: a fingerprint missing from ``saved`` counts as a difference (False: version 1 states,
    which recorded the shard sizes only)."""
    mine = dataset_fingerprint(manifest)
    differ = [k for k in mine if (k in saved and saved[k] != mine[k]) or (k not in saved and complete)]
    return [_WHAT[k] for k in differ]


def _check_dataset(state: dict[str, Any], manifest: Manifest) -> None:
    if state.get("version") == 1:  # shard sizes were all a version 1 state recorded
        saved = {"shard_sizes": state.get("fingerprint")}
    else:
        saved = state.get("dataset")
        if not isinstance(saved, dict):
            raise ShardkitError(f"loader state field 'dataset' must be a dict of fingerprints, got {type(saved).__name__}")
    differ = dataset_differences(saved, manifest, complete=state.get("version") != 1)
    if differ:
        raise ShardkitError(
            f"loader state belongs to another dataset ({', '.join(differ)} differ from {manifest.url or 'this manifest'}); "
            "resume with the dataset it was saved from"
        )


def _check_plan(state: dict[str, Any], plan: PlanConfig) -> None:
    mine, saved = plan_to_dict(plan), state.get("plan")
    if not isinstance(saved, dict):
        raise ShardkitError(f"loader state field 'plan' must be a dict, got {type(saved).__name__}")
    for k, v in mine.items():
        if k in saved and type(saved[k]) is not type(v):
            raise ShardkitError(f"loader state field 'plan.{k}' must be {type(v).__name__}, got {type(saved[k]).__name__} {saved[k]!r}")
    if saved != mine:
        diff = {k: (saved.get(k), v) for k, v in mine.items() if saved.get(k) != v}
        raise ShardkitError(f"loader state was saved with other ordering options {diff} (saved, now); use the same options to resume")


def from_state(
    state: Any,
    *,
    manifest: Manifest,
    plan: PlanConfig,
    world_size: int,
    num_workers: int,
    num_batches: Callable[[Position, int], int],
) -> Position:
    """The :class:`Position` to continue from on ``world_size`` x ``num_workers`` readers.

    ``num_batches(position, world_size)`` is the number of batches per rank of the
    stream of ``position`` (its epoch after its history) split over ``world_size`` ranks.
    On the saved topology the position is the saved one (exact resume); on another
    one, what was consumed becomes a finished segment of the history (elastic resume).

    Raises:
        ShardkitError: not a loader state, an unknown version, another dataset, other
            ordering options, or a field of the wrong type or out of range (named).
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ShardkitError("not a shardkit loader state (missing 'format'); pass what ShardLoader.state_dict() returned")
    if state.get("version") not in (1, STATE_VERSION):
        raise ShardkitError(f"loader state version {state.get('version')!r} is not supported (this shardkit reads 1 and {STATE_VERSION})")
    _check_dataset(state, manifest)
    _check_plan(state, plan)
    epoch = _int(state, "epoch", 0)
    saved_ws, saved_nw = _int(state, "world_size", 1), _int(state, "num_workers", 1)
    done = _int(state, "batches_done", 0)
    hist = state.get("history")
    if not isinstance(hist, list):
        raise ShardkitError(f"loader state field 'history' must be a list, got {type(hist).__name__}")
    history = []
    for i, seg in enumerate(hist):
        if not isinstance(seg, (list, tuple)) or len(seg) != 3 or any(type(v) is not int for v in seg) or min(seg[0], seg[1]) < 1 or seg[2] < 0:
            raise ShardkitError(f"loader state field 'history[{i}]' must be [world_size >= 1, num_workers >= 1, batches_done >= 0], got {seg!r}")
        history.append(Segment(*seg))
    pos = Position(epoch, 0, tuple(history))
    total = num_batches(pos, saved_ws)
    if done > total:
        raise ShardkitError(f"loader state field 'batches_done' is {done}, but epoch {epoch} has only {total} batches per rank on {saved_ws} rank(s)")
    size = _int(state, "size", 0) if "size" in state else 0
    pos = Position(epoch, done, tuple(history), size)
    if (saved_ws, saved_nw) != (world_size, num_workers):
        pos = pos.replanned(saved_ws, saved_nw)
    return pos
