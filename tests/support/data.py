"""Data builders: tiny datasets written with shardkit's own writer, hand-built (foreign, hostile) shards,
and plain readers of what a conversion wrote."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from shardkit.demo.sampledata import make_image
from shardkit.format import EncodedSample, write_shard
from shardkit.format.manifest import Manifest, ShardInfo, save_manifest
from tests.support.source_reference import colour, write_image


def image_bytes(img: "Image.Image | np.ndarray", fmt: str = "JPEG", **save_kw: Any) -> bytes:
    """``img`` (a PIL image or an ``H x W x 3`` uint8 array) encoded as ``fmt`` with PIL's ``save_kw``."""
    buf = io.BytesIO()
    (img if isinstance(img, Image.Image) else Image.fromarray(img)).save(buf, format=fmt, **save_kw)
    return buf.getvalue()


def jpeg_bytes(label: int, seed: int = 0, size: tuple[int, int] = (64, 48), quality: int = 90, **save_kw) -> bytes:
    """A small photo-like JPEG of class ``label``."""
    return image_bytes(make_image(label, seed, size), quality=quality, **save_kw)


@dataclass
class TinyDataset:
    """A dataset written by :func:`write_dataset`."""

    url: str  # split directory holding manifest.json
    keys: list[str]  # every key, in write order
    labels: dict[str, int]  # key -> label
    manifest: Manifest


def write_dataset(
    root: str,
    *,
    num_samples: int = 60,
    shard_size: int = 7,
    num_classes: int = 3,
    size: tuple[int, int] = (64, 48),
    split: str = "train",
    distinct_images: int = 8,
) -> TinyDataset:
    """Write ``num_samples`` samples into shards of ``shard_size`` plus a manifest under ``root``.

    Key ``k{i:06d}`` has label ``i % num_classes``. Only ``distinct_images``
    different JPEGs are encoded (per class) and reused, to keep fixtures fast.
    """
    os.makedirs(root, exist_ok=True)
    cache = {(c, j): jpeg_bytes(c, j, size) for c in range(num_classes) for j in range(distinct_images)}
    keys: list[str] = []
    labels: dict[str, int] = {}
    shards: list[ShardInfo] = []
    class_counts = [0] * num_classes
    for start in range(0, num_samples, shard_size):
        samples = []
        for i in range(start, min(num_samples, start + shard_size)):
            key, label = f"k{i:06d}", i % num_classes
            meta = {"path": f"c{label}/img{i}.jpg", "class": f"c{label}", "width": size[0], "height": size[1]}
            samples.append(EncodedSample(key, cache[(label, i % distinct_images)], label, meta))
            keys.append(key)
            labels[key] = label
            class_counts[label] += 1
        name = f"{split}-{len(shards):06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            n, nbytes, sha = write_shard(samples, f)
        shards.append(ShardInfo(name=name, samples=n, bytes=nbytes, sha256=sha))
    m = Manifest(
        split=split,
        classes=[f"c{i}" for i in range(num_classes)],
        shards=shards,
        options={"source": "tests.support.data.write_dataset"},
        class_counts=class_counts,
        shardkit_version="test",
    )
    save_manifest(m, root)
    m.url = os.path.join(root, "manifest.json")
    return TinyDataset(url=root, keys=keys, labels=labels, manifest=m)


#: one source item: (class name, relative file name inside the class folder, colour id)
Item = tuple[str, str, int]


def write_source(root: str, items: Sequence[Item]) -> str:
    """Class folders under ``root`` with one solid image per item (equal colour ids give equal bytes); ``root``."""
    for cls, name, i in items:
        write_image(os.path.join(root, cls, name), i)
    return root


def tar_bytes(members: list, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of ``members``: ``(name, data)`` pairs for regular files, or ``(TarInfo, data_or_None)``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            if isinstance(name, tarfile.TarInfo):
                ti = name
                if data is not None:
                    ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data) if data is not None else None)
            else:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class RecordingFile(io.BytesIO):
    """An in-memory file that records the byte range ``[start, stop)`` of every read."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, n=-1):
        start = self.tell()
        b = super().read(n)
        if b:
            self.reads.append((start, start + len(b)))
        return b

    def touched(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The recorded reads that overlap ``[start, stop)``."""
        return [(a, b) for a, b in self.reads if a < stop and start < b]


