"""A plain reader of a living split (generations, corrections) as ``resolve()`` says it is read.

The reader takes only the :class:`~shardkit.format.snapshot.Snapshot`'s subset (which samples are in, which
labels changed) from shardkit; the samples themselves are read with :mod:`tarfile` and :mod:`json`, and the
image's identity from its colour (:func:`tests.support.source_reference.image_id`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections import Counter
from collections.abc import Sequence

from tests.support.source_reference import image_id, mean_colour


def stored(split_dir: str) -> list[dict]:
    """Every stored sample of the split at ``split_dir`` in manifest order (shard, position), not corrected:
    ``{"shard", "pos", "key", "cls", "path", "id"}``."""
    with open(os.path.join(split_dir, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    out = []
    for j, s in enumerate(m["shards"]):
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(os.path.join(split_dir, s["name"])) as tf:
            for mem in tf.getmembers():
                key, ext = mem.name.split(".", 1)
                groups.setdefault(key, {})[ext] = tf.extractfile(mem).read()  # type: ignore[union-attr]
        for pos, (key, g) in enumerate(groups.items()):
            meta = json.loads(g["json"])
            out.append(
                {
                    "shard": j,
                    "pos": pos,
                    "key": key,
                    "cls": int(g["cls"]),
                    "path": meta["path"],
                    "id": image_id(mean_colour(g["jpg"])),
                }
            )
    return out


def as_read(split_dir: str, generation: int | None = None) -> list[dict]:
    """The samples a reader of the split gets (``resolve()``'s subset applied to :func:`stored`), each with its
    class name after relabels (``"class"``)."""
    from shardkit.format.snapshot import resolve

    snap = resolve(split_dir, generation=generation)
    n = len(snap.manifest.shards)
    out = []
    for s in stored(split_dir):
        if s["shard"] >= n:
            continue
        kept = snap.subset.kept[s["shard"]]
        if kept is not None and s["pos"] not in set(kept.tolist()):
            continue
        label = snap.subset.label(s["shard"], s["pos"], s["cls"])
        out.append({**s, "class": snap.manifest.classes[label]})
    return out


def multiset(samples: Sequence[dict]) -> Counter:
    """``(class name, colour id)`` of ``samples``, counted."""
    return Counter((s["class"], s["id"]) for s in samples)


def files_state(split_dir: str) -> dict[str, tuple[int, str]]:
    """``name -> (mtime_ns, sha256)`` of every file directly in ``split_dir`` (the journal folder left out)."""
    out = {}
    for name in sorted(os.listdir(split_dir)):
        p = os.path.join(split_dir, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[name] = (os.stat(p).st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


__all__ = ["as_read", "files_state", "multiset", "stored"]
