"""A split's manifest as of one generation, and what identifies it.

:func:`pin` gives the manifest as of one generation (its shards, classes and counts), which is what a loader,
``shardkit.open`` and a selection read; :func:`fingerprint` is what a selection and a loader state check a split
against; :func:`corrections_of` reads and checks one generation's corrections file. The records themselves are
:mod:`shardkit.format.generations`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Optional

from shardkit.errors import ManifestError
from shardkit.format.generations import CORRECTED_VERSION, CorrectionRows, Generation
from shardkit.format.manifest import Manifest
from shardkit.storage import fs as storage


def generations_of(m: Manifest) -> list[Generation]:
    """``m``'s generations (a split written once: its one generation 0, built from the manifest)."""
    if m.generations:
        return list(m.generations)
    return [
        Generation(
            number=0,
            shards=len(m.shards),
            samples=m.num_samples,
            classes=len(m.classes),
            class_counts=list(m.class_counts),
            tables=dict(m.tables),
        )
    ]


def latest(m: Manifest) -> int:
    """The newest generation's number."""
    return max(0, len(m.generations) - 1)


def shard_span(m: Manifest, generation: int) -> tuple[int, int]:
    """``(first, stop)``: the manifest shard indexes ``generation`` added."""
    gens = generations_of(m)
    first = sum(g.shards for g in gens[:generation])
    return first, first + gens[generation].shards


def pin(m: Manifest, generation: Optional[int] = None) -> Manifest:
    """``m`` as of ``generation`` (``None``: the newest): its shards, classes and counts, nothing added later.

    Raises:
        ManifestError: no such generation (naming the ones there are).
    """
    gens = generations_of(m)
    if generation is None:
        return m
    if isinstance(generation, bool) or not isinstance(generation, int) or not 0 <= generation < len(gens):
        raise ManifestError(
            f"{m.url or '<manifest>'}: no generation {generation!r}; it has generations 0..{len(gens) - 1}"
        )
    if generation == len(gens) - 1:
        return m
    kept = gens[: generation + 1]
    shards = m.shards[: sum(g.shards for g in kept)]
    classes = m.classes[: kept[-1].classes]
    counts = [0] * len(classes)
    for g in kept:
        for i, c in enumerate(g.class_counts):
            counts[i] += c
    corrected = any(g.corrections is not None for g in kept)
    return replace(
        m,
        shards=list(shards),
        classes=list(classes),
        class_counts=counts if any(g.class_counts for g in kept) else [],
        generations=kept,
        version=CORRECTED_VERSION if corrected else min(m.version, 3),
    )


def fingerprint(m: Manifest) -> str:
    """What a split is as read: its shards (names, sizes, checksums), classes and every corrections file."""
    sha = hashlib.sha256()
    for s in m.shards:
        sha.update(f"{s.name}\0{s.samples}\0{s.bytes}\0{s.sha256}\n".encode())
    sha.update(json.dumps(list(m.classes), ensure_ascii=False).encode())
    for g in m.generations:
        if g.corrections is not None:
            sha.update(f"\n{g.number}:{g.corrections.sha256}".encode())
    return sha.hexdigest()


def corrections_of(m: Manifest, generation: int, data: bytes) -> CorrectionRows:
    """Generation ``generation``'s corrections, given its file's bytes (checked against the manifest's record)."""
    c = generations_of(m)[generation].corrections
    if c is None:
        return CorrectionRows((), ())
    url = storage.join(m.base_url, c.name)
    if len(data) != c.bytes or hashlib.sha256(data).hexdigest() != c.sha256:
        raise ManifestError(
            f"{url}: size or sha256 differs from the manifest (the corrections changed or are damaged); "
            "restore it from the conversion, or convert again"
        )
    return CorrectionRows.from_bytes(data, url)


__all__ = ["corrections_of", "fingerprint", "generations_of", "latest", "pin", "shard_span"]
