"""Read the samples of one shard sequentially, skipping forward without reading data.

Why a tar header walker of our own: webdataset's ``tar_file_iterator`` (like
``tarfile`` in stream mode) can only go forward by reading every member's
data. Resuming mid-epoch and splitting a shard between workers need "jump to
sample ``i``" without reading, let alone decoding, samples ``0 .. i-1``. This
walker reads one 512-byte header per member and seeks over the data it does
not need (a local seek, or a forward seek in fsspec's read-ahead file).

Only regular-file members are considered; members are grouped into samples
by key (the member name up to the first dot of the base name, as webdataset
does); only the ``jpg``, ``cls`` and ``json`` fields are read, everything
else is skipped unread and never unpickled. A damaged or truncated tar
raises :class:`TarDamage` naming the shard and byte offset; the samples
before the damage have already been delivered.

Hostile shards: names are only strings here (the reader never creates a
file, so ``..``, absolute paths, links and device members touch nothing);
links, devices and directories are not sample members; a field that repeats
within one key starts a new sample (two samples are never merged into one);
sizes are checked before anything is allocated (a member to load is at most
:data:`MAX_MEMBER_BYTES`, an extended header at most :data:`MAX_HEADER_BYTES`);
malformed numbers and pax records are :class:`TarDamage`, never another error.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, Optional

from ..shardformat import IMAGE_EXT, LABEL_EXT, META_EXT

_BLOCK = 512
_FILE_TYPES = (b"0", b"\0", b"7")
#: largest member the reader loads into memory (a bigger one makes its sample unusable)
MAX_MEMBER_BYTES = 1 << 28
#: largest pax extended header or GNU long name accepted
MAX_HEADER_BYTES = 1 << 16
_MAX_NAME = 4096
_INT64_MAX = (1 << 63) - 1


class TarDamage(Exception):
    """The tar is corrupt or truncated at ``offset`` bytes."""

    def __init__(self, url: str, offset: int, what: str):
        super().__init__(f"{url}: damaged tar at byte {offset}: {what}")
        self.url, self.offset, self.what = url, offset, what


@dataclass
class RawSample:
    """One sample as stored: JPEG bytes, label and metadata, plus where it came from.

    Attributes:
        key: sample key (``__key__`` in webdataset terms).
        gid: global sample id (``shard_offsets[shard] + index``).
        shard: URL of its shard.
        index: position in its shard.
        jpeg: the image bytes (``None`` if missing).
        label: class index (``None`` if missing or unreadable).
        meta_bytes: the raw ``.json`` member (``b""`` if missing).
        error: why this sample cannot be used, or ``None``.
    """

    key: str
    gid: int
    shard: str
    index: int
    jpeg: Optional[bytes] = None
    label: Optional[int] = None
    meta_bytes: bytes = b""
    error: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def meta(self) -> dict[str, Any]:
        """The sample's metadata (parsed JSON; ``{}`` if missing or invalid)."""
        try:
            d = json.loads(self.meta_bytes) if self.meta_bytes else {}
        except ValueError:
            return {}
        return d if isinstance(d, dict) else {}


@dataclass
class _Member:
    key: str
    ext: str
    size: int
    data_offset: int


def _octal(field_: bytes) -> int:
    """A numeric header field (octal, or GNU base-256); ``ValueError`` if malformed."""
    if field_[:1] and field_[0] & 0x80:  # base-256 (GNU) for large sizes
        if field_[0] != 0x80:
            raise ValueError("negative base-256 number")
        return int.from_bytes(field_[1:], "big")
    s = field_.split(b"\0", 1)[0].strip()
    if s.translate(None, b"01234567"):  # any byte that is not an octal digit
        raise ValueError(f"not an octal number: {s[:20]!r}")
    return int(s, 8) if s else 0


_ADLER_MOD = 65521


