"""A split's key table and per-sample table: what each sample is and where it lies, without opening a shard.

Two small files per split and generation, written by ``shardkit convert`` (and ``shardkit index`` for a
dataset written before them) next to the shards, before the manifest that names them:

* the key table ``<split>-g<generation:06d>.keys`` (:class:`KeyTable`, format ``keys-1``), little-endian
  binary: a header (magic ``SKKEYS01``, samples ``n``, key width ``w``, shards, generation), the ``n`` keys
  as UTF-8 NUL-padded to ``w`` bytes and **sorted** (a lookup is one binary search, no per-key object in
  memory), then uint32 ``shard [n]`` and uint32 ``position [n]`` in the same order, and a CRC-32 of
  everything before it. The row of a key names its shard (index in the manifest) and its position in it.
* the per-sample table ``<split>-g<generation:06d>.samples.jsonl.gz`` (format ``samples-1``): gzip (no
  name, mtime 0: the same samples give the same bytes) of JSON lines; the first line a header
  ``{"format": "shardkit-samples", "version": 1, "split", "generation", "source_hash"}``, then one row per
  sample in the split's order: ``key``, ``class`` (its class name; ``null`` without a single label),
  ``path`` (the source's relative path), ``width`` and ``height`` (the source image's), ``source_sha256``
  (sha256 of the source file's bytes; ``""`` when the converter did not have them, and the header's
  ``source_hash`` is then ``""`` too) and ``meta`` (every other metadata field).

The manifest's optional ``tables`` entry (:func:`table_entry`) names both files with their size and
sha256; a reader checks both before using a byte of them. Why these formats: ``docs/design/tables.md``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from shardkit.errors import ShardkitError

#: the manifest ``tables.format`` this shardkit writes and reads
TABLES_FORMAT = "tables-1"
KEYS_SUFFIX = ".keys"
SAMPLES_SUFFIX = ".samples.jsonl.gz"
SAMPLES_FORMAT = "shardkit-samples"
SAMPLES_VERSION = 1
#: the hash the ``source_sha256`` column holds
SOURCE_HASH = "sha256"
#: the command that builds the tables (and missing sample indexes) of a dataset written before them
BUILD_COMMAND = "shardkit index"
#: metadata keys that are columns of their own in the per-sample table
COLUMNS = ("class", "path", "width", "height")
_MAGIC = b"SKKEYS01"
_HEAD = struct.Struct("<8sIIII")  # magic, n, key width, shards, generation
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TableError(ShardkitError):
    """A split's key or per-sample table is missing, damaged, or describes other shards."""


def keys_name(split: str, generation: int = 0) -> str:
    """File name of the key table of ``split``'s ``generation``."""
    return f"{split}-g{generation:06d}{KEYS_SUFFIX}"


def samples_name(split: str, generation: int = 0) -> str:
    """File name of the per-sample table of ``split``'s ``generation``."""
    return f"{split}-g{generation:06d}{SAMPLES_SUFFIX}"


def is_table_name(split: str, name: str) -> bool:
    """Whether ``name`` is named like a table of ``split`` (any generation)."""
    return bool(
        re.fullmatch(rf"{re.escape(split)}-g\d{{6}}(?:{re.escape(KEYS_SUFFIX)}|{re.escape(SAMPLES_SUFFIX)})", name)
    )


