"""``shardkit info`` and ``shardkit verify`` as library calls.

Both take a split folder (holding ``manifest.json``) or a dataset root whose
sub-folders are splits, local or any fsspec URL. :func:`info` reads manifests
only; :func:`verify` reads every shard: presence, size and sha256 against the
manifest and, unless ``quick``, every sample as the loader reads it (the same
header walk and member rule, :mod:`shardkit.format`), plus what only a full
check can see: the ``.json`` member and its class name, key uniqueness across
the split, per-class counts, that every JPEG decodes, and that each shard's
sample index matches its tar. A split folder with shards or a conversion
journal but no manifest is an incomplete conversion, and a problem.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any, Optional

import numpy as np

from shardkit.errors import ShardkitError
from shardkit.format.fields import DEFAULT_FIELDS, IGNORE, INSTANCES_EXT, MASK_EXT, SampleRule
from shardkit.format.index import READABLE_INDEX_FORMATS, IndexDamage, build_index, index_url, load_index
from shardkit.format.manifest import MANIFEST_NAME, Manifest
from shardkit.format.masks import decode_instances, decode_mask
from shardkit.format.members import IMAGE_EXT, LABEL_EXT, MAX_PIXELS, META_EXT, parse_meta
from shardkit.format.sample import RawSample
from shardkit.format.splits import Found, Incomplete, find_splits, load_manifests
from shardkit.format.tar import SampleSpan, ShardReader, TarDamage
from shardkit.storage import fs as storage


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
    sample_index: str = ""
    fields: list[str] = field(default_factory=lambda: list(DEFAULT_FIELDS))
    targets: list[str] = field(default_factory=list)

    @property
    def mean_sample_bytes(self) -> float:
        """Mean shard bytes per sample (image, label, metadata and tar headers)."""
        return self.bytes / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``shardkit info --json``)."""
        return {
            "split": self.split,
            "url": self.url,
            "shards": self.shards,
            "samples": self.samples,
            "bytes": self.bytes,
            "mean_sample_bytes": round(self.mean_sample_bytes, 1),
            "classes": {c: n for c, n in zip(self.classes, self.class_counts)}
            if self.class_counts
            else {c: None for c in self.classes},
            "skipped": self.skipped,
            "options": self.options,
            "sample_index": self.sample_index,
            "fields": self.fields,
            "targets": self.targets,
        }


def split_info(m: Manifest) -> SplitInfo:
    """The summary of one split from its manifest."""
    return SplitInfo(
        split=m.split,
        url=m.base_url,
        classes=m.classes,
        class_counts=m.class_counts,
        shards=len(m.shards),
        samples=m.num_samples,
        bytes=m.num_bytes,
        skipped=dict(Counter(s.reason for s in m.skipped)),
        options=m.options,
        sample_index=m.sample_index,
        fields=list(m.fields),
        targets=list(m.targets),
    )