def _header_sum(buf: bytes) -> int:
    """The tar checksum of a header (its bytes summed, the checksum field read as spaces), modulo 65521.

    zlib's Adler-32 keeps ``1 + sum(bytes) mod 65521`` in its low half: one C call
    instead of summing 512 bytes in Python. A header sum is at most 130,560, so only
    damage that shifts it by exactly 65,521 would go unnoticed.
    """
    return (zlib.adler32(buf) & 0xFFFF) - 1 - sum(buf[148:156]) + 256


def _key_ext(name: str) -> Optional[tuple[str, str]]:
    """``(key, extension)`` of a member name: the key ends at the first dot of the base name."""
    if len(name) > _MAX_NAME:
        return None
    d, slash, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem or base.startswith("__"):
        return None
    return d + slash + stem, ext


def _pad(n: int) -> int:
    return (n + _BLOCK - 1) // _BLOCK * _BLOCK


def _pax_path(data: bytes) -> Optional[str]:
    """The ``path`` record of a pax extended header; ``ValueError`` if the records are malformed."""
    path = None
    pos = 0
    while pos < len(data):
        if data[pos:].strip(b"\0") == b"":
            break  # padding
        sp = data.find(b" ", pos, pos + 21)
        digits = data[pos:sp] if sp > pos else b""
        if not digits or not digits.isdigit():
            raise ValueError(f"malformed pax record at {pos}")
        length = int(digits)
        if length <= sp - pos + 1 or pos + length > len(data):
            raise ValueError(f"pax record length {length} out of range at {pos}")
        rec = data[sp + 1 : pos + length - 1]
        k, _, v = rec.partition(b"=")
        if k == b"path":
            path = v.decode("utf-8", "replace")
        pos += length
    return path


