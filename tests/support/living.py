"""Living splits for tests: splits that grow by generations, whose corrections remove and relabel samples, and
selections of them, written by small independent writers of the format (:mod:`shardkit.format.generations`,
:mod:`shardkit.format.tables`, :mod:`shardkit.format.snapshot.selection`) with the truth kept beside them.

Two builders:

- :func:`convert_split`, then :func:`append`, :func:`correct` and :func:`select`: a split converted by
  ``shardkit convert`` whose every image is a solid colour that encodes its id
  (:func:`tests.support.source_reference.colour`, ids below 64), so a delivered pixel says which sample it is.
  :class:`Living` records, per generation, every key's id and its label as read at that generation (after the
  corrections up to it), and the keys removed by then.
- :func:`write_living`: a split written fast (tiny shards of one reused JPEG) with per-sample tables of generated
  rows (:func:`make_rows`), and optionally a second generation whose corrections remove and relabel samples.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardkit.convert import ConvertConfig, convert
from shardkit.format import EncodedSample, write_shard
from shardkit.format.generations import CorrectionRows, Corrections, Generation, corrections_name
from shardkit.format.index import index_url
from shardkit.format.indexio import index_from_walk
from shardkit.format.manifest import Manifest, ShardInfo, load_manifest, save_manifest
from shardkit.format.snapshot.pin import generations_of, pin
from shardkit.format.snapshot.selection import write_selection
from shardkit.format.tablebuild import write_tables
from shardkit.format.tables import sample_row
from tests.support.data import add_index, jpeg_bytes, solid_colour, split_samples
from tests.support.living_reader import stored
from tests.support.source_reference import write_image

SIZE = (12, 10)  #: stored image size (width, height) of :func:`convert_split` and :func:`append`
CLASSES = ("cat", "dog", "owl")  #: the classes of :func:`write_living`'s splits


def _write_shard(root: str, name: str, samples: Sequence[EncodedSample]) -> ShardInfo:
    """Write ``samples`` as the shard ``root``/``name``; its manifest record."""
    with open(os.path.join(root, name), "wb") as f:
        n, nbytes, sha = write_shard(samples, f)
    return ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha)


def _write_corrections(root: str, split: str, generation: int, rows: CorrectionRows) -> Corrections:
    """Write generation ``generation``'s corrections file of ``rows`` into ``root``; its manifest record."""
    data = rows.to_bytes(split, generation)
    name = corrections_name(split, generation)
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)
    return Corrections(name, len(data), hashlib.sha256(data).hexdigest(), len(rows.removed), len(rows.relabeled))


# ------------------------------------------------------------------ a converted split, appended to and corrected


