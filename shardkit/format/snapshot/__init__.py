"""A split as a reader sees it: one generation, its corrections and a selection applied.

:func:`resolve` turns a URL -- a split, or a selection of one -- into a :class:`Snapshot`: the manifest pinned
to one generation (its shards, whose URLs resolve against it; its classes) and the :class:`Subset` of samples
that are in, with their changed labels. Every reader starts here (the loader, ``shardkit.open``, ``info``,
``verify``, ``bench``, ``show``), so a removed sample or an old label cannot reach one reader and not another.

Its modules: :mod:`~shardkit.format.snapshot.pin` (a manifest pinned to one generation, its fingerprint),
:mod:`~shardkit.format.snapshot.selection` (the selection folder) and :mod:`~shardkit.format.snapshot.subset`
(the samples that are in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from shardkit.errors import ManifestError, ShardkitError
from shardkit.format.generations import CorrectionRows
from shardkit.format.manifest import Manifest
from shardkit.format.snapshot.pin import corrections_of, fingerprint, generations_of, latest, pin, shard_span
from shardkit.format.snapshot.selection import BITS_NAME, Selection, read_manifest
from shardkit.format.snapshot.subset import Subset
from shardkit.storage import fs as storage


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A split pinned to one generation, with the samples that are in.

    Attributes:
        url: what was asked for (a split or a selection).
        manifest: the split's manifest as of :attr:`generation` (a selection's parent's); shard URLs resolve
            against it.
        generation: the pinned generation.
        subset: the samples in (corrections, then the selection) and their changed labels.
        selection: the selection :attr:`url` names, or ``None`` for a split.
    """

    url: str
    manifest: Manifest
    generation: int
    subset: Subset
    selection: Optional[Selection] = None

    @property
    def shard_sizes(self) -> np.ndarray:
        """Samples in per shard (what the planner plans over)."""
        return self.subset.sizes(self.manifest.shard_sizes)

    @property
    def num_samples(self) -> int:
        """Samples in."""
        return int(self.shard_sizes.sum())

    def fingerprint(self) -> str:
        """The pinned split's fingerprint and the subset's: what a loader state is checked against."""
        return f"{fingerprint(self.manifest)[:32]}:{self.subset.fingerprint()}"


def corrected(manifest: Manifest, read: Any) -> Subset:
    """The subset the corrections of ``manifest``'s generations leave (``read(url) -> bytes`` fetches files).

    Raises:
        ManifestError: a corrections file or key table is missing, changed, or names a key or class the split
            does not have.
    """
    from shardkit.format.tables import TABLES_FORMAT, KeyTable, checked

    gens = generations_of(manifest)
    n = len(manifest.shards)
    if not any(g.corrections is not None for g in gens):
        return Subset.everything(n)
    base = manifest.base_url
    tables = []
    for g in gens:
        t = g.tables or (manifest.tables if g.number == 0 else {})
        if not t or t.get("format") != TABLES_FORMAT:
            raise ManifestError(f"{base}: generation {g.number} has no key table, which its corrections need")
        turl = storage.join(base, t["keys"]["name"])
        table = KeyTable.from_bytes(checked(read(turl), t["keys"], turl), turl)
        first, stop = shard_span(manifest, g.number)
        table.check(manifest.shard_sizes[first:stop], turl)
        tables.append((first, table))

    def where(key: str, url: str) -> tuple[int, int]:
        for first, table in tables:
            at = table.find(key)
            if at is not None:
                return first + at[0], at[1]
        raise ManifestError(f"{url}: names key {key!r}, which no generation of {base} holds")

    removed: list[set[int]] = [set() for _ in range(n)]
    relabels: list[dict[int, int]] = [{} for _ in range(n)]
    index = {c: i for i, c in enumerate(manifest.classes)}
    for g in gens:
        if g.corrections is None:
            continue
        url = storage.join(base, g.corrections.name)
        rows: CorrectionRows = corrections_of(manifest, g.number, read(url))
        for key in rows.removed:
            shard, pos = where(key, url)
            removed[shard].add(pos)
            relabels[shard].pop(pos, None)
        for key, name in rows.relabeled:
            shard, pos = where(key, url)
            if name not in index or index[name] >= g.classes:
                raise ManifestError(f"{url}: relabels {key!r} to {name!r}, not a class of generation {g.number}")
            relabels[shard][pos] = index[name]
    sizes = manifest.shard_sizes
    kept = tuple(
        None if not r else np.setdiff1d(np.arange(sizes[i], dtype=np.int64), np.fromiter(r, np.int64, len(r)))
        for i, r in enumerate(removed)
    )
    return Subset(kept, tuple(relabels))


def resolve(
    url: "str | Manifest",
    *,
    generation: Optional[int] = None,
    allow_unsafe_names: bool = False,
    **storage_options: Any,
) -> Snapshot:
    """The :class:`Snapshot` of a split or selection URL (or an already loaded split manifest).

    Args:
        url: a split directory, a selection folder, or either's ``manifest.json``; or a :class:`Manifest`.
        generation: pin this generation (``None``: the newest; a selection: its own, the only one allowed).
        allow_unsafe_names: accept shard names that are paths or URLs (trusted manifests only).
        storage_options: passed to fsspec.

    Raises:
        ManifestError: no such generation; a selection whose parent changed; damaged corrections or bits.
    """

    def read(u: str) -> bytes:
        try:
            return storage.read_bytes(u, **storage_options)
        except ShardkitError as exc:
            raise ManifestError(f"{u}: cannot read ({exc}); restore it or convert again") from None

    found = (
        url
        if isinstance(url, Manifest)
        else read_manifest(url, allow_unsafe_names=allow_unsafe_names, **storage_options)
    )
    asked = found.url if isinstance(url, Manifest) else str(url)
    if isinstance(found, Selection):
        sel = found
        if generation is not None and generation != sel.generation:
            raise ManifestError(
                f"{asked}: a selection of generation {sel.generation} of {sel.parent}; it has no generation {generation}"
            )
        parent = read_manifest(sel.parent, allow_unsafe_names=allow_unsafe_names, **storage_options)
        if isinstance(parent, Selection):
            raise ManifestError(f"{asked}: its parent {sel.parent} is a selection, not a split")
        if sel.generation > latest(parent):
            raise ManifestError(
                f"{asked}: taken from generation {sel.generation} of {sel.parent}, which has generations "
                f"0..{latest(parent)}; its parent changed underneath it: take the selection again with `shardkit select`"
            )
        pinned = pin(parent, sel.generation)
        if fingerprint(pinned) != sel.parent_fingerprint:
            raise ManifestError(
                f"{asked}: its parent {sel.parent} changed since the selection was taken (reconverted or corrected); "
                "take the selection again with `shardkit select`"
            )
        mask = sel.mask(read(storage.join(sel.base_url, BITS_NAME)))
        subset = corrected(pinned, read).restrict(Subset.from_mask(mask, pinned.shard_sizes))
        return Snapshot(asked, pinned, sel.generation, subset, sel)
    gen = latest(found) if generation is None else generation
    pinned = pin(found, gen)
    return Snapshot(asked, pinned, gen, corrected(pinned, read))


__all__ = ["Snapshot", "corrected", "read_manifest", "resolve"]
