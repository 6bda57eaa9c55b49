"""Shard and index files in a split folder that its manifest does not list.

The loader and the planner read a split's shards from its manifest, never from a listing: a
``train-000003.tar`` that the manifest does not name (a leftover of another conversion, or a shard
dropped from an edited manifest) is silently not part of the split, and its samples vanish from
training without a word. :func:`stray_files` names such files so that ``shardkit verify`` can say so.

What is looked at: the ``*.tar`` shards and ``*.idx`` sample indexes directly in the split folder and
in its prefix directories (four hex digits, :mod:`shardkit.format.prefixes`). A sample index is stray
when the shard it belongs to is not listed (the index of a listed shard is that shard's, whatever the
manifest's ``sample_index`` says). shardkit's own work folder (:data:`shardkit.storage.fs.WORK_DIR`),
the manifest and every other file are not looked at.
"""

from __future__ import annotations

from typing import Any

from shardkit.format.index import INDEX_SUFFIX, index_url
from shardkit.format.manifest import Manifest
from shardkit.format.prefixes import is_prefix_dir
from shardkit.storage import fs as storage

#: the suffixes of the files a split folder holds for its manifest's shards
SHARD_SUFFIX = ".tar"
#: stray files named in one message (the rest are counted)
SHOWN_STRAYS = 10


def stray_files(m: Manifest, **storage_options: Any) -> list[str]:
    """The shard and index files in ``m``'s split folder (and its prefix directories) that ``m`` does not list.

    Args:
        m: a loaded manifest (its ``url`` locates the split folder, local or any fsspec URL).
        storage_options: fsspec options.

    Returns:
        paths relative to the split folder (``train-000003.tar``, ``ac72/train-000003.idx``), sorted.
    """
    listed = {s.name for s in m.shards}
    listed |= {index_url(n) for n in listed}
    base = m.base_url
    dirs, files = _list(base, storage_options)
    found = list(files)
    for d in dirs:
        if is_prefix_dir(d):
            found += [f"{d}/{f}" for f in _list(storage.join(base, d), storage_options)[1]]
    return sorted(f for f in found if f.endswith((SHARD_SUFFIX, INDEX_SUFFIX)) and f not in listed)


def _list(url: str, storage_options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """:func:`shardkit.storage.fs.list_dir`, leaving no listing in an object store client's cache: a cached
    listing would answer later existence checks in this process with what was there now."""
    out = storage.list_dir(url, **storage_options)
    if not storage.is_local(url):
        fs, path = storage.get_fs(url, **storage_options)
        fs.invalidate_cache(path)
    return out


def stray_message(strays: list[str]) -> str:
    """One line naming ``strays`` (the first :data:`SHOWN_STRAYS`), how many, and what to do."""
    shown = ", ".join(strays[:SHOWN_STRAYS]) + (
        f" and {len(strays) - SHOWN_STRAYS} more" if len(strays) > SHOWN_STRAYS else ""
    )
    return (
        f"{len(strays)} shard or index file(s) the manifest does not list: {shown}; their samples are not part of "
        "the split (the loader reads only listed shards): delete them if they are leftovers, or re-convert if the "
        "manifest lost shards"
    )


__all__ = ["SHARD_SUFFIX", "stray_files", "stray_message"]