@dataclass
class Living:
    """A split and what each of its generations holds.

    Attributes:
        url: the split folder.
        classes: class names.
        ids: key -> colour id (every key ever written).
        generations: per generation, ``{key: label}`` of the samples in (removed keys left out, relabels applied).
        order: keys in stored (split) order, every generation's shards one after another.
    """

    url: str
    classes: list[str]
    ids: dict[str, int] = field(default_factory=dict)
    generations: list[dict[str, int]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    @property
    def latest(self) -> dict[str, int]:
        """The newest generation's ``{key: label}``."""
        return self.generations[-1]


def convert_split(root: str, n: int, *, shard_size: int = 6, classes: int = 3) -> Living:
    """Convert ``n`` solid images (id ``i``: class ``i % classes``) with ``shardkit convert`` into ``root``/ds/train."""
    src, dest = os.path.join(root, "src"), os.path.join(root, "ds")
    for i in range(n):
        write_image(os.path.join(src, f"c{i % classes}", f"img{i:03d}.jpg"), i, SIZE)
    convert(src, dest, ConvertConfig(shard_size=shard_size), workers=1, quiet=True)
    url = os.path.join(dest, "train")
    samples = split_samples(url)
    m = load_manifest(url)
    living = Living(url, list(m.classes))
    labels: dict[str, int] = {}
    for key, s in samples.items():
        living.ids[key] = int(s["json"]["path"].rsplit("img", 1)[1][:3])
        labels[key] = s["cls"]
    living.generations.append(labels)
    living.order = [s["key"] for s in stored(url)]
    return living


def _records(m: Manifest) -> list[Generation]:
    return generations_of(m) if m.generations else [replace(generations_of(m)[0], tables=dict(m.tables))]


def append(living: Living, ids: "list[int]", *, shard_size: int = 5) -> int:
    """Append shards of the samples ``ids`` (keys ``a<id>``, class ``id % classes``) as a new generation, with its
    sample indexes and key table; returns the generation's number."""
    m = load_manifest(living.url)
    gens = _records(m)
    number = len(gens)
    k = len(living.classes)
    infos, rows = [], []
    counts = [0] * k
    for start in range(0, len(ids), shard_size):
        part = ids[start : start + shard_size]
        samples, shard_rows = [], []
        for i in part:
            key, label = f"a{i:06d}", i % k
            meta = {
                "path": f"c{label}/new{i:03d}.jpg",
                "class": living.classes[label],
                "width": SIZE[0],
                "height": SIZE[1],
            }
            samples.append(EncodedSample(key, solid_colour(i, SIZE), label, meta))
            shard_rows.append(sample_row(key, meta))
            living.ids[key] = i
            living.order.append(key)
            counts[label] += 1
        info = _write_shard(living.url, f"train-g{number:02d}-{len(infos):06d}.tar", samples)
        path = os.path.join(living.url, info.name)
        with open(path, "rb") as f:
            idx = index_from_walk(f, path, info.bytes, info.sha256)
        assert idx is not None
        with open(index_url(path), "wb") as f:
            f.write(idx.to_bytes())
        infos.append(info)
        rows.append(shard_rows)
    tables = write_tables(living.url, m.split, rows, number)
    gens.append(Generation(number, len(infos), len(ids), k, counts, tables=tables))
    total = [a + b for a, b in zip(m.class_counts, counts)] if m.class_counts else []
    save_manifest(replace(m, shards=[*m.shards, *infos], generations=gens, class_counts=total), living.url)
    living.generations.append({**living.latest, **{f"a{i:06d}": i % k for i in ids}})
    return number


def correct(living: Living, removed: "list[str]", relabeled: "dict[str, int]") -> int:
    """A new generation (no shards) whose corrections file removes ``removed`` and relabels ``relabeled``
    (key -> class index); returns its number."""
    m = load_manifest(living.url)
    gens = _records(m)
    number = len(gens)
    rows = CorrectionRows(tuple(removed), tuple((key, living.classes[c]) for key, c in relabeled.items()))
    record = _write_corrections(living.url, m.split, number, rows)
    tables = write_tables(living.url, m.split, [], number)
    gens.append(
        Generation(number, 0, 0, len(living.classes), [0] * len(living.classes), tables=tables, corrections=record)
    )
    save_manifest(replace(m, generations=gens), living.url)
    now = {k: v for k, v in living.latest.items() if k not in set(removed)}
    now.update({k: c for k, c in relabeled.items() if k in now})
    living.generations.append(now)
    return number


def select(living: Living, keys: "set[str]", out: str, *, generation: "int | None" = None) -> str:
    """Write the selection of ``keys`` (of the stored samples as of ``generation``, default the newest) to ``out``."""
    gen = len(living.generations) - 1 if generation is None else generation
    stored_keys = [k for k in living.order if k in living.ids][: pin(load_manifest(living.url), gen).num_samples]
    write_selection(living.url, np.array([k in keys for k in stored_keys], bool), out, generation=gen)
    return out


# ------------------------------------------------------------------ a split of generated rows, written fast

_ROW_JPEG: dict[int, bytes] = {}


@dataclass
class LivingSplit:
    """A split written by :func:`write_living`."""

    url: str
    rows: list[dict[str, Any]]  #: one per stored sample, split order, ``class`` as the newest generation has it
    stored_rows: list[dict[str, Any]]  #: as stored (before relabels)
    removed: set[str] = field(default_factory=set)
    generations: int = 1


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


def _row_meta(r: dict[str, Any]) -> dict[str, Any]:
    return {"class": r["class"], "path": r["path"], "width": r["width"], "height": r["height"], **r["meta"]}


def _row_generation(
    root: str, split: str, gen: int, first: int, rows: list[dict[str, Any]], shard_size: int
) -> tuple[list[ShardInfo], dict[str, Any]]:
    """Shards (numbered from ``first``) and tables of generation ``gen``'s ``rows``."""
    if 0 not in _ROW_JPEG:
        _ROW_JPEG[0] = jpeg_bytes(0, 0, (16, 12))
    parts = [rows[i : i + shard_size] for i in range(0, len(rows), shard_size)]
    shards = [
        _write_shard(
            root,
            f"{split}-{first + j:06d}.tar",
            [EncodedSample(r["key"], _ROW_JPEG[0], CLASSES.index(r["class"]), _row_meta(r)) for r in part],
        )
        for j, part in enumerate(parts)
    ]
    tables = write_tables(root, split, [[sample_row(r["key"], _row_meta(r)) for r in part] for part in parts], gen)
    return shards, tables


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
    shards, t0 = _row_generation(root, split, 0, 0, rows0, shard_size)
    rows = [dict(r) for r in rows0]
    counts0 = [sum(r["class"] == c for r in rows0) for c in CLASSES]
    m = Manifest(
        split=split, classes=list(CLASSES), shards=shards, class_counts=counts0, tables=t0, shardkit_version="test"
    )
    gens = 1
    gone: set[str] = set()
    if n1 or removed or relabeled:
        rows1 = make_rows(n1, n0, seed)
        shards1, t1 = _row_generation(root, split, 1, len(shards), rows1, shard_size)
        rows += [dict(r) for r in rows1]
        gone = {rows[i]["key"] for i in removed}
        corr = None
        if removed or relabeled:
            fix = CorrectionRows(
                tuple(sorted(gone)), tuple((rows[i]["key"], c) for i, c in relabeled if rows[i]["key"] not in gone)
            )
            corr = _write_corrections(root, split, 1, fix)
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
        add_index(root)
    return LivingSplit(root, rows, [*rows0, *(make_rows(n1, n0, seed) if gens == 2 else [])], gone, gens)
