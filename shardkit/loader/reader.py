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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import IO, Any, Optional

from ..shardformat import IMAGE_EXT, LABEL_EXT, META_EXT

_BLOCK = 512
_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")
_FILE_TYPES = (b"0", b"\0", b"7")


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
    if field_[:1] and field_[0] & 0x80:  # base-256 (GNU) for large sizes
        return int.from_bytes(field_[1:], "big")
    s = field_.split(b"\0", 1)[0].strip()
    return int(s, 8) if s else 0


def _pad(n: int) -> int:
    return (n + _BLOCK - 1) // _BLOCK * _BLOCK


def _pax_path(data: bytes) -> Optional[str]:
    path = None
    pos = 0
    while pos < len(data):
        sp = data.find(b" ", pos)
        if sp < 0:
            break
        length = int(data[pos:sp])
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

    def __init__(self, f: IO[bytes], url: str, fields: tuple[str, ...] = (IMAGE_EXT, LABEL_EXT, META_EXT)):
        self.f, self.url, self.fields = f, url, frozenset(fields)
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
            chk = _octal(buf[148:156])
            if chk != sum(buf[:148]) + 256 + sum(buf[156:]):
                raise TarDamage(self.url, at, "header checksum mismatch")
            size = _octal(buf[124:136])
            kind = buf[156:157]
            data_offset = at + _BLOCK
            self.pos = data_offset + _pad(size)
            if kind in (b"x", b"L"):  # pax extended header / GNU long name for the next member
                data = self._read_at(data_offset, size)
                if len(data) < size:
                    raise TarDamage(self.url, data_offset, "truncated extended header")
                long_name = _pax_path(data) if kind == b"x" else data.split(b"\0", 1)[0].decode("utf-8", "replace")
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
            m = _KEY_EXT.match(name)
            if not m or name.split("/")[-1].startswith("__"):
                continue
            return _Member(m.group(1), m.group(2), size, data_offset)

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
            while m is not None and m.key == key:
                if sample is not None and load and m.ext in self.fields:
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
                    self._damage, m = exc, None  # the sample is complete: deliver it, fail on the next read
            self.index += 1
            if sample is not None:
                if load:
                    self._check(sample)
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
    def _check(sample: RawSample) -> None:
        if sample.error:
            return
        if sample.jpeg is None:
            sample.error = f"missing field '{IMAGE_EXT}'"
        elif sample.label is None:
            sample.error = f"missing field '{LABEL_EXT}'"
