"""The deterministic shard writer: samples -> one tar and its sample index.

A shard is a plain (uncompressed, USTAR) tar that any WebDataset reader
understands. Each sample has these members sharing one key (the stored fields of
:mod:`shardkit.format.fields`; ``.cls`` only in a dataset with ``label``, the last three
only in datasets with those fields)::

    <key>.cls          label as ASCII decimal ("3")
    <key>.jpg          baseline JPEG, RGB
    <key>.json         {"path": "<class>/<file>", "class": "<name>", "width": W, "height": H}
    <key>.labels.json  the sorted class indices of a multi-label sample, compact JSON ("[0,3]")
    <key>.target.json  the target values, JSON with repr-exact floats ("[0.5,-1.25]")
    <key>.txt          the text, UTF-8

``width``/``height`` are the original (pre-resize) dimensions. Keys match
:data:`~shardkit.format.members.KEY_PATTERN`: unique within a split, no dots, no
slashes. Members are written in sorted field order with fixed metadata (mtime 0,
mode 0444, owner "shardkit"), byte for byte what ``webdataset.TarWriter`` (and
``tarfile``) write with these settings, so the same samples always produce
byte-identical shards.

The 512-byte USTAR headers are filled in from one template (name, size and
checksum change per member) rather than built by ``tarfile``, whose pax checks
were most of the converting main process's CPU; a member that needs a pax header
(a name over 100 bytes or not ASCII, a size of 8 GiB or more) gets ``tarfile``'s
own header, so the bytes are the same either way.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, Optional

from shardkit.format.checksum import crc32c
from shardkit.format.fields import (
    INSTANCES_EXT,
    LABELS_EXT,
    MASK_EXT,
    OBJECTS_EXT,
    TARGET_EXT,
    TEXT_EXT,
    Objects,
    labels_bytes,
    objects_bytes,
    target_bytes,
    text_bytes,
)
from shardkit.format.index import SampleIndex
from shardkit.format.indexio import build_index
from shardkit.format.members import IMAGE_EXT, KEY_PATTERN, LABEL_EXT, META_EXT, split_member
from shardkit.format.tar import BLOCK, Member, SampleSpan, pad


@dataclass(frozen=True)
class EncodedSample:
    """One sample ready to be written: key, JPEG bytes, label, metadata and the other stored fields.

    Attributes:
        key: sample key (:data:`~shardkit.format.members.KEY_PATTERN`).
        jpeg: the image.
        label: class index (``.cls``); ``None`` in a dataset without ``label``.
        meta: the ``.json`` member's fields.
        labels: class indices of a multi-label sample (``.labels.json``, written sorted).
        target: target values (``.target.json``).
        text: text (``.txt``).
        objects: boxes, box classes and keypoints (``.objects.json``).
        mask: the mask's PNG bytes (``.mask.png``: :func:`shardkit.format.masks.mask_bytes`).
        instances: the instance map's PNG bytes (``.instances.png``: :func:`shardkit.format.masks.instances_bytes`).
    """

    key: str
    jpeg: bytes
    label: Optional[int]
    meta: dict[str, Any]
    labels: Optional[tuple[int, ...]] = None
    target: Optional[tuple[float, ...]] = None
    text: Optional[str] = None
    objects: Optional[Objects] = None
    mask: Optional[bytes] = None
    instances: Optional[bytes] = None

    def members(self) -> dict[str, bytes]:
        """``{extension: bytes}`` of every member this sample writes (the one encoding of each field).

        Raises:
            ValueError: a field value its member cannot hold (see :mod:`shardkit.format.fields`).
        """
        out = {IMAGE_EXT: self.jpeg, META_EXT: meta_bytes(self.meta)}
        if self.label is not None:
            out[LABEL_EXT] = str(int(self.label)).encode("ascii")
        if self.labels is not None:
            out[LABELS_EXT] = labels_bytes(self.labels)
        if self.target is not None:
            out[TARGET_EXT] = target_bytes(self.target)
        if self.text is not None:
            out[TEXT_EXT] = text_bytes(self.text)
        if self.objects is not None:
            out[OBJECTS_EXT] = objects_bytes(self.objects)
        if self.mask is not None:
            out[MASK_EXT] = self.mask
        if self.instances is not None:
            out[INSTANCES_EXT] = self.instances
        return out


@dataclass(frozen=True)
class WrittenShard:
    """What :func:`write_tar` wrote: sample count, bytes, sha256 and the sample index (``None``: not indexable)."""

    samples: int
    bytes: int
    sha256: str
    index: Optional[SampleIndex]


class _HashingWriter:
    """File-like wrapper that hashes and counts what passes through it."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def write(self, b: bytes) -> int:
        self.sha.update(b)
        self.nbytes += len(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.nbytes


def meta_bytes(meta: dict[str, Any]) -> bytes:
    """Canonical JSON encoding of sample metadata (sorted keys, UTF-8).

    A string that UTF-8 cannot hold (a file name that was not valid UTF-8, decoded with
    ``surrogateescape``) makes the whole member ASCII with ``\\u`` escapes, which JSON holds and
    which parses back to the same string; every other member stays byte for byte as before.
    """
    try:
        return json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(meta, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    # mtime must be the int 0: a float makes tarfile add a pax header to every member
    # (3 extra 512-byte blocks per sample and twice the headers for readers to parse).
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = size, 0, 0o444, "shardkit", "shardkit"
    return ti


def _tarfile_header(name: str, size: int) -> bytes:
    """The header(s) ``tarfile`` writes for this member in a ``mode="w|"`` archive (pax ones included)."""
    return _tarinfo(name, size).tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


_NAME, _SIZE, _CHKSUM = slice(0, 100), slice(124, 136), slice(148, 156)
#: tarfile's USTAR header for these members with the name cleared and the checksum field blank
_TEMPLATE = bytearray(_tarfile_header("x", 0))
_TEMPLATE[_NAME] = bytes(100)
_TEMPLATE[_CHKSUM] = b" " * 8
_MAX_USTAR_SIZE = 8**11  # tarfile writes larger sizes in a pax header


def member_header(name: str, size: int) -> bytes:
    """The tar header(s) for a member ``name`` of ``size`` bytes: exactly what ``tarfile`` writes."""
    if not name.isascii() or len(name) > 100 or size >= _MAX_USTAR_SIZE:
        return _tarfile_header(name, size)
    h = bytearray(_TEMPLATE)
    h[: len(name)] = name.encode("ascii")
    h[_SIZE] = b"%011o\0" % size
    h[148:155] = b"%06o\0" % sum(h)  # the checksum counts its own field as 8 spaces; the 8th byte stays a space
    return bytes(h)


def write_tar(samples: Iterable[EncodedSample], f: IO[bytes]) -> WrittenShard:
    """Write ``samples`` as one tar to the open binary file ``f``, recording where each member lands."""
    hw = _HashingWriter(f)
    layouts: list[SampleSpan] = []
    keys: list[str] = []
    crcs: list[int] = []
    offset = 0
    for s in samples:
        if not KEY_PATTERN.match(s.key):
            raise ValueError(f"invalid sample key {s.key!r}: use letters, digits, '_' and '-' only")
        fields = s.members()
        start = offset
        members = []
        parts: list[bytes] = []
        for ext in sorted(fields):
            data, name = fields[ext], f"{s.key}.{ext}"
            if split_member(name) != (s.key, ext):  # what readers will make of it (KEY_PATTERN ensures it)
                raise ValueError(f"member {name!r} would not be read back as field {ext!r} of sample {s.key!r}")
            header = member_header(name, len(data))
            members.append(Member(s.key, ext, len(data), offset + len(header), offset))
            parts += (header, data, bytes(pad(len(data)) - len(data)))
            offset += len(header) + pad(len(data))
        sample_bytes = b"".join(parts)
        hw.write(sample_bytes)  # one write per sample
        crcs.append(crc32c(sample_bytes))
        layouts.append(SampleSpan(start, offset, tuple(members)))
        keys.append(s.key)
    end = offset + 2 * BLOCK  # two zero blocks end the archive; tarfile then pads to whole records
    hw.write(bytes(2 * BLOCK + (-end) % tarfile.RECORDSIZE))
    hw.flush()
    sha = hw.sha.hexdigest()
    return WrittenShard(len(keys), hw.nbytes, sha, build_index(layouts, keys, hw.nbytes, sha, crcs))


def write_shard(samples: Iterable[EncodedSample], f: IO[bytes]) -> tuple[int, int, str]:
    """Write ``samples`` as one tar to the open binary file ``f`` (no index; see :func:`write_tar`).

    Returns:
        ``(samples written, bytes written, sha256 hex digest)``.
    """
    w = write_tar(samples, f)
    return w.samples, w.bytes, w.sha256
