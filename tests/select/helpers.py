"""Living splits for the selection tests, written fast: tiny shards of one reused JPEG, per-sample tables with
generated rows, and optionally a second generation whose corrections remove and relabel samples."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from shardkit.format.generations import CorrectionRows, Corrections, Generation, corrections_name
from shardkit.format.manifest import Manifest, ShardInfo, save_manifest
from shardkit.format.tables import KeyTable, sample_row, samples_bytes, table_entry
from shardkit.format.writer import EncodedSample, write_shard
from tests.support.data import jpeg_bytes

CLASSES = ("cat", "dog", "owl")
_JPEG: dict[int, bytes] = {}


@dataclass
class LivingSplit:
    """A split written by :func:`write_living`."""

    url: str
    rows: list[dict[str, Any]]  #: one per stored sample, split order, ``class`` as the newest generation has it
    stored_rows: list[dict[str, Any]]  #: as stored (before relabels)
    removed: set[str] = field(default_factory=set)
    generations: int = 1


def _shards(root: str, split: str, first: int, rows: list[dict[str, Any]], shard_size: int) -> list[ShardInfo]:
    if 0 not in _JPEG:
        _JPEG[0] = jpeg_bytes(0, 0, (16, 12))
    out = []
    for start in range(0, len(rows), shard_size):
        name = f"{split}-{first + len(out):06d}.tar"
        samples = [
            EncodedSample(
                r["key"],
                _JPEG[0],
                CLASSES.index(r["class"]),
                {"class": r["class"], "path": r["path"], "width": r["width"], "height": r["height"], **r["meta"]},
            )
            for r in rows[start : start + shard_size]
        ]
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        out.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
    return out


def _tables(root: str, split: str, gen: int, rows: list[dict[str, Any]], shard_size: int) -> dict[str, Any]:
    keys = [[r["key"] for r in rows[i : i + shard_size]] for i in range(0, len(rows), shard_size)]
    kb = KeyTable.build(keys, gen).to_bytes()
    table = [
        sample_row(
            r["key"], {"class": r["class"], "path": r["path"], "width": r["width"], "height": r["height"], **r["meta"]}
        )
        for r in rows
    ]
    sb = samples_bytes(split, table, gen)
    entry = table_entry(split, kb, sb, gen)
    for part, data in (("keys", kb), ("samples", sb)):
        with open(os.path.join(root, entry[part]["name"]), "wb") as f:
            f.write(data)
    return entry


def make_rows(n: int, start: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows: classes, paths, sizes and meta fields (some missing) vary with the index."""
    rows = []
    for i in range(start, start + n):
        meta: dict[str, Any] = {}
        if i % 3:
            meta["score"] = (i * 7 + seed) % 10
        if i % 4 == 1:
            meta["source"] = ["web", "cam"][(i + seed) % 2]
        c = CLASSES[(i * 5 + seed) % 3]
        rows.append(
            {
                "key": f"k{i:04d}",
                "class": c,
                "path": f"{c}/img{i}.jpg",
                "width": 8 + (i * 3 + seed) % 9,
                "height": 10,
                "meta": meta,
            }
        )
    return rows


def write_living(
    root: str,
    n0: int,
    *,
    n1: int = 0,
    shard_size: int = 4,
    removed: tuple[int, ...] = (),
    relabeled: tuple[tuple[int, str], ...] = (),
    seed: int = 0,
    split: str = "train",
    index: bool = False,
) -> LivingSplit:
    """A split of ``n0`` samples, plus a generation 1 of ``n1`` samples whose corrections remove the samples at
    the global indexes ``removed`` and relabel ``relabeled`` (only when ``n1`` or corrections are given); ``index``:
    with the shards' sample indexes (what random access reads)."""
    os.makedirs(root, exist_ok=True)
    rows0 = make_rows(n0, 0, seed)
    shards = _shards(root, split, 0, rows0, shard_size)
    t0 = _tables(root, split, 0, rows0, shard_size)
    rows = [dict(r) for r in rows0]
    counts0 = [sum(r["class"] == c for r in rows0) for c in CLASSES]
    m = Manifest(
        split=split, classes=list(CLASSES), shards=shards, class_counts=counts0, tables=t0, shardkit_version="test"
    )
    gens = 1
    gone: set[str] = set()
    if n1 or removed or relabeled:
        rows1 = make_rows(n1, n0, seed)
        shards1 = _shards(root, split, len(shards), rows1, shard_size)
        t1 = _tables(root, split, 1, rows1, shard_size)
        rows += [dict(r) for r in rows1]
        gone = {rows[i]["key"] for i in removed}
        corr = None
        if removed or relabeled:
            fix = CorrectionRows(
                tuple(sorted(gone)), tuple((rows[i]["key"], c) for i, c in relabeled if rows[i]["key"] not in gone)
            )
            data = fix.to_bytes(split, 1)
            name = corrections_name(split, 1)
            with open(os.path.join(root, name), "wb") as f:
                f.write(data)
            import hashlib

            corr = Corrections(name, len(data), hashlib.sha256(data).hexdigest(), len(fix.removed), len(fix.relabeled))
            for k, c in fix.relabeled:
                next(r for r in rows if r["key"] == k)["class"] = c
        counts1 = [sum(r["class"] == c for r in rows1) for c in CLASSES]
        m.shards = shards + shards1
        m.class_counts = [a + b for a, b in zip(counts0, counts1)]
        m.generations = [
            Generation(0, len(shards), n0, 3, counts0, tables=t0),
            Generation(1, len(shards1), n1, 3, counts1, tables=t1, corrections=corr),
        ]
        gens = 2
    save_manifest(m, root)
    if index:
        from tests.support.data import add_index

        add_index(root)
    return LivingSplit(root, rows, [*rows0, *(make_rows(n1, n0, seed) if gens == 2 else [])], gone, gens)
