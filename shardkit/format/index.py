"""The sample index: where every sample's members lie in its shard, so a block is one range read.

``shardkit convert`` writes one small sidecar per shard, ``<split>-NNNNNN.idx``
next to ``<split>-NNNNNN.tar`` (why a sidecar and not the manifest: a reader
loads the index of the shards it reads, when it reads them, and the manifest of a
100,000-shard split stays the size it was; about 40 bytes per sample, 0.04 % of
the shard). The sidecar is little-endian binary:

* a header: magic ``SKINDEX1``, samples ``n``, fields ``k``, the shard's size and
  sha256 (the index belongs to exactly these bytes), the lengths of two blobs;
* the field names (``cls``, ``jpg``, ``json``) and the ``n`` keys, ``\\n``-joined UTF-8;
* ``starts``: uint64 ``[n + 1]``, sample ``i`` is bytes ``[starts[i], starts[i+1])``;
* ``offsets``, ``sizes``: uint32 ``[n, k]``, member data offsets (relative to the
  sample's start) and sizes;
* (format ``sidecar-2``, magic ``SKINDEX2``) ``crc32c``: uint32 ``[n]``, the CRC32C of each
  sample's bytes ``[starts[i], starts[i+1])`` (its tar headers, data and padding:
  :mod:`shardkit.format.checksum`); ``sidecar-1`` (magic ``SKINDEX1``) has none;
* a CRC-32 of everything before it.

Trust: :func:`load_index` reads only the size the header announces (refused when
no shard of the manifest's size could need it), checks the CRC, that the index
names the shard's size and sha256 from the manifest, that its keys obey the member
rule, are unique and fit a tar header's name field, and that the samples lie back
to back from byte 0 (each member's one header right after the previous member's
padded data, none larger than the walk loads): no byte of an indexed range is left
unchecked, so no extended header or foreign member can hide in it.
:meth:`SampleIndex.slice` checks every sample it hands out: its CRC32C (``sidecar-2``), and the
tar header in front of each member (checksum, name with no USTAR prefix, regular-file type,
size). A sample that fails is handed out with its ``error`` set (the loader withholds and
counts it, or stops under ``strict``), never with other bytes, and never read again with the
header walk: bytes the index rejects are not trusted by another reader either. The walk
(:mod:`shardkit.format.tar`) is for shards without an index. ``shardkit verify`` checks each
sidecar against the tar it describes; ``shardkit index`` adds checksums to a dataset written
before them.

Example (what the loader's block read does)::

    from shardkit.format.index import IndexDamage, load_index

    m = load_manifest(url)                         # m.sample_index == INDEX_FORMAT: the shards have sidecars
    info = m.shards[k]
    try:
        idx = load_index(m.shard_url(k), shard_bytes=info.bytes, shard_sha256=info.sha256)  # once per shard
        samples = idx.read(f, i, j, url=m.shard_url(k), first_gid=offset + i, num_classes=len(m.classes))
    except IndexDamage:                            # no index, or it is damaged or for other bytes
        ...                                        # samples i .. j-1 are withheld (the dataset is damaged)

``idx.read`` is ``idx.byte_range(i, j)`` (samples i .. j-1 are bytes ``[lo, hi)``),
one ``f.seek(lo); f.read(hi - lo)``, and :meth:`SampleIndex.slice` of those bytes;
callers that fetch ranges themselves (one ranged GET) call ``slice`` directly.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import IO, Optional

import numpy as np

from shardkit.format.checksum import crc32c
from shardkit.format.members import UnsafeName, split_member
from shardkit.format.sample import (
    FIELD_LIMITS,
    LOADED_EXTS,
    MAX_MEMBER_BYTES,
    RawSample,
    SampleRule,
    check_sample,
    size_error,
    store_field,
)
from shardkit.format.tar import BLOCK, FILE_TYPES, NAME_FIELD, header_ok, octal

#: the manifest's ``sample_index`` value for shards with a sidecar in the format written now (with checksums)
INDEX_FORMAT = "sidecar-2"
#: the format written before per-sample checksums (still read: samples are checked by their tar headers only)
INDEX_FORMAT_V1 = "sidecar-1"
#: the ``sample_index`` values this shardkit reads
READABLE_INDEX_FORMATS = (INDEX_FORMAT_V1, INDEX_FORMAT)
INDEX_SUFFIX = ".idx"
_MAGIC = b"SKINDEX2"
_MAGIC_V1 = b"SKINDEX1"
HEAD = struct.Struct("<8sIIQ32sII")  # magic, n, k, shard bytes, shard sha256, exts blob, keys blob
#: largest sidecar accepted (a 100,000-sample shard needs about 5 MB)
MAX_INDEX_BYTES = 1 << 28


class IndexDamage(Exception):
    """A sidecar index is missing, corrupt, or describes other bytes than the shard."""


class IndexMismatch(IndexDamage):
    """A range read returned another number of bytes than the index names."""


def index_url(shard_url: str) -> str:
    """URL of the sidecar index of ``shard_url`` (``x.tar`` -> ``x.idx``)."""
    return (shard_url[:-4] if shard_url.endswith(".tar") else shard_url) + INDEX_SUFFIX


@dataclass(frozen=True, eq=False)
class SampleIndex:
    """Where each sample of one shard lies (see the module docstring)."""

    keys: tuple[str, ...]
    exts: tuple[str, ...]
    starts: np.ndarray  #: uint64 [n + 1]
    offsets: np.ndarray  #: uint32 [n, k]
    sizes: np.ndarray  #: uint32 [n, k]
    shard_bytes: int
    shard_sha256: str
    crc32c: Optional[np.ndarray] = None  #: uint32 [n]: CRC32C of each sample's bytes (None: a sidecar-1 index)

    @property
    def has_checksums(self) -> bool:
        """True when every sample's bytes carry a CRC32C (format ``sidecar-2``)."""
        return self.crc32c is not None

    def damaged(self, data: bytes, start: int, stop: int) -> list[int]:
        """Samples of ``start .. stop-1`` whose bytes in ``data`` (the bytes :meth:`byte_range` names)
        fail their CRC32C; ``[]`` for an index without checksums (its samples are checked by
        :meth:`slice`'s tar header checks only)."""
        if self.crc32c is None:
            return []
        lo, hi = self.byte_range(start, stop)
        if len(data) != hi - lo:
            raise IndexMismatch(f"range read returned {len(data)} bytes, index says {hi - lo}")
        starts = (self.starts[start : stop + 1] - np.uint64(lo)).tolist()
        want = self.crc32c[start:stop].tolist()
        whole = len(starts) == 2 and isinstance(data, bytes)
        return [
            start + s
            for s in range(stop - start)
            if crc32c(data if whole else bytes(data[starts[s] : starts[s + 1]])) != want[s]
        ]

    def __len__(self) -> int:
        return len(self.keys)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SampleIndex) and self.to_bytes() == other.to_bytes()

    def byte_range(self, start: int, stop: int) -> tuple[int, int]:
        """``(lo, hi)``: samples ``start .. stop-1`` are bytes ``[lo, hi)`` of the shard."""
        if not 0 <= start < stop <= len(self.keys):
            raise IndexError(f"samples {start}..{stop} outside 0..{len(self.keys)}")
        return int(self.starts[start]), int(self.starts[stop])

    def slice(
        self,
        data: bytes,
        start: int,
        stop: int,
        *,
        url: str,
        first_gid: int = -1,
        num_classes: Optional[int] = None,
        rule: Optional[SampleRule] = None,
    ) -> list[RawSample]:
        """The samples ``start .. stop-1`` out of ``data``, the bytes :meth:`byte_range` names.

        Returns the same :class:`RawSample` objects the header walk returns (only the
        members of :data:`~shardkit.format.sample.LOADED_EXTS` are loaded; a member that breaks
        ``rule``, the dataset's :class:`~shardkit.format.sample.SampleRule` (default: single-label of
        ``num_classes``), or a bad ``.json`` makes its sample's ``error``). A sample whose bytes
        differ from the conversion (its CRC32C, or a member's tar header: checksum, name, type or
        size) carries an ``error`` and no fields: it is withheld, never delivered.

        Raises:
            IndexMismatch: ``data`` has the wrong length.
        """
        rule = rule if rule is not None else SampleRule(num_classes=num_classes)
        lo, hi = self.byte_range(start, stop)
        if len(data) != hi - lo:
            raise IndexMismatch(f"{url}: range read returned {len(data)} bytes, index says {hi - lo}")
        starts = (self.starts[start:stop] - np.uint64(lo)).tolist()
        offs, sizes = self.offsets[start:stop].tolist(), self.sizes[start:stop].tolist()
        bad = set(self.damaged(data, start, stop))
        names = [("." + e).encode("utf-8") for e in self.exts]
        limits = [FIELD_LIMITS[e] if e in LOADED_EXTS else -1 for e in self.exts]  # -1: not loaded
        out = []
        for s in range(stop - start):
            key = self.keys[start + s]
            kb = key.encode("utf-8")
            gid = first_gid + s if first_gid >= 0 else -1
            sample = RawSample(key=key, gid=gid, shard=url, index=start + s)
            if start + s in bad:
                sample.error = changed_error(url, start + s, key, "its CRC32C differs from the index")
                out.append(sample)
                continue
            base = starts[s]
            for c, ext in enumerate(self.exts):
                at, size = base + offs[s][c], sizes[s][c]
                hdr = data[at - BLOCK : at]
                name = kb + names[c]  # shorter than the name field (_check): the walk reads exactly these bytes
                if (
                    len(hdr) != BLOCK
                    or hdr[: len(name)] != name
                    or hdr[len(name)] != 0
                    or hdr[156:157] not in FILE_TYPES
                    or (hdr[345] and hdr[257:262] == b"ustar")
                    or not header_ok(hdr)
                    or _size(hdr) != size
                    or at + size > len(data)
                ):
                    sample = RawSample(key=key, gid=gid, shard=url, index=start + s)
                    sample.error = changed_error(
                        url,
                        start + s,
                        key,
                        f"the tar header of .{ext} at byte {lo + at - BLOCK} differs from the index",
                    )
                    break
                if size <= limits[c]:
                    store_field(sample, ext, data[at : at + size])
                elif limits[c] >= 0:  # as the walk: refused from its size, not read
                    sample.error = sample.error or size_error(key, ext, size)
            else:
                check_sample(sample, rule)
            out.append(sample)
        return out

    def read(
        self,
        f: IO[bytes],
        start: int,
        stop: int,
        *,
        url: str,
        first_gid: int = -1,
        num_classes: Optional[int] = None,
        rule: Optional[SampleRule] = None,
    ) -> list[RawSample]:
        """Samples ``start .. stop-1`` with one range read from the shard open as ``f`` (see :meth:`slice`)."""
        lo, hi = self.byte_range(start, stop)
        f.seek(lo)
        return self.slice(
            f.read(hi - lo), start, stop, url=url, first_gid=first_gid, num_classes=num_classes, rule=rule
        )

    def to_bytes(self) -> bytes:
        """The sidecar's bytes."""
        exts = "\n".join(self.exts).encode("utf-8")
        keys = "\n".join(self.keys).encode("utf-8")
        body = b"".join(
            [
                HEAD.pack(
                    _MAGIC if self.crc32c is not None else _MAGIC_V1,
                    len(self.keys),
                    len(self.exts),
                    self.shard_bytes,
                    bytes.fromhex(self.shard_sha256),
                    len(exts),
                    len(keys),
                ),
                exts,
                keys,
                self.starts.astype("<u8").tobytes(),
                self.offsets.astype("<u4").tobytes(),
                self.sizes.astype("<u4").tobytes(),
            ]
        )
        if self.crc32c is not None:
            body += self.crc32c.astype("<u4").tobytes()
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(
        cls, data: bytes, url: str = "<index>", *, shard_bytes: Optional[int] = None, shard_sha256: Optional[str] = None
    ) -> "SampleIndex":
        """Parse and check a sidecar (see the module docstring); :class:`IndexDamage` naming ``url`` if it is unusable."""
        if len(data) > MAX_INDEX_BYTES:
            raise IndexDamage(f"{url}: sample index larger than {MAX_INDEX_BYTES} bytes")
        if len(data) < HEAD.size + 4 or zlib.crc32(data[:-4]) != struct.unpack("<I", data[-4:])[0]:
            raise IndexDamage(f"{url}: not a sample index or damaged (CRC mismatch)")
        magic, n, k, nbytes, sha, le, lk = HEAD.unpack_from(data)
        if magic not in (_MAGIC, _MAGIC_V1):
            raise IndexDamage(f"{url}: not a shardkit sample index (magic {magic!r})")
        checked = magic == _MAGIC
        if shard_bytes is not None and nbytes != shard_bytes or shard_sha256 is not None and sha.hex() != shard_sha256:
            raise IndexDamage(f"{url}: describes another shard (size or sha256 differ from the manifest)")
        pos = HEAD.size
        need = needed(magic, n, k, le, lk)
        if need != len(data) or k == 0:
            raise IndexDamage(f"{url}: {len(data)} bytes where {n} samples of {k} fields need {need}")
        try:
            exts = tuple(data[pos : pos + le].decode("utf-8").split("\n"))
            keys = tuple(data[pos + le : pos + le + lk].decode("utf-8").split("\n")) if n else ()
        except UnicodeDecodeError:
            raise IndexDamage(f"{url}: keys or fields are not UTF-8") from None
        pos += le + lk
        starts = np.frombuffer(data, "<u8", n + 1, pos).astype(np.uint64)
        offsets = np.frombuffer(data, "<u4", n * k, pos + 8 * (n + 1)).reshape(n, k).astype(np.uint32)
        sizes = np.frombuffer(data, "<u4", n * k, pos + 8 * (n + 1) + 4 * n * k).reshape(n, k).astype(np.uint32)
        crcs = np.frombuffer(data, "<u4", n, pos + 8 * (n + 1) + 8 * n * k).astype(np.uint32) if checked else None
        idx = cls(keys, exts, starts, offsets, sizes, nbytes, sha.hex(), crcs)
        idx._check(url)
        return idx

    def _check(self, url: str) -> None:
        n, k = len(self.keys), len(self.exts)
        if len(set(self.exts)) != k or len(set(self.keys)) != n:
            raise IndexDamage(f"{url}: repeated keys or fields")
        # split_member(f"{key}.{ext}") == (key, ext) exactly when the key splits back from any name
        # "<key>.x" and the field has no "/": one member-rule call per key, not one per member
        if any("/" in e for e in self.exts):
            raise IndexDamage(f"{url}: a field name {self.exts!r} holds '/'")
        for key in self.keys:
            try:
                if split_member(f"{key}.x") != (key, "x"):
                    raise IndexDamage(f"{url}: {key!r} is not a sample key (member rule)")
            except UnsafeName as exc:
                raise IndexDamage(f"{url}: {exc}") from None
        if (
            n
            and max(len(x.encode("utf-8")) for x in self.keys) + 1 + max(len(e.encode("utf-8")) for e in self.exts)
            >= NAME_FIELD
        ):
            raise IndexDamage(f"{url}: a member name does not fit a tar header's {NAME_FIELD}-byte name field")
        why = layout_error(self.starts, self.offsets, self.sizes, self.shard_bytes)
        if why:
            raise IndexDamage(f"{url}: {why}")


