"""The deterministic shard writer: samples -> one tar and its sample index.

A shard is a plain (uncompressed, USTAR) tar that any WebDataset reader
understands. Each sample has three members sharing one key::

    <key>.cls    label as ASCII decimal ("3")
    <key>.jpg    baseline JPEG, RGB
    <key>.json   {"path": "<class>/<file>", "class": "<name>", "width": W, "height": H}

``width``/``height`` are the original (pre-resize) dimensions. Keys match
:data:`~shardkit.format.members.KEY_PATTERN`: unique within a split, no dots, no
slashes. Members are written in sorted field order with fixed metadata (mtime 0,
mode 0444, owner "shardkit"), byte for byte what ``webdataset.TarWriter`` writes
with these settings, so the same samples always produce byte-identical shards.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from typing import IO, Any, Iterable, Optional

from .index import SampleIndex, build_index
from .members import IMAGE_EXT, KEY_PATTERN, LABEL_EXT, META_EXT, split_member
from .tar import Layout, Member, pad


@dataclass(frozen=True)
class EncodedSample:
    """One sample ready to be written: key, JPEG bytes, label, metadata."""

    key: str
    jpeg: bytes
    label: int
    meta: dict[str, Any]


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


def write_tar(samples: Iterable[EncodedSample], f: IO[bytes]) -> WrittenShard:
    """Write ``samples`` as one tar to the open binary file ``f``, recording where each member lands."""
    hw = _HashingWriter(f)
    layouts: list[Layout] = []
    keys: list[str] = []
    # mtime must be the int 0: a float makes tarfile add a pax header to every member
    # (3 extra 512-byte blocks per sample and twice the headers for readers to parse).
    with tarfile.open(fileobj=hw, mode="w|") as tf:  # type: ignore[call-overload]
        for s in samples:
            if not KEY_PATTERN.match(s.key):
                raise ValueError(f"invalid sample key {s.key!r}: use letters, digits, '_' and '-' only")
            fields = {LABEL_EXT: str(int(s.label)).encode("ascii"), IMAGE_EXT: s.jpeg, META_EXT: meta_bytes(s.meta)}
            start = tf.offset
            members = []
            for ext in sorted(fields):
                data, name = fields[ext], f"{s.key}.{ext}"
                if split_member(name) != (s.key, ext):  # what readers will make of it (KEY_PATTERN ensures it)
                    raise ValueError(f"member {name!r} would not be read back as field {ext!r} of sample {s.key!r}")
                ti = tarfile.TarInfo(name)
                ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = len(data), 0, 0o444, "shardkit", "shardkit"
                at = tf.offset
                tf.addfile(ti, io.BytesIO(data))
                members.append(Member(s.key, ext, len(data), tf.offset - pad(len(data)), at))
            layouts.append(Layout(start, tf.offset, tuple(members)))
            keys.append(s.key)
    hw.flush()
    sha = hw.sha.hexdigest()
    return WrittenShard(len(keys), hw.nbytes, sha, build_index(layouts, keys, hw.nbytes, sha))


def write_shard(samples: Iterable[EncodedSample], f: IO[bytes]) -> tuple[int, int, str]:
    """Write ``samples`` as one tar to the open binary file ``f`` (no index; see :func:`write_tar`).

    Returns:
        ``(samples written, bytes written, sha256 hex digest)``.
    """
    w = write_tar(samples, f)
    return w.samples, w.bytes, w.sha256
