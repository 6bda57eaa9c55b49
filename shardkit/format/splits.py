"""Which splits a dataset URL holds: the finished ones (a ``manifest.json`` each) and the unfinished ones.

A dataset URL is a split folder (holding ``manifest.json``) or a root whose
sub-folders are splits, local or any fsspec URL. A folder with ``*.tar`` shards
or a conversion journal (``_shardkit/``) but no manifest is an interrupted
conversion: :func:`find_splits` returns it as :class:`Incomplete`, with how far
it got and the command that finishes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from shardkit.errors import ManifestError, ShardkitError
from shardkit.format.manifest import MANIFEST_NAME, Manifest, load_manifest
from shardkit.format.prefixes import is_prefix_dir
from shardkit.storage import fs as storage

_JOURNAL_DIR = "_shardkit"  # shardkit.convert.journal.JOURNAL_DIR (not imported: reading a dataset needs no converter)
_RECORD = re.compile(r".+-[0-9]{6}\.json")  # a finished planned shard's journal record
_FINISH = (
    "finish it by rerunning the same 'shardkit convert SRC DEST' command "
    "(after a multi-task conversion: run the missing tasks, then 'shardkit merge DEST')"
)


@dataclass(frozen=True)
class Incomplete:
    """A split folder that a conversion started but did not finish (no manifest)."""

    url: str
    detail: str


@dataclass
class Found:
    """What is at a dataset URL: the finished splits' manifests, the unfinished split folders and the split
    folders whose manifest cannot be read (``unreadable``: its ``detail`` is the :class:`ManifestError`)."""

    manifests: list[Manifest]
    incomplete: list[Incomplete]
    unreadable: list[Incomplete] = field(default_factory=list)


def _incomplete(url: str, files: list[str], dirs: list[str], **so: Any) -> Optional[Incomplete]:
    """Why the folder ``url`` (without a manifest) is an unfinished conversion, or ``None`` if it is not one."""
    shards = [f for f in files if f.endswith(".tar")]
    if _JOURNAL_DIR in dirs:  # a conversion's prefix directories (convert --prefixes N) hold its shards
        for d in filter(is_prefix_dir, dirs):
            shards += [f"{d}/{f}" for f in _list(storage.join(url, d), **so)[1] if f.endswith(".tar")]
    if _JOURNAL_DIR not in dirs and not shards:
        return None
    done = ""
    plan_url = storage.join(url, _JOURNAL_DIR, "plan.json")
    if _JOURNAL_DIR in dirs and storage.exists(plan_url, **so):
        try:
            planned = int(json.loads(storage.read_bytes(plan_url, **so)).get("num_planned", 0))
            _, jfiles = _list(storage.join(url, _JOURNAL_DIR), **so)
            records = sum(1 for f in jfiles if _RECORD.fullmatch(f))
            done = f", {records} of {planned} planned shards finished" if planned else ", planned but no shard finished"
        except (
            ShardkitError,
            ValueError,
            TypeError,
            AttributeError,
            RecursionError,
        ):  # a hostile plan.json is no crash
            done = ", its conversion plan is unreadable"
    what = f"{len(shards)} shard(s)" + (f" and a conversion journal ({_JOURNAL_DIR}/)" if _JOURNAL_DIR in dirs else "")
    return Incomplete(url, f"incomplete conversion: {what} but no {MANIFEST_NAME}{done}; {_FINISH}")


def _list(url: str, **so: Any) -> tuple[list[str], list[str]]:
    """``(sub-folders, files)`` under ``url`` (empty if it does not exist)."""
    from shardkit.storage.fs import list_dir

    return list_dir(url, **so)


def find_splits(url: str, **storage_options: Any) -> Found:
    """The manifest at ``url`` or those of its split sub-folders (sorted), and the unfinished split folders.

    Raises:
        ManifestError: neither a manifest nor an unfinished conversion is there.
    """
    so = storage_options
    if url.rstrip("/").endswith(".json") or storage.exists(storage.join(url, MANIFEST_NAME), **so):
        return Found([load_manifest(url, **so)], [])
    dirs, files = _list(url, **so)
    incomplete = [i for i in [_incomplete(url, files, dirs, **so)] if i is not None]
    manifests, unreadable = [], []
    for d in dirs:
        if d == _JOURNAL_DIR or (_JOURNAL_DIR in dirs and is_prefix_dir(d)):  # a split folder's own folders
            continue
        sub = storage.join(url, d)
        if storage.exists(storage.join(sub, MANIFEST_NAME), **so):
            try:
                manifests.append(load_manifest(sub, **so))
            except ManifestError as exc:  # one damaged split does not hide the others from verify and info
                unreadable.append(Incomplete(sub, str(exc)))
        else:
            sdirs, sfiles = _list(sub, **so)
            incomplete += [i for i in [_incomplete(sub, sfiles, sdirs, **so)] if i is not None]
    if not manifests and not incomplete and not unreadable:
        raise ManifestError(
            f"{url}: no {MANIFEST_NAME} here or in its sub-folders; is this a dataset written by 'shardkit convert'?"
        )
    return Found(manifests, incomplete, unreadable)


def load_manifests(url: str, **storage_options: Any) -> list[Manifest]:
    """The manifest at ``url``, or those of its split sub-folders (sorted); :class:`ManifestError` if none or one is unreadable."""
    found = find_splits(url, **storage_options)
    if found.unreadable:
        raise ManifestError(found.unreadable[0].detail)
    if not found.manifests:
        raise ManifestError(f"{url}: no finished split: {found.incomplete[0].detail}")
    return found.manifests
