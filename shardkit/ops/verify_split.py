"""The checks :func:`shardkit.ops.verify.verify` runs on one split's shards, and what it reports.

:class:`SplitCheck` reads each shard front to back once: its size and sha256 against the manifest
and, unless ``quick``, every sample as the loader reads it (the same header walk and member rule),
the ``.json`` member and its class name, key uniqueness across the split, per-class counts, that
every image decodes, and that the shard's sample index matches its tar. A sample index with
per-sample checksums (``sidecar-2``) has each sample's CRC32C checked against the bytes read, in
``quick`` mode too (every byte passes through the sha256 anyway).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import IO, Any, Optional

import numpy as np

from shardkit.format.checksum import crc32c
from shardkit.format.fields import IGNORE, INSTANCES_EXT, MASK_EXT
from shardkit.format.index import INDEX_FORMAT, READABLE_INDEX_FORMATS, IndexDamage, SampleIndex, index_url
from shardkit.format.indexio import build_index, load_index
from shardkit.format.manifest import MANIFEST_NAME, Manifest
from shardkit.format.masks import decode_instances, decode_mask
from shardkit.format.members import META_EXT, parse_meta
from shardkit.format.sample import RawSample, SampleRule
from shardkit.format.tar import SampleSpan, ShardReader, TarDamage
from shardkit.storage import fs as storage

#: checksum mismatches named one by one per shard (the rest are counted)
SHOWN_MISMATCHES = 10


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
    """Result of :func:`~shardkit.ops.verify.verify` (``samples``: samples checked; with ``quick``, those the manifests list)."""

    splits: int = 0
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: what verify cannot vouch for without being wrong (files the manifest does not list, sample
    #: indexes without checksums); problems too when ``strict``
    warnings: list[Problem] = field(default_factory=list)
    strict: bool = False

    @property
    def ok(self) -> bool:
        """True when no problem was found (with ``strict``: nor any warning)."""
        return not self.problems and not (self.strict and self.warnings)


class _HashingReader:
    """Reads a file front to back, hashing every byte; a forward seek reads (and hashes) the gap.

    With ``starts`` (a sample index's ``starts``, back to back from byte 0) it also computes the CRC32C
    of each sample's bytes ``[starts[i], starts[i+1])`` as they pass (``crcs``, in sample order).
    """

    def __init__(self, f: IO[bytes], starts: Optional[np.ndarray] = None):
        self.f, self.sha, self.n = f, hashlib.sha256(), 0
        self.bounds: list[int] = [] if starts is None else starts.tolist()
        self.crcs: list[int] = []
        self._sample = bytearray()

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        self.sha.update(b)
        if len(self.crcs) + 1 < len(self.bounds):
            self._feed(b)
        self.n += len(b)
        return b

    def _feed(self, b: bytes) -> None:
        """Add ``b`` (bytes ``[n, n + len(b))``) to the samples it covers; each sample complete gets its CRC."""
        pos, view = self.n, memoryview(b)
        while view and len(self.crcs) + 1 < len(self.bounds):
            end = self.bounds[len(self.crcs) + 1]
            take = min(len(view), end - pos)
            self._sample += view[:take]
            pos, view = pos + take, view[take:]
            if pos == end:
                self.crcs.append(crc32c(bytes(self._sample)))
                self._sample.clear()

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


class SplitCheck:
    """Verification of one split's shards (keys and class counts accumulate over the split)."""

    def __init__(self, m: Manifest, where: str, quick: bool, max_pixels: int, report: VerifyReport, so: dict[str, Any]):
        self.m, self.where, self.quick, self.max_pixels, self.report, self.so = m, where, quick, max_pixels, report, so
        self.keys: set[str] = set()
        self.counts = [0] * len(m.classes)
        self.unread = False  # a shard is missing or not fully readable: its class counts are unknown

    def add(self, name: str, key: str, msg: str) -> None:
        self.report.problems.append(Problem(self.m.split, self.where + name, key, msg))

    def shard(self, index: int) -> None:
        """Check shard ``index`` (and its sample index), adding what is wrong to the report."""
        from shardkit.storage.fs import size_of

        m, s = self.m, self.m.shards[index]
        url = m.shard_url(index)
        size = size_of(url, **self.so)
        if size is None:
            self.unread = True
            return self.add(s.name, "", "shard is missing")
        if size != s.bytes:
            self.add(s.name, "", f"size is {size} bytes, manifest says {s.bytes}")
        idx, idx_problem = self._load_index(index) if m.sample_index else (None, "")
        checksums = idx is not None and idx.has_checksums
        layouts: list[SampleSpan] = []
        keys: list[str] = []
        with storage.open_read(url, **self.so) as f:
            r = _HashingReader(f, idx.starts if checksums and idx is not None else None)
            if self.quick:
                self.report.samples += s.samples
            else:
                self._samples(ShardReader(r, url, rule=SampleRule.of(m)), s.name, s.samples, layouts, keys)  # type: ignore[arg-type]
            r.drain()
        if r.sha.hexdigest() != s.sha256:
            self.add(s.name, "", "sha256 does not match the manifest (the shard changed or is damaged)")
        self.report.bytes += r.n
        if idx_problem:
            self.add(index_url(s.name), "", idx_problem)
        if idx is not None and not self.quick:
            self._index_matches(index, idx, layouts, keys)
        if checksums and idx is not None:
            self._checksums(s.name, idx, r.crcs)

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

    def _load_index(self, index: int) -> tuple[Optional[SampleIndex], str]:
        """The sidecar index of shard ``index``, or ``None`` and why the loader cannot use it."""
        m, s = self.m, self.m.shards[index]
        if m.sample_index not in READABLE_INDEX_FORMATS:
            return None, (
                f"sample index format {m.sample_index!r} is unknown to this shardkit (the loader reads the tar without it)"
            )
        try:
            idx = load_index(m.shard_url(index), shard_bytes=s.bytes, shard_sha256=s.sha256, **self.so)
        except IndexDamage as exc:
            return None, f"sample index unusable, the loader withholds this shard's samples ({exc})"
        if m.sample_index == INDEX_FORMAT and not idx.has_checksums:
            return idx, (
                f"sample index holds no per-sample checksums, though the manifest says {INDEX_FORMAT!r}; "
                f"'shardkit index {m.base_url}' adds them"
            )
        return idx, ""

    def _index_matches(self, index: int, idx: SampleIndex, layouts: list[SampleSpan], keys: list[str]) -> None:
        """Whether the index places every sample and member where the header walk found them."""
        s = self.m.shards[index]
        crcs = None if idx.crc32c is None else idx.crc32c.tolist()  # compared sample by sample in _checksums
        if idx != build_index(layouts, keys, s.bytes, s.sha256, crcs):
            self.add(
                index_url(s.name),
                "",
                "sample index does not match the tar (the loader withholds the samples it rejects)",
            )

    def _checksums(self, name: str, idx: SampleIndex, crcs: list[int]) -> None:
        """Each sample's CRC32C in the index against ``crcs``, those of the bytes read (a short shard: fewer)."""
        assert idx.crc32c is not None
        bad = [i for i, (want, got) in enumerate(zip(idx.crc32c.tolist(), crcs)) if want != got]
        for i in bad[:SHOWN_MISMATCHES]:
            lo, hi = idx.byte_range(i, i + 1)
            self.add(
                name,
                idx.keys[i],
                f"bytes {lo}..{hi} do not match the CRC32C in the sample index (the shard or its index is damaged)",
            )
        if len(bad) > SHOWN_MISMATCHES:
            self.add(name, "", f"{len(bad) - SHOWN_MISMATCHES} more samples do not match their CRC32C")

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
