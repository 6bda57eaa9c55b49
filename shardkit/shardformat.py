"""The on-disk sample format and the deterministic shard writer.

A shard is a plain (uncompressed, USTAR) tar that any WebDataset reader
understands. Each sample has three members sharing one key::

    <key>.cls    label as ASCII decimal ("3")
    <key>.jpg    baseline JPEG, RGB
    <key>.json   {"path": "<class>/<file>", "class": "<name>", "width": W, "height": H}

``width``/``height`` are the original (pre-resize) dimensions. Keys match
:data:`KEY_PATTERN`: unique within a split, no dots, no slashes. Members are
written with fixed metadata (mtime 0, mode 0444, owner "shardkit") so the same
samples always produce byte-identical shards.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import IO, Any, Iterable

IMAGE_EXT = "jpg"
LABEL_EXT = "cls"
META_EXT = "json"
#: the member extensions a shardkit sample holds; readers ignore every other member
SAMPLE_EXTS = (LABEL_EXT, IMAGE_EXT, META_EXT)
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


@dataclass(frozen=True)
class EncodedSample:
    """One sample ready to be written: key, JPEG bytes, label, metadata."""

    key: str
    jpeg: bytes
    label: int
    meta: dict[str, Any]


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
    """Canonical JSON encoding of sample metadata (sorted keys, UTF-8)."""
    return json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def write_shard(samples: Iterable[EncodedSample], f: IO[bytes]) -> tuple[int, int, str]:
    """Write ``samples`` as one tar to the open binary file ``f``.

    Returns:
        ``(samples written, bytes written, sha256 hex digest)``.
    """
    import webdataset as wds

    hw = _HashingWriter(f)
    count = 0
    # mtime must be the int 0: a float makes tarfile add a pax header to every member
    # (3 extra 512-byte blocks per sample and twice the headers for readers to parse).
    with wds.TarWriter(hw, user="shardkit", group="shardkit", mode=0o444, encoder=False, mtime=0) as tw:
        for s in samples:
            if not KEY_PATTERN.match(s.key):
                raise ValueError(f"invalid sample key {s.key!r}: use letters, digits, '_' and '-' only")
            tw.write(
                {
                    "__key__": s.key,
                    LABEL_EXT: str(int(s.label)).encode("ascii"),
                    IMAGE_EXT: s.jpeg,
                    META_EXT: meta_bytes(s.meta),
                }
            )
            count += 1
    hw.flush()
    return count, hw.nbytes, hw.sha.hexdigest()


def sha256_file(f: IO[bytes], chunk: int = 8 << 20) -> tuple[int, str]:
    """``(size, sha256)`` of an open binary file, read to the end."""
    sha = hashlib.sha256()
    n = 0
    while b := f.read(chunk):
        sha.update(b)
        n += len(b)
    return n, sha.hexdigest()
