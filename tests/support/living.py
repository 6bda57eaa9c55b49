"""Living splits for the readers' tests: a split converted by ``shardkit convert``, then appended to, corrected and
selected from by small independent writers of the format (:mod:`shardkit.format.generations`,
:mod:`shardkit.format.tables`, :mod:`shardkit.format.selection`), with the truth kept beside them.

Every image is a solid colour that encodes its id (:func:`tests.support.source_reference.colour`, ids below 64),
so a delivered pixel says which sample it is. :class:`Living` records, per generation, every key's id and its
label as read at that generation (after the corrections up to it), and the keys removed by then.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field, replace

import numpy as np
from PIL import Image

from shardkit.convert import ConvertConfig, convert
from shardkit.format import EncodedSample, write_shard
from shardkit.format.generations import CorrectionRows, Corrections, Generation, corrections_name
from shardkit.format.index import index_url
from shardkit.format.indexio import index_from_walk
from shardkit.format.manifest import ShardInfo, load_manifest, save_manifest
from shardkit.format.pin import generations_of
from shardkit.format.selection import write_selection
from shardkit.format.tablebuild import write_tables
from shardkit.format.tables import sample_row
from tests.support.data import split_samples
from tests.support.source_reference import colour, write_image

SIZE = (12, 10)  #: stored image size (width, height)


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
    living.order = _stored_order(url)
    return living


def _stored_order(url: str) -> list[str]:
    import tarfile

    m = load_manifest(url)
    out: list[str] = []
    for i in range(len(m.shards)):
        with tarfile.open(m.shard_url(i)) as tf:
            for mem in tf.getmembers():
                key = mem.name.split(".", 1)[0]
                if not out or out[-1] != key:
                    out.append(key)
    return out


def _jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", SIZE, colour(i)).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _records(m) -> list[Generation]:  # noqa: ANN001 - a Manifest
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
            samples.append(EncodedSample(key, _jpeg(i), label, meta))
            shard_rows.append(sample_row(key, meta))
            living.ids[key] = i
            living.order.append(key)
            counts[label] += 1
        name = f"train-g{number:02d}-{len(infos):06d}.tar"
        path = os.path.join(living.url, name)
        with open(path, "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        with open(path, "rb") as f:
            idx = index_from_walk(f, path, nbytes, sha)
        assert idx is not None
        with open(index_url(path), "wb") as f:
            f.write(idx.to_bytes())
        infos.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
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
    data = rows.to_bytes(m.split, number)
    name = corrections_name(m.split, number)
    with open(os.path.join(living.url, name), "wb") as f:
        f.write(data)
    tables = write_tables(living.url, m.split, [], number)
    record = Corrections(name, len(data), hashlib.sha256(data).hexdigest(), len(removed), len(relabeled))
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
    stored = [k for k in living.order if k in living.ids][: _stored_count(living.url, gen)]
    write_selection(living.url, np.array([k in keys for k in stored], bool), out, generation=gen)
    return out


def _stored_count(url: str, generation: int) -> int:
    from shardkit.format.pin import pin

    return pin(load_manifest(url), generation).num_samples