def member_ranges(data: bytes) -> dict[str, tuple[int, int]]:
    """member name -> byte range ``[start, stop)`` of its data in the tar ``data``."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: (m.offset_data, m.offset_data + m.size) for m in tf.getmembers() if m.isfile()}


def write_raw_dataset(
    root: str,
    shards: list[tuple[bytes, int]],
    classes: list[str],
    split: str = "train",
    *,
    fields: "list[str] | None" = None,
    targets: "list[str] | None" = None,
) -> str:
    """Write already built shard bytes (with their sample counts) and a valid manifest under ``root``.

    ``fields``/``targets``: the manifest's stored fields (version 3, e.g. ``["image", "labels", "text"]``) and
    target names; default: ``["image", "label"]``, no targets."""
    os.makedirs(root, exist_ok=True)
    infos = []
    for i, (data, samples) in enumerate(shards):
        name = f"{split}-{i:06d}.tar"
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        infos.append(ShardInfo(name, samples, len(data), hashlib.sha256(data).hexdigest()))
    extra = {} if fields is None else {"fields": list(fields)}
    save_manifest(Manifest(split, classes, infos, targets=list(targets or []), **extra), root)
    return root


def shard_bytes(samples: "list[EncodedSample]") -> tuple[bytes, int]:
    """``samples`` as the bytes of one shard, and its sample count (what :func:`write_raw_dataset` takes)."""
    buf = io.BytesIO()
    count, _, _ = write_shard(samples, buf)
    return buf.getvalue(), count


def write_samples(
    root: str,
    shards: "list[list[EncodedSample]]",
    classes: list[str],
    split: str = "train",
    *,
    fields: "list[str] | None" = None,
) -> str:
    """Each list of ``shards`` as one shard, and a valid manifest (:func:`write_raw_dataset`), under ``root``."""
    return write_raw_dataset(root, [shard_bytes(s) for s in shards], classes, split, fields=fields)


def manifest_json(**over: object) -> str:
    """A version-1 manifest's JSON text (split train, class a, one shard of one sample), ``over`` replacing keys."""
    d: dict[str, object] = {
        "format": "shardkit-manifest",
        "version": 1,
        "split": "train",
        "classes": ["a"],
        "shards": [{"name": "train-000000.tar", "samples": 1, "bytes": 10, "sha256": "0" * 64}],
    }
    d.update(over)
    return json.dumps(d)


def tree_digests(root: str) -> dict[str, str]:
    """relative path -> sha256 of every file below ``root`` (byte-identical output checks)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def tree_snapshot(root: str) -> dict[str, int]:
    """relative path -> size of everything below ``root`` (links not followed)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            out[os.path.relpath(p, root)] = os.lstat(p).st_size if name in files else -1
    return out


def split_samples(split_dir: str) -> dict[str, dict]:
    """``{key: {"cls": int, "json": dict, "jpg": bytes}}`` of every sample of the converted split at ``split_dir``."""
    import json

    from shardkit.format.manifest import load_manifest

    m = load_manifest(split_dir)
    out: dict[str, dict] = {}
    for i in range(len(m.shards)):
        with tarfile.open(m.shard_url(i)) as tf:
            for mem in tf.getmembers():
                key, ext = mem.name.split(".", 1)
                assert ext not in out.setdefault(key, {}), f"{key}.{ext} twice"
                out[key][ext] = tf.extractfile(mem).read()  # type: ignore[union-attr]
    for g in out.values():
        g["json"] = json.loads(g["json"])
        g["cls"] = int(g["cls"])
    return out


def add_index(root: str, damage=None, shard: int = 1) -> None:
    """Sidecar indexes for every shard (as ``shardkit convert`` writes them); ``damage`` rewrites ``shard``'s
    index so that it still passes every load-time check (layout, unique keys, CRC recomputed, the shard's size
    and sha256) but is wrong for the tar headers."""
    from dataclasses import replace

    from shardkit.format.index import INDEX_FORMAT, index_url
    from shardkit.format.indexio import index_from_walk, load_index
    from shardkit.format.manifest import load_manifest

    m = load_manifest(root)
    for s, info in enumerate(m.shards):
        url = m.shard_url(s)
        with open(url, "rb") as f:
            idx = index_from_walk(f, url, info.bytes, info.sha256)
        assert idx is not None
        if damage is not None and s == shard:
            idx = damage(idx)
        with open(index_url(url), "wb") as f:
            f.write(idx.to_bytes())
        load_index(url, shard_bytes=info.bytes, shard_sha256=info.sha256)  # passes its load-time checks
    save_manifest(replace(m, sample_index=INDEX_FORMAT), root)