def changed_error(url: str, index: int, key: str, why: str) -> str:
    """The ``error`` of sample ``index`` (``key``) of shard ``url`` whose bytes differ from the conversion."""
    return (
        f"{url}: sample {index} ({key}): {why}: the shard changed since conversion; "
        f"withheld (find the damage with `shardkit verify`, then reconvert)"
    )


def needed(magic: bytes, n: int, k: int, le: int, lk: int) -> int:
    """Bytes of a sidecar with this header."""
    return HEAD.size + le + lk + 8 * (n + 1) + 8 * n * k + (4 * n if magic == _MAGIC else 0) + 4


def _size(hdr: bytes) -> int:
    """The size field of a header, ``-1`` if malformed."""
    try:
        return octal(hdr[124:136])
    except ValueError:
        return -1


def layout_error(starts: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, shard_bytes: int) -> Optional[str]:
    """Why these ranges are not a shard's samples laid out back to back, or ``None``.

    Indexed samples start at byte 0 and follow each other, each member's one 512-byte header right
    after the previous member's padded data, and no member is larger than the walk loads: no byte in
    the indexed range is unchecked by a slice, so no extended header or foreign member can hide
    between two members and rename one for the walk.
    """
    if len(starts) < 2:
        return None
    if starts[0] != 0 or np.any(starts[1:] <= starts[:-1]) or starts[-1] > shard_bytes:  # uint64: no wrap-around
        return "sample ranges out of order, not from byte 0, or outside the shard"
    off, size = offsets.astype(np.int64), sizes.astype(np.int64)
    if size.max(initial=0) > MAX_MEMBER_BYTES:  # the walk never loads such a member: a range read must not either
        return f"a member of {size.max()} bytes (limit {MAX_MEMBER_BYTES})"
    ends = off + (size + BLOCK - 1) // BLOCK * BLOCK  # each member's padded data end, relative to its sample
    if (
        np.any(off[:, 0] != BLOCK)
        or np.any(off[:, 1:] != ends[:, :-1] + BLOCK)
        or np.any(np.diff(starts.astype(np.int64)) != ends[:, -1])
    ):
        return "members or samples not back to back (a gap between them)"
    return None