def info(url: str, **storage_options: Any) -> list[SplitInfo]:
    """Per-split summaries of the dataset at ``url`` (manifests only, no shard is read)."""
    return [split_info(m) for m in load_manifests(url, **storage_options)]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: where (split, path of the shard or folder, key) and what.

    ``shard`` is the path relative to the URL that was verified (``train/train-000000.tar``,
    or ``train-000000.tar`` when that URL is the split folder).
    """

    split: str
    shard: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.shard}" + (f" key {self.key}" if self.key else "") + f": {self.message}"


@dataclass
class VerifyReport:
    """Result of :func:`verify` (``samples``: samples checked; with ``quick``, those the manifests list)."""

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
    """Reads a file front to back, hashing every byte; a forward seek reads (and hashes) the gap."""

    def __init__(self, f: IO[bytes]):
        self.f, self.sha, self.n = f, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        self.sha.update(b)
        self.n += len(b)
        return b

    def seek(self, offset: int) -> int:
        if offset < self.n:
            raise ValueError("_HashingReader only seeks forward")
        while self.n < offset and self.read(min(offset - self.n, 8 << 20)):
            pass
        return self.n

    def tell(self) -> int:
        return self.n

    def drain(self) -> None:
        while self.read(8 << 20):
            pass


def iter_raw(f: IO[bytes], url: str = "<shard>", *, rule: Optional[SampleRule] = None) -> Iterator[RawSample]:
    """Each sample of a shard written by shardkit, its fields read by ``rule`` (default: image and label).

    Raises:
        ValueError: a sample is unusable or the tar is damaged (the message names it).
    """
    r = ShardReader(f, url, rule=rule)
    try:
        while (s := r.read(r.index)) is not None:
            if s.error:
                raise ValueError(f"{url}: sample {s.index} ({s.key}): {s.error}")
            yield s
    except TarDamage as exc:
        raise ValueError(str(exc)) from None


def iter_samples(f: IO[bytes], url: str = "<shard>") -> Iterator[tuple[str, dict[str, bytes]]]:
    """``(key, {extension: bytes})`` of each sample of a single-label shard written by shardkit (``jpg``, ``cls``, ``json``).

    Raises:
        ValueError: a sample is unusable or the tar is damaged (the message names it).
    """
    for s in iter_raw(f, url):
        yield s.key, {LABEL_EXT: b"%d" % s.label, IMAGE_EXT: s.jpeg or b"", META_EXT: s.meta_bytes}  # type: ignore[str-format]


def _check_image(jpeg: bytes, max_pixels: int) -> Optional[str]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(jpeg)) as im:
            w, h = im.size
            if w * h > max_pixels:  # the loader refuses it from its header: so does verify (and decodes nothing)
                return f"image declares {w} x {h} pixels: the loader skips it (max_pixels {max_pixels}; pass a larger max_pixels to load and verify it)"
            im.load()
            if im.format != "JPEG":
                return f"image is {im.format}, not JPEG"
    except UnidentifiedImageError:
        return "image does not decode (not a recognised image format)"
    except Exception as exc:  # noqa: BLE001 - any decoder error is a finding, not a crash
        return f"image does not decode ({type(exc).__name__}: {exc})"
    return None


class _SplitCheck:
    """Verification of one split's shards (keys and class counts accumulate over the split)."""

    def __init__(self, m: Manifest, where: str, quick: bool, max_pixels: int, report: VerifyReport, so: dict[str, Any]):
        self.m, self.where, self.quick, self.max_pixels, self.report, self.so = m, where, quick, max_pixels, report, so
        self.keys: set[str] = set()
        self.counts = [0] * len(m.classes)
        self.unread = False  # a shard is missing or not fully readable: its class counts are unknown

    def add(self, name: str, key: str, msg: str) -> None:
        self.report.problems.append(Problem(self.m.split, self.where + name, key, msg))

    def shard(self, index: int) -> None:
        from shardkit.storage.fs import size_of

        m, s = self.m, self.m.shards[index]
        url = m.shard_url(index)
        size = size_of(url, **self.so)
        if size is None:
            self.unread = True
            return self.add(s.name, "", "shard is missing")
        if size != s.bytes:
            self.add(s.name, "", f"size is {size} bytes, manifest says {s.bytes}")
        layouts: list[SampleSpan] = []
        keys: list[str] = []
        with storage.open_read(url, **self.so) as f:
            r = _HashingReader(f)
            if self.quick:
                self.report.samples += s.samples
            else:
                self._samples(ShardReader(r, url, rule=SampleRule.of(m)), s.name, s.samples, layouts, keys)  # type: ignore[arg-type]
            r.drain()
        if r.sha.hexdigest() != s.sha256:
            self.add(s.name, "", "sha256 does not match the manifest (the shard changed or is damaged)")
        self.report.bytes += r.n
        if m.sample_index:
            self._index(index, None if self.quick else (layouts, keys))

    def _samples(
        self, reader: ShardReader, name: str, expected: int, layouts: list[SampleSpan], keys: list[str]
    ) -> None:
        n = 0
        try:
            while (smp := reader.read(reader.index)) is not None:
                n += 1
                assert reader.layout is not None
                layouts.append(reader.layout)
                keys.append(smp.key)
                if smp.error:  # the loader skips exactly these samples, for exactly this reason
                    self.add(name, smp.key, smp.error)
                    continue
                if smp.key in self.keys:
                    self.add(name, smp.key, "key appears more than once in the split")
                self.keys.add(smp.key)
                self._fields(name, smp)
        except TarDamage as exc:
            self.unread = True
            self.add(name, "", f"not a readable tar after {n} samples ({exc.what} at byte {exc.offset})")
        if n != expected:
            self.add(name, "", f"holds {n} samples, manifest says {expected}")
        self.report.samples += n

    def _fields(self, name: str, smp: RawSample) -> None:
        """What only a full check sees: class counts (``label`` or each of ``labels``), the ``.json`` and its class, the image."""
        key, label, meta_bytes = smp.key, smp.label, smp.meta_bytes
        classes = self.m.classes  # none: the loader accepts any label, and there is no class name to compare
        single = "label" in self.m.fields
        if classes and (single or "labels" in self.m.fields):
            for c in (label,) if single else smp.labels or ():
                self.counts[c] += 1  # type: ignore[index]
        elif classes:  # a detection / segmentation dataset: a sample holds the classes of its boxes and mask pixels
            held = {int(c) for c in smp.objects.labels} if smp.objects is not None else set()
            if smp.mask is not None:
                try:
                    mask = decode_mask(smp.mask, _image_size(smp.jpeg or b""))
                except ValueError as exc:
                    self.add(name, key, f"bad .{MASK_EXT} member: {exc}")
                else:
                    values = np.flatnonzero(np.bincount(mask.reshape(-1), minlength=256)[:IGNORE])
                    stray = [int(v) for v in values if v >= len(classes)]
                    if stray:
                        self.add(
                            name, key, f"mask value {stray[0]} is not a class index (below {len(classes)}) or {IGNORE}"
                        )
                    held |= {int(v) for v in values if v < len(classes)}
            if smp.instances is not None:  # the loader's own rule: PNG, the image's size, rows of its objects
                try:
                    count = 0 if smp.objects is None else len(smp.objects)
                    decode_instances(smp.instances, _image_size(smp.jpeg or b""), count)
                except ValueError as exc:
                    self.add(name, key, f"bad .{INSTANCES_EXT} member: {exc}")
            for c in held:
                self.counts[c] += 1
        if not meta_bytes:
            self.add(name, key, f"missing member .{META_EXT}")
        elif classes and single:
            cls = parse_meta(meta_bytes).get("class")  # the reader already refused a bad .json
            if cls != classes[label]:  # type: ignore[index]
                self.add(name, key, f"metadata class {cls!r} does not match label {label} ({classes[label]!r})")  # type: ignore[index]
        bad = _check_image(smp.jpeg or b"", self.max_pixels)
        if bad:
            self.add(name, key, bad)

    def _index(self, index: int, walked: Optional[tuple[list[SampleSpan], list[str]]]) -> None:
        m, s = self.m, self.m.shards[index]
        iname = index_url(s.name)
        if m.sample_index not in READABLE_INDEX_FORMATS:
            return self.add(
                iname,
                "",
                f"sample index format {m.sample_index!r} is unknown to this shardkit (the loader reads the tar without it)",
            )
        try:
            idx = load_index(m.shard_url(index), shard_bytes=s.bytes, shard_sha256=s.sha256, **self.so)
        except IndexDamage as exc:
            return self.add(iname, "", f"sample index unusable, the loader withholds this shard's samples ({exc})")
        if walked is not None and replace(idx, crc32c=None) != build_index(*walked, s.bytes, s.sha256):
            self.add(
                iname,
                "",
                "sample index does not match the tar (the loader withholds the samples it rejects)",
            )

    def finish(self) -> None:
        if not self.quick and not self.unread and self.m.class_counts and self.counts != self.m.class_counts:
            self.add(
                MANIFEST_NAME,
                "",
                f"class counts in the shards {self.counts} differ from the manifest {self.m.class_counts}",
            )