def write_tar_file(path: str, members: list) -> str:
    """Write :func:`tar_bytes` of ``members`` to ``path``; returns ``path``."""
    with open(path, "wb") as f:
        f.write(tar_bytes(members))
    return path


# ------------------------------------------------------------------ keyed datasets of every stored field (fields=)

FIELDS_N = 40
FIELDS_C = 5
FIELDS_TARGETS = ["a", "b", "c"]


def label_of(i: int) -> int:
    return i % 3


def labels_of(i: int) -> list[int]:
    return [c for c in range(FIELDS_C) if (i >> c) & 1]  # the empty set too


def target_of(i: int) -> list[float]:
    return [i * 0.5, -float(i), i * i / 7]


def text_of(i: int) -> str:
    return f"caption {i} \u00e9\u4e2d" * (i % 3)  # "" for every third sample


def meta_of(i: int) -> dict:
    return {"i": i}


def solid_colour(i: int, size: tuple[int, int] = (40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour(i % 64)).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _cut_photo(i: int) -> bytes:
    photo = jpeg_bytes(1, i, (96, 72))
    return photo[: len(photo) * 2 // 3]  # the header reads, the scan is cut short: decoding fails


def members(i: int, bad: dict[int, str] = {}) -> list[tuple[str, bytes]]:  # noqa: B006 - read only
    """Every field member of sample ``i`` (a bad one where ``bad[i]`` names its field)."""
    k = f"k{i:06d}"
    b = bad.get(i)
    return [
        (f"{k}.jpg", _cut_photo(i) if b == "pixels" else solid_colour(i)),
        (f"{k}.cls", b"x" if b == "label" else str(label_of(i)).encode()),
        (f"{k}.labels.json", b"[1, 1]" if b == "labels" else json.dumps(labels_of(i)).encode()),
        (f"{k}.target.json", b"[1.0]" if b == "target" else json.dumps(target_of(i)).encode()),
        (f"{k}.txt", b"\xff\xfe" if b == "text" else text_of(i).encode()),
        (f"{k}.json", json.dumps(meta_of(i)).encode()),
    ]


def write_fields_dataset(
    root: str,
    fields: list[str],
    *,
    n: int = FIELDS_N,
    shard_size: int = 7,
    bad: dict[int, str] = {},  # noqa: B006 - read only
    classes: list[str] | None = None,
    targets: list[str] | None = None,
    first: int = 0,
) -> str:
    """A keyed dataset from raw tar bytes: samples ``k{i:06d}`` for ``i`` in ``first .. first + n - 1``, each with
    every member (``.jpg`` of :func:`solid_colour` ``i``, ``.cls``, ``.labels.json``, ``.target.json``, ``.txt``,
    ``.json``: :func:`label_of` ... :func:`meta_of` ``i``; a bad one where ``bad[i]`` names its field), in a
    dataset whose manifest declares ``fields``."""
    shards = []
    for start in range(first, first + n, shard_size):
        ids = range(start, min(first + n, start + shard_size))
        shards.append((tar_bytes([m for i in ids for m in members(i, bad)]), len(ids)))
    if classes is None:
        classes = [f"c{c}" for c in range(FIELDS_C if "labels" in fields else 3 if "label" in fields else 0)]
    if targets is None:
        targets = FIELDS_TARGETS if "target" in fields else []
    return write_raw_dataset(root, shards, classes, fields=fields, targets=targets)


#: the class names of :func:`hf_fields_dataset`'s ``tags``
HF_NAMES = ["a", "b", "c"]


def hf_fields_dataset(rows: list[tuple]) -> Any:
    """A Hugging Face dataset of one row per ``(i, tags, y, z, caption)``: image :func:`solid_colour` ``i`` (12 x 10),
    ``tags`` class indexes of :data:`HF_NAMES`, numbers ``y`` and ``z``, text ``caption`` and ``note`` (``n<i>``)."""
    import datasets

    feats = datasets.Features(
        {
            "image": datasets.Image(),
            "tags": datasets.Sequence(datasets.ClassLabel(names=HF_NAMES)),
            "y": datasets.Value("float64"),
            "z": datasets.Value("int64"),
            "caption": datasets.Value("string"),
            "note": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "image": [{"bytes": solid_colour(i, (12, 10)), "path": None} for i, *_ in rows],
            "tags": [r[1] for r in rows],
            "y": [r[2] for r in rows],
            "z": [r[3] for r in rows],
            "caption": [r[4] for r in rows],
            "note": [f"n{r[0]}" for r in rows],
        },
        features=feats,
    )