@dataclass(frozen=True, eq=False)
class KeyTable:
    """Key -> (shard, position) of one split (see the module docstring); rows sorted by key."""

    keys: np.ndarray  #: ``S<w>`` [n], sorted
    shard: np.ndarray  #: uint32 [n]
    position: np.ndarray  #: uint32 [n]
    num_shards: int
    generation: int = 0

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def build(cls, shard_keys: Sequence[Sequence[str]], generation: int = 0) -> "KeyTable":
        """The table of a split whose shard ``j`` holds the keys ``shard_keys[j]`` in order.

        Raises:
            TableError: a key is empty, holds a NUL, or appears twice.
        """
        flat = [k for ks in shard_keys for k in ks]
        shard = np.fromiter((j for j, ks in enumerate(shard_keys) for _ in ks), np.uint32, len(flat))
        position = np.fromiter((p for ks in shard_keys for p in range(len(ks))), np.uint32, len(flat))
        enc = [k.encode("utf-8") for k in flat]
        if any(not k or b"\0" in k for k in enc):
            raise TableError("a sample key is empty or holds a NUL byte")
        width = max((len(k) for k in enc), default=1)
        arr = np.array(enc, dtype=f"S{width}") if enc else np.zeros(0, "S1")
        order = np.argsort(arr, kind="stable")
        arr = arr[order]
        if len(arr) > 1 and bool(np.any(arr[1:] == arr[:-1])):
            dup = arr[1:][arr[1:] == arr[:-1]][0].decode("utf-8")
            raise TableError(f"sample key {dup!r} appears twice in the split")
        return cls(arr, shard[order], position[order], len(shard_keys), generation)

    def find(self, key: str) -> Optional[tuple[int, int]]:
        """``(shard, position)`` of ``key``, or ``None``: one binary search."""
        kb = key.encode("utf-8")
        if not kb or len(kb) > self.keys.dtype.itemsize or b"\0" in kb:
            return None
        i = int(np.searchsorted(self.keys, np.array(kb, dtype=self.keys.dtype)))
        if i < len(self.keys) and self.keys[i] == kb:
            return int(self.shard[i]), int(self.position[i])
        return None

    def in_order(self, shard_offsets: np.ndarray) -> list[str]:
        """Every key in the split's order (shard by shard, position by position); ``shard_offsets``: the first
        global index of each shard."""
        gid = shard_offsets[self.shard.astype(np.int64)] + self.position.astype(np.int64)
        return [k.decode("utf-8") for k in self.keys[np.argsort(gid, kind="stable")].tolist()]

    def to_bytes(self) -> bytes:
        """The file's bytes."""
        width = self.keys.dtype.itemsize
        body = b"".join(
            [
                _HEAD.pack(_MAGIC, len(self.keys), width, self.num_shards, self.generation),
                self.keys.tobytes(),
                self.shard.astype("<u4").tobytes(),
                self.position.astype("<u4").tobytes(),
            ]
        )
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes, url: str = "<keys>") -> "KeyTable":
        """Parse and check a key table; :class:`TableError` naming ``url`` if it is unusable."""
        if len(data) < _HEAD.size + 4 or zlib.crc32(data[:-4]) != struct.unpack("<I", data[-4:])[0]:
            raise TableError(f"{url}: not a key table or damaged (CRC mismatch)")
        magic, n, width, shards, generation = _HEAD.unpack_from(data)
        if magic != _MAGIC or width < 1 or len(data) != _HEAD.size + n * (width + 8) + 4:
            raise TableError(f"{url}: not a shardkit key table (magic {magic!r}, {len(data)} bytes for {n} keys)")
        pos = _HEAD.size
        keys = np.frombuffer(data, f"S{width}", n, pos).copy()
        shard = np.frombuffer(data, "<u4", n, pos + n * width).astype(np.uint32)
        position = np.frombuffer(data, "<u4", n, pos + n * width + 4 * n).astype(np.uint32)
        if n > 1 and bool(np.any(keys[1:] <= keys[:-1])):
            raise TableError(f"{url}: keys not sorted or repeated")
        if n and int(shard.max()) >= max(shards, 1):
            raise TableError(f"{url}: a row names shard {int(shard.max())} of {shards}")
        return cls(keys, shard, position, shards, generation)

    def check(self, shard_sizes: Sequence[int], url: str) -> None:
        """:class:`TableError` unless the rows are exactly every position of every shard of ``shard_sizes``."""
        if self.num_shards != len(shard_sizes) or len(self) != sum(shard_sizes):
            raise TableError(
                f"{url}: describes {len(self)} samples in {self.num_shards} shards, the manifest "
                f"{sum(shard_sizes)} in {len(shard_sizes)}"
            )
        sizes = np.asarray(shard_sizes, np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        gid = offsets[self.shard.astype(np.int64)] + self.position.astype(np.int64)
        if bool(np.any(self.position.astype(np.int64) >= sizes[self.shard.astype(np.int64)])) or len(
            np.unique(gid)
        ) != len(gid):
            raise TableError(f"{url}: rows name positions outside their shard, or one position twice")


def sample_row(key: str, meta: dict[str, Any], source_sha256: str = "") -> dict[str, Any]:
    """The per-sample table's row of a sample with metadata ``meta`` (its ``.json`` member)."""
    rest = {k: v for k, v in meta.items() if k not in COLUMNS}
    return {
        "key": key,
        "class": meta.get("class"),
        "path": meta.get("path", ""),
        "width": meta.get("width"),
        "height": meta.get("height"),
        "source_sha256": source_sha256,
        "meta": rest,
    }


def samples_bytes(split: str, rows: Iterable[dict[str, Any]], generation: int = 0) -> bytes:
    """The per-sample table file of ``rows`` (in the split's order); the header says whether every row
    has its source hash."""
    rows = list(rows)
    hashed = bool(rows) and all(r.get("source_sha256") for r in rows)
    head = {
        "format": SAMPLES_FORMAT,
        "version": SAMPLES_VERSION,
        "split": split,
        "generation": generation,
        "source_hash": SOURCE_HASH if hashed else "",
    }
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="", compresslevel=6) as gz:
        for obj in [head, *rows]:
            gz.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8"))
            gz.write(b"\n")
    return buf.getvalue()


