"""Pure planning: sample order, keys, shard boundaries, task split, byte packing.

Nothing here does I/O; every function is a pure function of its arguments, so
the same sorted source list and options always give the same plan whatever
``--workers``, ``--num-tasks`` or interruptions happen.

* Keys are the sample's index in sorted source order, zero-padded (no dots).
* Samples are shuffled with ``random.Random(seed)`` (stable across Python
  versions) unless shuffling is off.
* Planned shard ``j`` holds positions ``[j*n, (j+1)*n)`` of that order, where
  ``n`` (:func:`samples_per_shard`) is ``shard_size`` or, with a byte cap, an
  estimate from a deterministic pilot (encoded sizes of up to
  :data:`PILOT_SAMPLES` evenly spread samples), chosen to land at about 90% of
  ``shard_bytes``.
* The byte cap is exact: a planned shard keeps the longest prefix that fits
  (:func:`split_at_cap`, always at least one sample) and its remaining samples
  go to overflow shards numbered after the planned ones (:func:`pack`), which
  are rare with the 90% target.
* Task ``i`` of ``K`` owns planned shards ``j`` with ``j % K == i``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shardkit.convert.scan.source import SourceFile
from shardkit.convert.segments import Segment
from shardkit.format import EncodedSample
from shardkit.format.fields import Objects

#: pilot size used to estimate encoded bytes per sample
PILOT_SAMPLES = 64
#: fraction of ``shard_bytes`` a planned shard aims at
FILL_TARGET = 0.9
_BLOCK = 512
_RECORD = 20 * _BLOCK
_MEMBER_OVERHEAD = _BLOCK  # one USTAR header per member (no pax header: write_shard uses an int mtime)
_END_OF_ARCHIVE = 2 * _BLOCK

T = TypeVar("T")


@dataclass(frozen=True)
class Item:
    """One planned sample: its key index (sorted position) and source item (see :mod:`shardkit.convert.scan.source`)."""

    index: int
    relpath: str
    label: int | None
    size: int
    ref: str = ""
    meta: Mapping[str, Any] | None = None
    labels: tuple[int, ...] | None = None
    target: tuple[float, ...] | None = None
    text: str | None = None
    objects: Objects | None = None
    mask: str | None = None
    segments: tuple[Segment, ...] | None = None
    declared_size: tuple[int, int] | None = None


def key_width(num_files: int) -> int:
    """Digits in a key: 8, more for huge splits."""
    return max(8, len(str(max(0, num_files - 1))))


def make_key(index: int, width: int) -> str:
    """The sample key of sorted position ``index``."""
    return f"{index:0{width}d}"


def order(files: Sequence[SourceFile], seed: int, shuffle: bool) -> list[Item]:
    """Items in shard order: keys from sorted order, then shuffled with ``seed`` if ``shuffle``."""
    ordered = sorted(files, key=lambda f: f.relpath)
    items = [
        Item(
            i,
            f.relpath,
            f.label,
            f.size,
            f.ref,
            f.meta,
            f.labels,
            f.target,
            f.text,
            f.objects,
            f.mask,
            f.segments,
            f.declared_size,
        )
        for i, f in enumerate(ordered)
    ]
    if shuffle:
        random.Random(seed).shuffle(items)
    return items


def pilot_positions(num_items: int, k: int = PILOT_SAMPLES) -> list[int]:
    """Up to ``k`` positions evenly spread over ``range(num_items)``."""
    if num_items <= k:
        return list(range(num_items))
    return sorted({round(i * (num_items - 1) / (k - 1)) for i in range(k)})


def member_bytes(payload: int) -> int:
    """Bytes one tar member takes in a shard written by :func:`shardkit.format.write_shard`."""
    return _MEMBER_OVERHEAD + math.ceil(payload / _BLOCK) * _BLOCK


def sample_bytes(jpeg: int, label: int, meta: int) -> int:
    """Tar bytes of one sample given its member payload sizes."""
    return member_bytes(jpeg) + member_bytes(label) + member_bytes(meta)


def tar_size(sample: EncodedSample) -> int:
    """Tar bytes of ``sample`` in a shard (every member it writes: :meth:`EncodedSample.members`)."""
    return sum(member_bytes(len(data)) for data in sample.members().values())


def shard_bytes_for(sample_total: int) -> int:
    """Size of a shard whose samples take ``sample_total`` bytes (end blocks, record padding)."""
    return math.ceil((sample_total + _END_OF_ARCHIVE) / _RECORD) * _RECORD


def samples_per_shard(
    num_items: int, shard_size: int | None, shard_bytes: int | None, pilot_sizes: Sequence[int]
) -> int:
    """Samples per planned shard from the caps and the pilot's per-sample tar sizes."""
    n = num_items if shard_size is None else shard_size
    if shard_bytes is not None and pilot_sizes:
        mean = sum(pilot_sizes) / len(pilot_sizes)
        usable = shard_bytes * FILL_TARGET - _END_OF_ARCHIVE - _RECORD
        n = min(n, max(1, int(usable // mean)))
    return max(1, min(n, max(1, num_items)))


def shard_ranges(num_items: int, per_shard: int) -> list[tuple[int, int]]:
    """``[start, end)`` positions of each planned shard."""
    return [(s, min(num_items, s + per_shard)) for s in range(0, num_items, per_shard)]


def task_shards(num_shards: int, num_tasks: int, task_index: int) -> list[int]:
    """Planned shards owned by task ``task_index`` of ``num_tasks`` (round robin)."""
    if num_tasks < 1:
        raise ValueError(f"num_tasks must be at least 1, not {num_tasks}")
    if not 0 <= task_index < num_tasks:
        raise ValueError(f"task_index must be in 0..{num_tasks - 1} for num_tasks {num_tasks}, not {task_index}")
    return list(range(task_index, num_shards, num_tasks))


class CapSplit:
    """Streaming :func:`split_at_cap`: feed tar sizes in order; ``True`` while a sample still fits the shard."""

    def __init__(self, shard_bytes: int | None):
        self.shard_bytes, self.total, self.count, self.full = shard_bytes, 0, 0, False

    def fits(self, size: int) -> bool:
        if (
            self.shard_bytes is not None
            and self.count > 0
            and (self.full or shard_bytes_for(self.total + size) > self.shard_bytes)
        ):
            self.full = True  # a prefix: once one sample is beyond the cap, all later ones are too
            return False
        self.total, self.count = self.total + size, self.count + 1
        return True


def split_at_cap(sizes: Sequence[int], shard_bytes: int | None) -> int:
    """How many leading samples (tar sizes ``sizes``) fit under ``shard_bytes``; at least one."""
    cap = CapSplit(shard_bytes)
    return sum(cap.fits(s) for s in sizes)


def pack(sizes: Sequence[int], shard_size: int | None, shard_bytes: int | None) -> list[tuple[int, int]]:
    """Greedy ``[start, end)`` groups of consecutive samples under both caps (each group non-empty)."""
    groups, start, total = [], 0, 0
    for i, s in enumerate(sizes):
        full = shard_size is not None and i - start >= shard_size
        over = shard_bytes is not None and i > start and shard_bytes_for(total + s) > shard_bytes
        if full or over:
            groups.append((start, i))
            start, total = i, 0
        total += s
    if start < len(sizes):
        groups.append((start, len(sizes)))
    return groups
