"""``shardkit info`` and ``shardkit verify`` as library calls.

Both take a split folder (holding ``manifest.json``) or a dataset root whose
sub-folders are splits, local or any fsspec URL. :func:`info` reads manifests
only; :func:`verify` reads every shard: presence, size and sha256 against the
manifest and, unless ``quick``, the tar structure, every sample's members,
label, class name, key uniqueness and that every JPEG decodes.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any, Iterator

from . import storage
from .errors import ManifestError, ShardkitError
from .manifest import MANIFEST_NAME, Manifest, load_manifest
from .shardformat import IMAGE_EXT, LABEL_EXT, META_EXT


def load_manifests(url: str, **storage_options: Any) -> list[Manifest]:
    """The manifest at ``url``, or those of its split sub-folders (sorted); :class:`ManifestError` if none."""
    if storage.exists(storage.join(url, MANIFEST_NAME), **storage_options) or url.rstrip("/").endswith(".json"):
        return [load_manifest(url, **storage_options)]
    from .storage import list_dir

    dirs, _ = list_dir(url, **storage_options)
    found = [storage.join(url, d) for d in dirs if storage.exists(storage.join(url, d, MANIFEST_NAME), **storage_options)]
    if not found:
        raise ManifestError(f"{url}: no {MANIFEST_NAME} here or in its sub-folders; is this a dataset written by 'shardkit convert'?")
    return [load_manifest(u, **storage_options) for u in found]


@dataclass
class SplitInfo:
    """Summary of one split, from its manifest."""

    split: str
    url: str
    classes: list[str]
    class_counts: list[int]
    shards: int
    samples: int
    bytes: int
    skipped: dict[str, int]
    options: dict[str, Any]

    @property
    def mean_sample_bytes(self) -> float:
        """Mean shard bytes per sample (image, label, metadata and tar headers)."""
        return self.bytes / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``shardkit info --json``)."""
        return {
            "split": self.split, "url": self.url, "shards": self.shards, "samples": self.samples, "bytes": self.bytes,
            "mean_sample_bytes": round(self.mean_sample_bytes, 1),
            "classes": {c: n for c, n in zip(self.classes, self.class_counts)} if self.class_counts else {c: None for c in self.classes},
            "skipped": self.skipped, "options": self.options,
        }


def info(url: str, **storage_options: Any) -> list[SplitInfo]:
    """Per-split summaries of the dataset at ``url`` (manifests only, no shard is read)."""
    out = []
    for m in load_manifests(url, **storage_options):
        out.append(SplitInfo(
            split=m.split, url=m.base_url, classes=m.classes, class_counts=m.class_counts, shards=len(m.shards),
            samples=m.num_samples, bytes=m.num_bytes, skipped=dict(Counter(s.reason for s in m.skipped)), options=m.options,
        ))
    return out


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: where (split, shard, key) and what."""

    split: str
    shard: str
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.split}/{self.shard}" + (f" key {self.key}" if self.key else "")
        return f"{where}: {self.message}"


@dataclass
class VerifyReport:
    """Result of :func:`verify`."""

    splits: int = 0
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


class _HashingReader:
    def __init__(self, f: IO[bytes]):
        self.f, self.sha, self.n = f, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        self.sha.update(b)
        self.n += len(b)
        return b

    def drain(self) -> None:
        while self.read(8 << 20):
            pass


def iter_samples(f: IO[bytes]) -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {extension: bytes})`` for each sample of a shard read sequentially from ``f``."""
    key, group = None, {}
    with tarfile.open(fileobj=f, mode="r|") as tf:  # type: ignore[call-overload]
        for m in tf:
            if not m.isfile():
                continue
            k, _, ext = m.name.partition(".")
            if k != key and key is not None:
                yield key, group
                group = {}
            key = k
            group[ext] = tf.extractfile(m).read()
    if key is not None:
        yield key, group