def read_samples_table(data: bytes, url: str = "<samples>") -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """``(header, rows)`` of a per-sample table file; :class:`TableError` naming ``url`` if it is unusable."""
    try:
        lines = gzip.decompress(data).split(b"\n")
        head = json.loads(lines[0])
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise TableError(f"{url}: not a per-sample table or damaged ({exc})") from None
    if not isinstance(head, dict) or head.get("format") != SAMPLES_FORMAT or head.get("version") != SAMPLES_VERSION:
        raise TableError(f"{url}: not a shardkit per-sample table of version {SAMPLES_VERSION}")
    return head, (json.loads(x) for x in lines[1:] if x)


def digest(data: bytes) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of a table file, as the manifest records it."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def table_entry(split: str, keys: bytes, samples: bytes, generation: int = 0) -> dict[str, Any]:
    """The manifest's ``tables`` value naming the two files of ``split``'s ``generation``."""
    return {
        "format": TABLES_FORMAT,
        "generation": generation,
        "keys": {"name": keys_name(split, generation), **digest(keys)},
        "samples": {"name": samples_name(split, generation), **digest(samples)},
    }


def tables_error(tables: dict[str, Any]) -> Optional[str]:
    """Why a manifest's ``tables`` value is malformed (``{}``: none), or ``None``."""
    if not tables or tables.get("format") != TABLES_FORMAT:  # another format: a reader of the tables says so
        return None
    gen = tables.get("generation")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        return f"tables generation {gen!r} is not a count"
    for part in ("keys", "samples"):
        e = tables.get(part)
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("name"), str)
            or not _NAME.fullmatch(e["name"])
            or ".." in e["name"]
            or not isinstance(e.get("bytes"), int)
            or not isinstance(e.get("sha256"), str)
            or not _HEX64.fullmatch(e["sha256"])
        ):
            return f"tables entry {part!r} is not {{name (a plain file name), bytes, sha256}}"
    return None


def checked(data: bytes, entry: dict[str, Any], url: str) -> bytes:
    """``data`` if it has the size and sha256 ``entry`` records, else :class:`TableError` naming ``url``."""
    if digest(data) != {"bytes": entry["bytes"], "sha256": entry["sha256"]}:
        raise TableError(
            f"{url}: size or sha256 differs from the manifest (the table changed or is damaged); "
            f"rebuild it with `{BUILD_COMMAND} DATASET`"
        )
    return data


__all__ = [
    "BUILD_COMMAND",
    "KEYS_SUFFIX",
    "SAMPLES_SUFFIX",
    "TABLES_FORMAT",
    "KeyTable",
    "TableError",
    "checked",
    "is_table_name",
    "keys_name",
    "read_samples_table",
    "sample_row",
    "samples_bytes",
    "samples_name",
    "table_entry",
    "tables_error",
]
