"""Read the samples of one shard sequentially by walking its tar headers, skipping forward without reading data.

Why a tar header walker of our own: webdataset's ``tar_file_iterator`` (like
``tarfile`` in stream mode) can only go forward by reading every member's
data. Resuming mid-epoch and splitting a shard between workers need "jump to
sample ``i``" without reading, let alone decoding, samples ``0 .. i-1``. This
walker reads one 512-byte header per member and seeks over the data it does
not need (a local seek, or a forward seek in fsspec's read-ahead file). It is
the fallback of the sample index (:mod:`shardkit.format.index`) and the only
reader for datasets without one and for damaged shards.

Only regular-file members are considered; they are grouped into samples by
:func:`shardkit.format.members.split_member` (the one member rule, shared with
``verify``); only the ``jpg``, ``cls`` and ``json`` fields are read, everything
else is skipped unread and never unpickled. A damaged or truncated tar raises
:class:`TarDamage` naming the shard and byte offset; the samples before the
damage have already been delivered.

Hostile shards: names are only strings here (the reader never creates a
file); absolute and ``..`` names, and keys seen before in the shard, make
their sample unusable; links, devices and directories are not sample members;
a field that repeats within one key starts a new sample (two samples are never
merged into one); sizes are checked before anything is allocated or sought (a
member to load is at most :data:`MAX_MEMBER_BYTES`, a ``.cls`` 64 bytes, a
``.json`` 1 MiB: :func:`~shardkit.format.sample.size_error`; an extended header at
most :data:`MAX_HEADER_BYTES`; any member less than :data:`MAX_SIZE`); a pax
``size`` record overrides the size field, as in tarfile; malformed numbers and pax
records are :class:`TarDamage`, never another error.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import IO, Optional

from shardkit.format.members import UnsafeName, duplicate_key_error, split_member
from shardkit.format.sample import (
    FIELD_LIMITS,
    LOADED_EXTS,
    MAX_MEMBER_BYTES,  # noqa: F401 - re-exported: the limit the walk applies
    RawSample,
    SampleRule,
    check_sample,
    size_error,
    store_field,
)

BLOCK = 512
#: type flags of regular-file members (the only ones that can be sample members)
FILE_TYPES = (b"0", b"\0", b"7")
#: bytes of a header's name field (longer names need a USTAR prefix, a pax or a GNU long-name header)
NAME_FIELD = 100
#: largest pax extended header or GNU long name accepted
MAX_HEADER_BYTES = 1 << 16
#: largest member size a header may state (the manifest's limit on a shard's size): a bigger one is damage,
#: not a seek past what a file offset can hold (base-256 sizes reach 2**88)
MAX_SIZE = 1 << 40
_ADLER_MOD = 65521


class TarDamage(Exception):
    """The tar is corrupt or truncated at ``offset`` bytes."""

    def __init__(self, url: str, offset: int, what: str):
        super().__init__(f"{url}: damaged tar at byte {offset}: {what}")
        self.url, self.offset, self.what = url, offset, what


@dataclass(slots=True)
class Member:
    """One sample member as found by the walk: its field, where its data lies, and where its headers begin."""

    key: str
    ext: str
    size: int
    data_offset: int
    start: int  #: offset of the first header (pax / long name included) of this member
    unsafe: Optional[str] = None  #: why the name is damage (:class:`UnsafeName`), or ``None``


@dataclass(slots=True)
class SampleSpan:
    """Where the sample last read lies: bytes ``[start, end)`` of the shard and its members in order."""

    start: int
    end: int
    members: tuple[Member, ...]


def octal(field_: bytes) -> int:
    """A numeric header field (octal, or GNU base-256); ``ValueError`` if malformed."""
    if field_[:1] and field_[0] & 0x80:  # base-256 (GNU) for large sizes
        if field_[0] != 0x80:
            raise ValueError("negative base-256 number")
        return int.from_bytes(field_[1:], "big")
    s = field_.split(b"\0", 1)[0].strip()
    if s.translate(None, b"01234567"):  # any byte that is not an octal digit
        raise ValueError(f"not an octal number: {s[:20]!r}")
    return int(s, 8) if s else 0


def header_sum(buf: bytes) -> int:
    """The tar checksum of a header (its bytes summed, the checksum field read as spaces), modulo 65521.

    zlib's Adler-32 keeps ``1 + sum(bytes) mod 65521`` in its low half: one C call
    instead of summing 512 bytes in Python. A header sum is at most 130,560, so only
    damage that shifts it by exactly 65,521 would go unnoticed.
    """
    return (zlib.adler32(buf) & 0xFFFF) - 1 - sum(buf[148:156]) + 256


def header_ok(buf: bytes) -> bool:
    """True if the 512-byte header ``buf`` has a well-formed, matching checksum."""
    try:
        return (octal(buf[148:156]) - header_sum(buf)) % _ADLER_MOD == 0
    except ValueError:
        return False


def pad(n: int) -> int:
    """``n`` rounded up to whole 512-byte tar blocks."""
    return (n + BLOCK - 1) // BLOCK * BLOCK


def _pax_records(data: bytes) -> tuple[Optional[str], Optional[int]]:
    """The ``path`` and ``size`` records of a pax extended header; ``ValueError`` if the records are malformed."""
    path = size = None
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
        elif k == b"size":  # overrides the header's size field (members over 8 GiB), as in tarfile
            if not v.isdigit() or len(v) > 20:
                raise ValueError(f"malformed pax size {v[:20]!r}")
            size = int(v)
        pos += length
    return path, size


def member_name(buf: bytes) -> str:
    """The name in a USTAR (or old-style) header block."""
    name = buf[0:NAME_FIELD].split(b"\0", 1)[0].decode("utf-8", "replace")
    if buf[257:262] == b"ustar":
        prefix = buf[345:500].split(b"\0", 1)[0].decode("utf-8", "replace")
        if prefix:
            name = prefix + "/" + name
    return name


class ShardReader:
    """Forward-only sample reader over an open binary file of one shard.

    Args:
        f: a seekable binary file (local file or fsspec file).
        url: the shard's URL (for messages).
        num_classes: labels outside ``[0, num_classes)`` make the sample unusable.
        rule: the dataset's :class:`~shardkit.format.sample.SampleRule` (its fields); wins over ``num_classes``.
    """

    def __init__(self, f: IO[bytes], url: str, *, num_classes: Optional[int] = None, rule: Optional[SampleRule] = None):
        self.f, self.url = f, url
        self.rule = rule if rule is not None else SampleRule(num_classes=num_classes)
        self.pos = 0  #: byte offset of the next header to parse
        self.index = 0  #: index of the next sample
        self.bytes_read = 0  #: bytes actually read (headers + kept members)
        self.layout: Optional[SampleSpan] = None  #: where the sample last returned by :meth:`read` lies
        self._keys: set[str] = set()
        self._pending: Optional[Member] = None
        self._eof = False
        self._damage: Optional[TarDamage] = None

    def close(self) -> None:
        self.f.close()

    def _read_at(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        data = self.f.read(n)
        self.bytes_read += len(data)
        return data

    def _next_header(self) -> Optional[Member]:
        """Parse headers from ``pos`` until a regular file member with a key and extension."""
        long_name: Optional[str] = None
        pax_size: Optional[int] = None
        start = self.pos
        while True:
            at = self.pos
            buf = self._read_at(at, BLOCK)
            if not buf:
                raise TarDamage(self.url, at, "file ends without the end-of-archive marker (truncated)")
            if len(buf) < BLOCK:
                raise TarDamage(self.url, at, "truncated header")
            if buf.count(0) == BLOCK:
                self.pos = at
                return None  # end-of-archive marker
            try:
                chk = octal(buf[148:156])
                size = octal(buf[124:136])
            except ValueError as exc:
                raise TarDamage(self.url, at, f"malformed header ({exc})") from None
            if (chk - header_sum(buf)) % _ADLER_MOD:
                raise TarDamage(self.url, at, "header checksum mismatch")
            kind = buf[156:157]
            if pax_size is not None and kind not in (b"x", b"L"):
                size, pax_size = pax_size, None
            if size >= MAX_SIZE:
                raise TarDamage(self.url, at, f"member size {size} beyond any shard (limit {MAX_SIZE})")
            data_offset = at + BLOCK
            self.pos = data_offset + pad(size)
            if kind in (b"x", b"L"):  # pax extended header / GNU long name for the next member
                if size > MAX_HEADER_BYTES:
                    raise TarDamage(self.url, at, f"extended header of {size} bytes (limit {MAX_HEADER_BYTES})")
                data = self._read_at(data_offset, size)
                if len(data) < size:
                    raise TarDamage(self.url, data_offset, "truncated extended header")
                try:
                    if kind == b"x":
                        long_name, pax_size = _pax_records(data)
                    else:
                        long_name = data.split(b"\0", 1)[0].decode("utf-8", "replace")
                except ValueError as exc:
                    raise TarDamage(self.url, data_offset, f"malformed pax header ({exc})") from None
                continue
            if kind not in FILE_TYPES:  # directories, links, global headers...: not sample members
                long_name, start = None, self.pos
                continue
            name = long_name if long_name is not None else member_name(buf)
            long_name = None
            try:
                ke = split_member(name)
            except UnsafeName as exc:
                return Member(exc.key, exc.ext, size, data_offset, start, str(exc))
            if ke is None:
                start = self.pos
                continue
            return Member(ke[0], ke[1], size, data_offset, start)

    def _peek(self) -> Optional[Member]:
        if self._pending is None and not self._eof:
            self._pending = self._next_header()
            self._eof = self._pending is None
        return self._pending

    def read(self, index: int, gid: int = -1) -> Optional[RawSample]:
        """Sample ``index`` of the shard (forward only), or ``None`` if the shard ends first.

        Samples between the current position and ``index`` are skipped by
        walking their headers only.

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
            if key in self._keys and sample is not None:
                sample.error = duplicate_key_error(key)
            self._keys.add(key)
            damage: Optional[TarDamage] = None
            members: list[Member] = []
            exts: set[str] = set()
            while m is not None and m.key == key and m.ext not in exts:  # a repeated field starts a new sample
                exts.add(m.ext)
                members.append(m)
                if sample is not None:
                    if m.unsafe is not None:
                        sample.error = sample.error or m.unsafe
                    elif m.ext not in LOADED_EXTS:
                        pass  # foreign member: skipped unread
                    elif m.size > FIELD_LIMITS[m.ext]:
                        sample.error = sample.error or size_error(key, m.ext, m.size)
                    else:
                        data = self._read_at(m.data_offset, m.size)
                        if len(data) < m.size:
                            raise TarDamage(self.url, m.data_offset + len(data), f"truncated member {key}.{m.ext}")
                        store_field(sample, m.ext, data)
                self._pending = None
                end = self.pos
                try:
                    m = self._peek()
                except TarDamage as exc:
                    if sample is None:
                        raise
                    self._damage, m, damage = exc, None, exc  # deliver the sample if complete, fail on the next read
            self.index += 1
            if sample is not None:
                self.layout = SampleSpan(members[0].start, end, tuple(members))
                check_sample(sample, self.rule)
                if sample.error and damage is not None:
                    sample.error = str(damage)  # incomplete because of the damage: say so
                return sample