def _check_sample(key: str, g: dict[str, bytes], m: Manifest, add) -> int | None:
    from PIL import Image, UnidentifiedImageError

    missing = [e for e in (LABEL_EXT, IMAGE_EXT, META_EXT) if e not in g]
    if missing:
        add(key, f"missing member(s) {', '.join('.' + e for e in missing)}")
        return None
    try:
        label = int(g[LABEL_EXT])
    except ValueError:
        add(key, f"label {g[LABEL_EXT][:20]!r} is not an integer")
        return None
    if not 0 <= label < len(m.classes):
        add(key, f"label {label} is outside the {len(m.classes)} classes")
        return None
    try:
        meta = json.loads(g[META_EXT])
        if meta.get("class") != m.classes[label]:
            add(key, f"metadata class {meta.get('class')!r} does not match label {label} ({m.classes[label]!r})")
    except (ValueError, AttributeError) as exc:
        add(key, f"metadata is not a JSON object ({exc})")
    try:
        with Image.open(io.BytesIO(g[IMAGE_EXT])) as im:
            im.load()
            if im.format != "JPEG":
                add(key, f"image is {im.format}, not JPEG")
    except UnidentifiedImageError:
        add(key, "image does not decode (not a recognised image format)")
    except Exception as exc:  # noqa: BLE001 - any decoder error is a finding, not a crash
        add(key, f"image does not decode ({type(exc).__name__}: {exc})")
    return label


def _verify_shard(m: Manifest, index: int, quick: bool, keys: set[str], counts: list[int], report: VerifyReport, **so: Any) -> None:
    from .storage import size_of

    s = m.shards[index]
    url = m.shard_url(index)

    def add(key: str, msg: str) -> None:
        report.problems.append(Problem(m.split, s.name, key, msg))

    size = size_of(url, **so)
    if size is None:
        return add("", "shard is missing")
    if size != s.bytes:
        add("", f"size is {size} bytes, manifest says {s.bytes}")
    with storage.open_read(url, **so) as f:
        r = _HashingReader(f)
        if not quick:
            n = 0
            try:
                for key, g in iter_samples(r):  # type: ignore[arg-type]
                    n += 1
                    if key in keys:
                        add(key, "key appears more than once in the split")
                    keys.add(key)
                    label = _check_sample(key, g, m, add)
                    if label is not None:
                        counts[label] += 1
            except (tarfile.TarError, OSError, EOFError) as exc:
                add("", f"not a readable tar after {n} samples ({exc})")
            if n != s.samples:
                add("", f"holds {n} samples, manifest says {s.samples}")
            report.samples += n
        r.drain()
    if r.sha.hexdigest() != s.sha256:
        add("", "sha256 does not match the manifest (the shard changed or is damaged)")
    report.bytes += r.n


def verify(url: str, *, quick: bool = False, quiet: bool = True, **storage_options: Any) -> VerifyReport:
    """Check every shard of the dataset at ``url`` against its manifest.

    Args:
        url: split folder or dataset root, local or fsspec URL.
        quick: sizes and sha256 only (no decoding).
        quiet: no progress bar.
        storage_options: fsspec options.

    Returns:
        a report whose ``problems`` name the split, shard and key of each problem.
    """
    from tqdm.auto import tqdm

    manifests = load_manifests(url, **storage_options)
    report = VerifyReport(splits=len(manifests))
    total = sum(m.num_bytes for m in manifests)
    with tqdm(total=total, unit="B", unit_scale=True, desc="verify", disable=quiet, dynamic_ncols=True) as bar:
        for m in manifests:
            keys: set[str] = set()
            counts = [0] * len(m.classes)
            for i, s in enumerate(m.shards):
                try:
                    _verify_shard(m, i, quick, keys, counts, report, **storage_options)
                except ShardkitError as exc:
                    report.problems.append(Problem(m.split, s.name, "", str(exc)))
                report.shards += 1
                bar.update(s.bytes)
            if not quick and m.class_counts and counts != m.class_counts:
                report.problems.append(Problem(m.split, MANIFEST_NAME, "", f"class counts in the shards {counts} differ from the manifest {m.class_counts}"))
    return report