def _image_size(data: bytes) -> Optional[tuple[int, int]]:
    """The image's ``(width, height)`` from its header (``None`` if unreadable: the image check reports it)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:  # noqa: BLE001 - reported by _check_image
        return None


def _relative(url: str, base: str) -> str:
    """``base`` relative to ``url`` with a trailing separator ('' if equal; ``base`` itself if not below)."""
    u, b = url.rstrip("/\\"), base.rstrip("/\\")
    if u.endswith(".json"):
        u = u.rsplit("/", 1)[0] if "/" in u else "."
    if b == u or b == ".":
        return ""
    for sep in ("/", "\\"):
        if b.startswith(u + sep):
            return b[len(u) + 1 :] + "/"
    return b + "/"


def verify(
    url: str, *, quick: bool = False, quiet: bool = True, max_pixels: Optional[int] = None, **storage_options: Any
) -> VerifyReport:
    """Check every shard of the dataset at ``url`` against its manifest.

    Args:
        url: split folder or dataset root, local or fsspec URL.
        quick: sizes, sha256 and index checksums only (no decoding).
        quiet: no progress bar.
        max_pixels: an image declaring more pixels is a problem, as the loader skips it; default: the
            loader's default (``shardkit.load(..., max_pixels=...)``).
        storage_options: fsspec options.

    Returns:
        a report whose ``problems`` name the path, key and what is wrong; an unfinished
        conversion (a split folder without manifest) is a problem naming the command that finishes it.
    """
    from tqdm.auto import tqdm

    if max_pixels is None:
        max_pixels = MAX_PIXELS  # the loader's default too
    if max_pixels < 1:
        raise ValueError(f"max_pixels must be >= 1, got {max_pixels}")
    found = find_splits(url, **storage_options)
    report = VerifyReport(splits=len(found.manifests) + len(found.incomplete) + len(found.unreadable))
    for inc in found.unreadable:
        report.problems.append(Problem("", _relative(url, inc.url) + MANIFEST_NAME, "", inc.detail))
    for inc in found.incomplete:
        report.problems.append(Problem("", _relative(url, inc.url) or "./", "", inc.detail))
    total = sum(m.num_bytes for m in found.manifests)
    with tqdm(total=total, unit="B", unit_scale=True, desc="verify", disable=quiet, dynamic_ncols=True) as bar:
        for m in found.manifests:
            check = _SplitCheck(m, _relative(url, m.base_url), quick, max_pixels, report, dict(storage_options))
            for i, s in enumerate(m.shards):
                try:
                    check.shard(i)
                except ShardkitError as exc:
                    check.unread = True
                    check.add(s.name, "", str(exc))
                report.shards += 1
                bar.update(s.bytes)
            check.finish()
    return report


__all__ = [
    "Found",
    "Incomplete",
    "Problem",
    "SplitInfo",
    "VerifyReport",
    "find_splits",
    "info",
    "split_info",
    "iter_raw",
    "iter_samples",
    "load_manifests",
    "verify",
]
