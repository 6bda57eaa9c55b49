"""What identifies the data a loader state was saved from: fingerprints, the pinned generation and the snapshot.

:func:`dataset_fingerprint` is the ``dataset`` value of a state (and each entry of a mixture's ``sources``);
:func:`dataset_differences` names what differs from a loader's; :func:`saved_generations` reads the generation
each source was saved at, which the loader re-pins before the state is checked (the state's generation wins:
docs/design/subsets.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

from shardkit.errors import ShardkitError
from shardkit.format.manifest import Manifest
from shardkit.format.snapshot import Snapshot
from shardkit.format.snapshot.subset import Subset
from shardkit.plan.stream import sizes_fingerprint

STATE_FORMAT = "shardkit-loader-state"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plain(snap: Snapshot) -> bool:
    """A split never appended to nor corrected, read whole: its states are those of a split without generations."""
    return snap.selection is None and not snap.manifest.generations and snap.subset.is_everything


def dataset_fingerprint(snap: "Snapshot | Manifest") -> dict[str, Any]:
    """What identifies a dataset's data as read: the samples in per shard, the shards' sha256s and its classes;
    for an appended, corrected or selected split also its pinned ``generation`` and the ``snapshot``'s
    fingerprint (:meth:`~shardkit.format.snapshot.Snapshot.fingerprint`: corrections and selection)."""
    if isinstance(snap, Manifest):
        snap = Snapshot(snap.url, snap, 0, Subset.everything(len(snap.shards)))
    m = snap.manifest
    out: dict[str, Any] = {
        "shard_sizes": sizes_fingerprint(snap.shard_sizes),
        "shard_sha256": _digest(",".join(s.sha256 for s in m.shards)),
        "classes": _digest(json.dumps(list(m.classes))),
    }
    if not plain(snap):
        out["generation"] = snap.generation
        out["snapshot"] = snap.fingerprint()
    return out


def saved_generations(state: Any, snapshots: "tuple[Snapshot, ...]") -> list[Optional[int]]:
    """The generation each source of ``state`` was read at (None: nothing to re-pin, or not a readable state).

    A state without one (saved on a split never appended to, or by a shardkit without generations) was read at
    the loader's own generation when its shard sizes are the loader's, else at generation 0.

    Raises:
        ShardkitError: a saved generation that is not an int >= 0 (named).
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return [None] * len(snapshots)
    fps = state.get("sources") if len(snapshots) > 1 else [state.get("dataset")]
    if not isinstance(fps, list) or len(fps) != len(snapshots):
        return [None] * len(snapshots)
    out: list[Optional[int]] = []
    for i, (fp, snap) in enumerate(zip(fps, snapshots)):
        if state.get("version") == 1 and len(snapshots) == 1:
            fp = {"shard_sizes": state.get("fingerprint")}
        if not isinstance(fp, dict) or snap.selection is not None:  # a selection reads its own generation only
            out.append(None)
            continue
        g = fp.get("generation")
        if g is None:
            own = fp.get("shard_sizes") == sizes_fingerprint(snap.shard_sizes)
            out.append(None if own else 0)
        elif type(g) is not int or g < 0:
            where = "dataset" if len(snapshots) == 1 else f"sources[{i}]"
            raise ShardkitError(f"loader state field '{where}.generation' must be an int >= 0, got {g!r}")
        else:
            out.append(g)
    return out


_WHAT = {
    "shard_sizes": "shard sizes",
    "shard_sha256": "shard contents (sha256)",
    "classes": "class names",
    "generation": "generation",
    "snapshot": "corrections or selection",
}


def dataset_differences(saved: dict[str, Any], snap: "Snapshot | Manifest", *, complete: bool = True) -> list[str]:
    """What differs between saved dataset fingerprints and ``snap``'s, one phrase each (empty: the same).

    ``complete``: a fingerprint missing from ``saved`` counts as a difference (False: version 1 states,
    which recorded the shard sizes only)."""
    if isinstance(snap, Manifest):
        snap = Snapshot(snap.url, snap, 0, Subset.everything(len(snap.shards)))
    mine = dataset_fingerprint(snap)
    if "snapshot" not in saved and snap.selection is None and snap.subset.is_everything:
        mine.pop("generation", None)  # a state of the split before its first append: the same samples, as stored
        mine.pop("snapshot", None)
    differ = [k for k in mine if (k in saved and saved[k] != mine[k]) or (k not in saved and complete)]
    return [_WHAT[k] for k in differ]


def where(snap: Snapshot) -> str:
    """A snapshot's place in messages: a split's manifest, or the selection."""
    return snap.manifest.url if snap.selection is None else snap.url


__all__ = ["STATE_FORMAT", "dataset_differences", "dataset_fingerprint", "plain", "saved_generations", "where"]