class ShardReader:
    """Forward-only sample reader over an open binary file of one shard.

    Args:
        f: a seekable binary file (local file or fsspec file).
        url: the shard's URL (for messages).
        fields: member extensions to read; others are skipped unread.
    """

    def __init__(self, f: IO[bytes], url: str, fields: tuple[str, ...] = (IMAGE_EXT, LABEL_EXT, META_EXT), *, num_classes: Optional[int] = None):
        self.f, self.url, self.fields = f, url, frozenset(fields)
        self.num_classes = num_classes  #: labels outside ``[0, num_classes)`` make the sample unusable
        self.pos = 0  #: byte offset of the next header to parse
        self.index = 0  #: index of the next sample
        self.bytes_read = 0  #: bytes actually read (headers + kept members)
        self._pending: Optional[_Member] = None
        self._eof = False
        self._damage: Optional[TarDamage] = None

    def close(self) -> None:
        self.f.close()

    def _read_at(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        data = self.f.read(n)
        self.bytes_read += len(data)
        return data

    def _next_header(self) -> Optional[_Member]:
        """Parse headers from ``pos`` until a regular file member with a key and extension."""
        long_name: Optional[str] = None
        while True:
            at = self.pos
            buf = self._read_at(at, _BLOCK)
            if not buf:
                raise TarDamage(self.url, at, "file ends without the end-of-archive marker (truncated)")
            if len(buf) < _BLOCK:
                raise TarDamage(self.url, at, "truncated header")
            if buf.count(0) == _BLOCK:
                return None  # end-of-archive marker
            try:
                chk = _octal(buf[148:156])
                size = _octal(buf[124:136])
            except ValueError as exc:
                raise TarDamage(self.url, at, f"malformed header ({exc})") from None
            if (chk - _header_sum(buf)) % _ADLER_MOD:
                raise TarDamage(self.url, at, "header checksum mismatch")
            kind = buf[156:157]
            data_offset = at + _BLOCK
            self.pos = data_offset + _pad(size)
            if kind in (b"x", b"L"):  # pax extended header / GNU long name for the next member
                if size > MAX_HEADER_BYTES:
                    raise TarDamage(self.url, at, f"extended header of {size} bytes (limit {MAX_HEADER_BYTES})")
                data = self._read_at(data_offset, size)
                if len(data) < size:
                    raise TarDamage(self.url, data_offset, "truncated extended header")
                try:
                    long_name = _pax_path(data) if kind == b"x" else data.split(b"\0", 1)[0].decode("utf-8", "replace")
                except ValueError as exc:
                    raise TarDamage(self.url, data_offset, f"malformed pax header ({exc})") from None
                continue
            if kind not in _FILE_TYPES:  # directories, links, global headers...: not sample members
                long_name = None
                continue
            name = long_name
            long_name = None
            if name is None:
                name = buf[0:100].split(b"\0", 1)[0].decode("utf-8", "replace")
                if buf[257:262] == b"ustar":
                    prefix = buf[345:500].split(b"\0", 1)[0].decode("utf-8", "replace")
                    if prefix:
                        name = prefix + "/" + name
            ke = _key_ext(name)
            if ke is None:
                continue
            return _Member(ke[0], ke[1], size, data_offset)

    def _peek(self) -> Optional[_Member]:
        if self._pending is None and not self._eof:
            self._pending = self._next_header()
            self._eof = self._pending is None
        return self._pending

    def read(self, index: int, gid: int = -1, *, load: bool = True) -> Optional[RawSample]:
        """Sample ``index`` of the shard (forward only), or ``None`` if the shard ends first.

        Samples between the current position and ``index`` are skipped by
        walking their headers only. With ``load=False`` the target sample's
        data is skipped too (only its key is returned).

        Raises:
            TarDamage: the tar is corrupt or truncated before ``index`` was read.
        """
        if self._damage is not None:
            raise self._damage
        if index < self.index:
            raise ValueError(f"{self.url}: cannot go back from sample {self.index} to {index}")
        while True:
            m = self._peek()
            if m is None:
                return None
            key, target = m.key, self.index == index
            sample = RawSample(key=key, gid=gid, shard=self.url, index=self.index) if target else None
            damage: Optional[TarDamage] = None
            exts: set[str] = set()
            while m is not None and m.key == key and m.ext not in exts:  # a repeated field starts a new sample
                exts.add(m.ext)
                if sample is not None and load and m.ext in self.fields:
                    if m.size > MAX_MEMBER_BYTES:
                        sample.error = sample.error or f"member {key}.{m.ext} has {m.size} bytes (limit {MAX_MEMBER_BYTES})"
                    else:
                        data = self._read_at(m.data_offset, m.size)
                        if len(data) < m.size:
                            raise TarDamage(self.url, m.data_offset + len(data), f"truncated member {key}.{m.ext}")
                        self._store(sample, m.ext, data)
                self._pending = None
                try:
                    m = self._peek()
                except TarDamage as exc:
                    if sample is None:
                        raise
                    self._damage, m, damage = exc, None, exc  # deliver the sample if complete, fail on the next read
            self.index += 1
            if sample is not None:
                if load:
                    self._check(sample, self.num_classes)
                    if sample.error and damage is not None:
                        sample.error = str(damage)  # incomplete because of the damage: say so
                return sample

    @staticmethod
    def _store(sample: RawSample, ext: str, data: bytes) -> None:
        if ext == IMAGE_EXT:
            sample.jpeg = data
        elif ext == LABEL_EXT:
            try:
                sample.label = int(data.strip())
            except ValueError:
                sample.error = f"unreadable label {data[:20]!r}"
        elif ext == META_EXT:
            sample.meta_bytes = data
        else:
            sample.extra[ext] = data

    @staticmethod
    def _check(sample: RawSample, num_classes: Optional[int] = None) -> None:
        if sample.error:
            return
        if sample.jpeg is None:
            sample.error = f"missing field '{IMAGE_EXT}'"
        elif sample.label is None:
            sample.error = f"missing field '{LABEL_EXT}'"
        elif not 0 <= sample.label <= _INT64_MAX or (num_classes and sample.label >= num_classes):
            limit = f"[0, {num_classes})" if num_classes else "[0, 2**63)"
            sample.error = f"label {sample.label} outside {limit}"
