"""The read schedule as pure functions: which byte ranges a block read asks the store for.

:class:`~shardkit.loader.read.blocks.BlockReader` calls these for its requests, and ``shardkit simulate``
replays them for a whole cluster, so the two cannot drift apart:

* **Sample index** (:func:`index_groups`, :func:`index_ranges`): the samples of one block and shard,
  as runs of consecutive samples cut into pieces of at most ``max_range`` bytes (:func:`pieces`);
  neighbouring pieces are joined into one range read across a hole of at most ``max_hole`` bytes
  (samples consumed before a resume) while the read stays within ``max_range`` bytes.
* **Header walk** (:func:`walk_gets`): the tar headers and loaded members that
  :class:`~shardkit.format.tar.ShardReader` touches when it reads samples ``first .. stop-1``
  (skipping the samples before ``first`` by their headers), seen through an ``io.BufferedReader``
  of ``block_size`` bytes (:func:`buffered_read`, a model of CPython's C implementation): the GETs
  ``[lo, hi)`` it sends. Samples have one :class:`SampleLayout` (uniform samples; the simulator's
  assumption, exact for a dataset whose samples all have the same member sizes).
* **Cache download** (:func:`download_gets`): a shard copied whole into the node-local cache
  through the same buffered reader, in 8 MiB chunks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

#: holes (consumed samples on resume) up to this many bytes are read through rather than split into two range reads
MAX_HOLE_BYTES = 1 << 20
#: largest range read: a block of more bytes takes several
MAX_RANGE_BYTES = 64 << 20
#: a tar header block
HEADER = 512
#: the chunk ``shardkit.storage.cache.copy_stream`` copies a shard into the cache with
COPY_CHUNK = 8 << 20


# ---------------------------------------------------------------------------------------------- the sample index


def pieces(starts: np.ndarray, i: int, j: int, limit: int) -> list[tuple[int, int]]:
    """Samples ``i .. j-1`` (sample ``s`` is bytes ``[starts[s], starts[s+1])``) cut into runs of at most
    ``limit`` bytes (at least one sample each)."""
    out = []
    su = np.asarray(starts)
    while i < j:
        k = min(max(int(np.searchsorted(su, su[i] + su.dtype.type(limit), side="right")) - 1, i + 1), j)
        out.append((i, k))
        i = k
    return out


def index_groups(
    starts: np.ndarray, local: np.ndarray, *, max_range: int = MAX_RANGE_BYTES, max_hole: int = MAX_HOLE_BYTES
) -> list[list[tuple[int, int]]]:
    """The range reads of samples ``local`` (indexes into one shard, in reading order): each read is a
    group of spans ``(i, j)`` (samples ``i .. j-1``), and reads bytes ``[starts[first i], starts[last j])``."""
    local = np.asarray(local)
    if len(local) == 0:
        return []
    runs = [0, *(np.flatnonzero(np.diff(local) != 1) + 1).tolist(), len(local)]
    spans = [
        p for a, b in zip(runs[:-1], runs[1:]) for p in pieces(starts, int(local[a]), int(local[b - 1]) + 1, max_range)
    ]
    # signed: a span may go back (a repeated source's next pass), uint64 would wrap
    st = np.asarray(starts).astype(np.int64)
    out = []
    group = [spans[0]]
    for span in spans[1:]:
        # joined to the group: a span after the group's end (a hole of at most max_hole), not one going back
        if 0 <= st[span[0]] - st[group[-1][1]] <= max_hole and st[span[1]] - st[group[0][0]] <= max_range:
            group.append(span)
        else:
            out.append(group)
            group = [span]
    out.append(group)
    return out


def index_ranges(
    starts: np.ndarray, local: np.ndarray, *, max_range: int = MAX_RANGE_BYTES, max_hole: int = MAX_HOLE_BYTES
) -> list[tuple[int, int]]:
    """The byte ranges ``[lo, hi)`` :func:`index_groups` reads, in order (one GET each on remote storage)."""
    return [
        (int(starts[g[0][0]]), int(starts[g[-1][1]]))
        for g in index_groups(starts, local, max_range=max_range, max_hole=max_hole)
    ]


# ---------------------------------------------------------------------------------------------- the buffered reader


@dataclass(frozen=True)
class Buffer:
    """An ``io.BufferedReader``'s state: it holds bytes ``[lo, hi)`` (``hi``: the raw file's position) and
    the caller is at ``pos``."""

    lo: int = 0
    hi: int = 0
    pos: int = 0


def buffered_read(
    buf: Buffer, offset: int, n: int, *, block_size: int, size: int
) -> tuple[list[tuple[int, int]], Buffer]:
    """``seek(offset); read(n)`` on an ``io.BufferedReader(raw, buffer_size=block_size)`` over a raw file
    of ``size`` bytes whose every read is one GET: the GETs ``[lo, hi)`` sent, and the new state.

    CPython's C reader: a seek inside the buffer (or to its end, while unread bytes remain) moves within it,
    any other seek drops the buffer; a read takes what the buffer holds, then reads the rest's whole
    multiples of ``block_size`` straight from the raw file, then refills the buffer with one
    ``block_size`` read for the remainder. A raw read at or past the end sends nothing.
    """
    if n <= 0:
        inside = buf.lo <= offset <= buf.hi and buf.pos < buf.hi
        return [], (Buffer(buf.lo, buf.hi, offset) if inside else Buffer(offset, offset, offset))
    if buf.lo <= offset <= buf.hi and buf.pos < buf.hi:
        if offset + n <= buf.hi:
            return [], Buffer(buf.lo, buf.hi, offset + n)
        base, rest = buf.hi, offset + n - buf.hi
    else:
        base, rest = offset, n
    gets: list[tuple[int, int]] = []
    direct = rest // block_size * block_size
    if direct and base < size:
        gets.append((base, min(size, base + direct)))
    at = base + direct
    if rest - direct == 0:
        return gets, Buffer(at, at, at)
    if at < size:
        gets.append((at, min(size, at + block_size)))
    return gets, Buffer(at, max(at, min(size, at + block_size)), offset + n)


def download_gets(size: int, *, block_size: int, chunk: int = COPY_CHUNK) -> list[tuple[int, int]]:
    """The GETs of copying a whole shard of ``size`` bytes into the cache (``copy_stream`` reads ``chunk``
    bytes at a time through the buffered reader, until an empty read)."""
    gets: list[tuple[int, int]] = []
    buf = Buffer()
    for at in range(0, size, chunk):
        g, buf = buffered_read(buf, at, chunk, block_size=block_size, size=size)
        gets += g
    return gets


# ---------------------------------------------------------------------------------------------- the header walk


@dataclass(frozen=True)
class SampleLayout:
    """Where one sample's members lie, relative to its first header (every sample of the shard alike).

    Attributes:
        size: bytes of one sample (its members' headers and padded data).
        members: ``(header offset, data bytes, loaded)`` per member, in tar order (the data follows its
            512-byte header; ``loaded``: the reader reads it, e.g. ``.jpg``, ``.cls``, ``.json``).
    """

    size: int
    members: tuple[tuple[int, int, bool], ...]

    @classmethod
    def synthetic(cls, bytes_per_sample: int) -> "SampleLayout":
        """What ``shardkit convert`` writes, sized to ``bytes_per_sample``: a ``.cls`` and a ``.json`` member
        of one tar block each around a ``.jpg`` taking the rest (at least one block)."""
        size = max(6 * HEADER, -(-int(bytes_per_sample) // HEADER) * HEADER)
        jpg = size - 5 * HEADER
        return cls(size, ((0, 2, True), (2 * HEADER, jpg, True), (3 * HEADER + jpg, 100, True)))

    def touches(self, sample: int, wanted: bool) -> Iterator[tuple[int, int]]:
        """``(offset, bytes)`` the walk reads of ``sample``: each member's header, and its data when ``wanted``."""
        base = sample * self.size
        for head, data, loaded in self.members:
            yield base + head, HEADER
            if wanted and loaded and data > 0:
                yield base + head + HEADER, data


@dataclass(frozen=True)
class WalkState:
    """An open shard being walked: the next sample, the end of the last byte range read, the buffer."""

    sample: int = 0
    done: int = 0
    buf: Buffer = Buffer()


def walk_gets(
    layout: SampleLayout,
    *,
    first: int,
    stop: int,
    block_size: int,
    shard_size: int,
    state: Optional[WalkState] = None,
) -> tuple[list[tuple[int, int]], WalkState]:
    """The GETs of reading samples ``first .. stop-1`` with the header walk through a buffered reader of
    ``block_size``: from a fresh open (``state`` None) or continuing ``state`` (``first >= state.sample``).

    The walk reads each member's header, the data of the members it loads of the wanted samples, and after
    the last one the next header (the next sample's first, or the end-of-archive block). Only the reads
    that leave the buffer are looked at, so the cost is per GET, not per sample.
    """
    st = state if state is not None else WalkState()
    if first < st.sample:
        raise ValueError(f"the walk goes forward only: sample {first} after {st.sample}")
    gets: list[tuple[int, int]] = []
    buf, done, s = st.buf, st.done, layout.size
    k = st.sample
    while True:
        # the first read not served by the buffer: in sample hi // s or later (reads of earlier samples end before hi)
        k = max(k, buf.hi // s) if buf.hi > done else k
        hit: Optional[tuple[int, int]] = None
        while k < stop and hit is None:
            for o, n in layout.touches(k, k >= first):
                if o >= done and o + n > buf.hi:
                    hit = (o, n)
                    break
            else:
                k += 1
        if hit is None:  # the peek at the next header
            o = stop * s + layout.members[0][0]
            if o >= done and o + HEADER > buf.hi:
                hit = (o, HEADER)
        if hit is None:
            break
        g, buf = buffered_read(buf, hit[0], hit[1], block_size=block_size, size=shard_size)
        gets += g
        done = hit[0] + hit[1]
    peek_end = stop * s + layout.members[0][0] + HEADER
    return gets, WalkState(sample=stop, done=max(done, peek_end), buf=Buffer(buf.lo, buf.hi, max(buf.pos, peek_end)))


def layout_of(starts: Sequence[int], offsets: np.ndarray, sizes: np.ndarray, loaded: Sequence[bool]) -> SampleLayout:
    """The :class:`SampleLayout` of a shard whose samples are all alike, from its sample index (``starts``,
    member data ``offsets`` and ``sizes`` of sample 0, which members are ``loaded``)."""
    size = int(starts[1]) - int(starts[0])
    return SampleLayout(
        size, tuple((int(o) - HEADER, int(z), bool(ld)) for o, z, ld in zip(offsets[0], sizes[0], loaded))
    )
