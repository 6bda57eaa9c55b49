"""The read stage: plan blocks -> raw samples, one sequential read per block, the next block read ahead.

:class:`BlockReader` is the seam where a shard's bytes become :class:`RawSample` objects:
``read(gids)`` gets the samples of one block (consecutive ids of one or more shards, in
stored order). A shard with a sample index (:mod:`shardkit.format.index`) is read with one
range request per block, members sliced out at their recorded offsets; without one (or when
it is damaged or disagrees with the tar) the tar headers are walked
(:class:`shardkit.format.tar.ShardReader`, skipping forward without reading data).
:func:`read_blocks` runs those reads one block ahead on a thread and emits each block's
samples in its planned (shuffled) order.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from typing import IO, Iterable, Iterator, Optional, Sequence

import numpy as np

from shardkit.format import RawSample, ShardReader, TarDamage
from shardkit.format.index import INDEX_FORMAT, IndexDamage, IndexMismatch, SampleIndex, index_url, load_index
from shardkit.format.manifest import Manifest
from shardkit.loader.stats import COUNTERS, Counters
from shardkit.plan.epoch import Block
from shardkit.storage import fs as storage
from shardkit.storage.opener import ShardOpener

log = logging.getLogger("shardkit.loader")


class BlockReader:
    """Reads the samples of plan blocks, keeping one shard open across consecutive blocks.

    With ``sha256`` (the manifest's ``sample_index`` is set: every shard has a sidecar
    index) each shard's index is loaded once, when the shard is first read, and a block's
    samples of one shard are one range read (:meth:`SampleIndex.slice
    <shardkit.format.index.SampleIndex.slice>` cuts the members out and checks each
    member's tar header). Without an index, or when it is missing, damaged or disagrees
    with the tar, the shard is read with the header walk (logged once per shard, counted
    in :attr:`index_fallbacks`): the same samples, never other bytes.

    Args:
        urls: shard URLs (manifest order).
        nbytes: shard sizes in bytes (for the cache).
        shard_offsets: global id of each shard's first sample.
        opener: opens shard URLs.
        counters: where read time and bytes are counted.
        num_classes: labels must lie in ``[0, num_classes)`` (None: any non-negative int64).
        sha256: the shards' sha256s from the manifest when the shards have sample indexes (None: walk only;
            a None entry: that shard is walked, e.g. a mixture's source written before the index).
    """

    #: holes (consumed samples on resume) up to this many bytes are read through rather than split into two range reads
    MAX_HOLE_BYTES = 1 << 20
    #: largest range read: a block of more bytes takes several (bounds the block's bytes held twice while its members are cut out)
    MAX_RANGE_BYTES = 64 << 20
    #: sample indexes kept per reader (a worker's shards are read one after another)
    KEEP_INDEXES = 4

    def __init__(self, urls: Sequence[str], nbytes: Sequence[int], shard_offsets: np.ndarray, opener: ShardOpener, counters: Counters,
                 num_classes: Optional[int] = None, *, sha256: Optional[Sequence[str]] = None):
        self.urls, self.nbytes, self.offsets = urls, nbytes, shard_offsets
        self.num_classes = num_classes
        self.opener, self.counters = opener, counters
        self.sha256 = sha256
        self._shard = -1
        self._reader: Optional[ShardReader] = None
        self._damaged: dict[int, str] = {}
        self._counted = 0  # bytes of the open reader already counted
        self._retries = 0  # opener retries already counted
        self._indexes: dict[int, SampleIndex] = {}  # recently used, oldest first
        self._walk_only: set[int] = set()  # shards whose index is missing, damaged or wrong
        self._ranged: tuple[int, Optional[IO[bytes]]] = (-1, None)  # the shard open for range reads
        self.index_fallbacks = 0  #: shards read with the header walk although the manifest promised an index
        self.range_reads = 0  #: range reads made through the index

    def _count_bytes(self) -> None:
        if self._reader is not None:
            self.counters.add("bytes_read", self._reader.bytes_read - self._counted)
            self._counted = self._reader.bytes_read
        if self.opener.retries != self._retries:
            self.counters.add("retries", self.opener.retries - self._retries)
            self._retries = self.opener.retries

    def close(self) -> None:
        if self._reader is not None:
            self._count_bytes()
            self._counted = 0
            self._reader.close()
            self._reader = None
            self._shard = -1
        self._close_ranged()

    def _close_ranged(self) -> None:
        f, self._ranged = self._ranged[1], (-1, None)
        if f is not None:
            f.close()

    def _reader_for(self, shard: int, index: int) -> ShardReader:
        if self._reader is None or self._shard != shard or self._reader.index > index:
            self.close()
            self._reader = ShardReader(self.opener.open(self.urls[shard], self.nbytes[shard]), self.urls[shard], num_classes=self.num_classes)
            self._shard = shard
        return self._reader

    def read(self, gids: np.ndarray) -> list[RawSample]:
        """The samples ``gids`` (in the given, sequential order); unusable ones carry ``error``."""
        t0 = time.perf_counter()
        shards = np.searchsorted(self.offsets, gids, side="right") - 1
        out: list[RawSample] = []
        cuts = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(gids)]
        for a, b in zip(cuts[:-1], cuts[1:]):  # the block's samples of one shard each
            shard = int(shards[a])
            got = self._read_indexed(shard, gids[a:b]) if self.sha256 is not None else None
            out.extend(self._walk(shard, gids[a:b]) if got is None else got)
        self._count_bytes()
        self.counters.add("read_s", time.perf_counter() - t0)
        return out

    # ------------------------------------------------------------------ the header walk

    def _walk(self, shard: int, gids: np.ndarray) -> list[RawSample]:
        out = []
        url, first = self.urls[shard], int(self.offsets[shard])
        for gid in gids.tolist():
            index = gid - first
            if shard in self._damaged:
                out.append(RawSample(key=f"#{index}", gid=gid, shard=url, index=index, error=self._damaged[shard]))
                continue
            try:
                s = self._reader_for(shard, index).read(index, gid)
            except TarDamage as exc:
                log.warning("shardkit: %s; samples after it are skipped", exc)
                self._damaged[shard] = str(exc)
                self.close()
                s = None
            if s is None:
                reason = self._damaged.get(shard) or f"shard ends before sample {index} (manifest disagrees)"
                s = RawSample(key=f"#{index}", gid=gid, shard=url, index=index, error=reason)
            out.append(s)
        return out

    # ------------------------------------------------------------------ the sample index

    def _fall_back(self, shard: int, why: object) -> None:
        self._walk_only.add(shard)
        self._indexes.pop(shard, None)
        self.index_fallbacks += 1
        self.counters.add("index_fallbacks", 1)
        log.warning("shardkit: %s; reading %s with the tar header walk", why, self.urls[shard])

    def _index(self, shard: int) -> Optional[SampleIndex]:
        """The shard's sample index (loaded and checked once), None if the shard is read with the walk."""
        if shard in self._walk_only or self.sha256[shard] is None:  # type: ignore[index]
            return None
        idx = self._indexes.pop(shard, None)
        if idx is None:
            url = self.urls[shard]
            try:
                idx = load_index(url, shard_bytes=int(self.nbytes[shard]), shard_sha256=self.sha256[shard],  # type: ignore[index]
                                 open_fn=lambda u: io.BytesIO(self.opener.fetch(u)))
            except IndexDamage as exc:
                self._fall_back(shard, exc)
                return None
            samples = int(self.offsets[shard + 1] - self.offsets[shard]) if shard + 1 < len(self.offsets) else len(idx)
            if len(idx) != samples:
                self._fall_back(shard, f"{index_url(url)}: the index lists {len(idx)} samples, the manifest {samples}")
                return None
            while len(self._indexes) >= self.KEEP_INDEXES:
                self._indexes.pop(next(iter(self._indexes)))
        self._indexes[shard] = idx  # most recently used last
        return idx

    def _ranged_file(self, shard: int) -> IO[bytes]:
        if self._ranged[0] != shard or self._ranged[1] is None:
            self.close()  # one shard open at a time (walk or ranges)
            self._ranged = (shard, self.opener.open_ranges(self.urls[shard], self.nbytes[shard]))
        f = self._ranged[1]
        assert f is not None
        return f

    def _read_indexed(self, shard: int, gids: np.ndarray) -> Optional[list[RawSample]]:
        """The samples ``gids`` of ``shard`` through its index (None: read them with the walk).

        Consecutive samples are one range read (of at most :attr:`MAX_RANGE_BYTES`); a hole
        left by consumed samples (resume) is read through when it is small (:attr:`MAX_HOLE_BYTES`),
        else the block takes one range read per run.
        """
        idx = self._index(shard) if shard not in self._damaged else None
        if idx is None:
            return None
        url, first = self.urls[shard], int(self.offsets[shard])
        local = gids - first
        if local[-1] >= len(idx):
            self._fall_back(shard, f"{index_url(url)}: the index lists {len(idx)} samples, sample {int(local[-1])} was asked for")
            return None
        runs = [0, *(np.flatnonzero(np.diff(local) != 1) + 1).tolist(), len(local)]
        spans = [p for a, b in zip(runs[:-1], runs[1:]) for p in _pieces_of(idx, int(local[a]), int(local[b - 1]) + 1, self.MAX_RANGE_BYTES)]
        starts = idx.starts.astype(np.int64)  # signed: a span may go back (a repeated source's next pass), uint64 would wrap
        out: list[RawSample] = []
        try:
            group = [spans[0]]
            for span in spans[1:] + [None]:  # type: ignore[list-item]
                # joined to the group: a span after the group's end (a hole of at most MAX_HOLE_BYTES), not one going back
                if span is not None and 0 <= starts[span[0]] - starts[group[-1][1]] <= self.MAX_HOLE_BYTES \
                        and starts[span[1]] - starts[group[0][0]] <= self.MAX_RANGE_BYTES:
                    group.append(span)
                    continue
                lo, hi = idx.byte_range(group[0][0], group[-1][1])
                data = self._read_range(shard, lo, hi)
                for i, j in group:
                    a, b = idx.byte_range(i, j)
                    piece = data if (a, b) == (lo, hi) else data[a - lo : b - lo]
                    out.extend(idx.slice(piece, i, j, url=url, first_gid=first + i, num_classes=self.num_classes))
                group = [span]
        except IndexMismatch as exc:
            self._close_ranged()
            self._fall_back(shard, exc)
            return None
        return out

    def _read_range(self, shard: int, lo: int, hi: int) -> bytes:
        f = self._ranged_file(shard)
        f.seek(lo)
        parts, n = [], hi - lo
        while n > 0:  # one request; a short read (never seen) asks for the rest
            b = f.read(n)
            if not b:
                break
            parts.append(b)
            n -= len(b)
        self.range_reads += 1
        self.counters.add("bytes_read", hi - lo - n)
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _pieces_of(idx: SampleIndex, i: int, j: int, limit: int) -> list[tuple[int, int]]:
    """Samples ``i .. j-1`` cut into runs of at most ``limit`` bytes (at least one sample each)."""
    out = []
    while i < j:
        k = min(max(int(np.searchsorted(idx.starts, idx.starts[i] + np.uint64(limit), side="right")) - 1, i + 1), j)
        out.append((i, k))
        i = k
    return out


def indexed_shards(manifest: Manifest, urls: Sequence[str]) -> Optional[list[str]]:
    """The ``sha256`` argument of :class:`BlockReader` for ``manifest``'s shards: their sha256s when
    they have sample indexes this shardkit reads (and can be read by range), else None."""
    if manifest.sample_index != INDEX_FORMAT or not urls or storage.scheme(urls[0]) == "pipe":
        return None
    return [s.sha256 for s in manifest.shards]


class MixReader:
    """Reads the blocks of a mixture: one :class:`BlockReader` per source (its own opener, storage
    options and class count, its own open shard), so a block -- one run of ids per source --
    continues each source's shard instead of reopening it. Same ``read``/``close`` contract.

    Args:
        readers: one reader per source, addressing mixture sample ids.
        gid_base: first mixture sample id of each source, plus the total.
        counters: the readers' counters; each read's bytes are also counted per source.
        rows: the per-source counter row of each reader; num_rows: how many rows.
    """

    def __init__(self, readers: Sequence[BlockReader], gid_base: np.ndarray, counters: Counters, rows: Sequence[int], num_rows: int):
        self.readers, self.gid_base, self.counters = list(readers), gid_base, counters
        self.rows, self.num_rows = [int(r) for r in rows], num_rows

    def _counted(self, i: int, fn, *args):  # type: ignore[no-untyped-def]
        before = self.counters.v[_BYTES]
        out = fn(*args)
        per = np.zeros(self.num_rows)
        per[self.rows[i]] = self.counters.v[_BYTES] - before
        self.counters.add_sources("bytes_read", per)
        return out

    def read(self, gids: np.ndarray) -> list[RawSample]:
        """The samples ``gids`` (each source's ids in one run, sequential within it)."""
        src = np.searchsorted(self.gid_base, gids, side="right") - 1
        cuts = np.flatnonzero(np.diff(src)) + 1
        out: list[RawSample] = []
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(gids)]):
            if b > a:
                out += self._counted(int(src[a]), self.readers[int(src[a])].read, gids[a:b])
        return out

    def close(self) -> None:
        for i, r in enumerate(self.readers):
            self._counted(i, r.close)


_BYTES = COUNTERS.index("bytes_read")


def plan_blocks(blocks: Sequence[Block]) -> Iterator[Block]:
    """Stage 0: the worker's plan blocks."""
    yield from blocks


def _pieces(blocks: Iterable[Block], chunk: int) -> Iterator[tuple[np.ndarray, Optional[np.ndarray]]]:
    """``(gids to read, emission order or None)`` per read: a shuffled block at once; a block in
    stored order (no shuffle) ``chunk`` samples at a time, so an evaluation pass holds a batch or
    two of JPEG bytes per worker (the one emitted and the one read ahead), not its whole chunk."""
    for block in blocks:
        n = len(block.gids)
        if n > chunk and np.array_equal(block.order, np.arange(n)):
            for i in range(0, n, chunk):
                yield block.gids[i : i + chunk], None
        else:
            yield block.gids, block.order


class _BlockRead:
    """One read of ``reader`` on its own daemon thread: a worker process's exit never waits for
    it (a non-daemon thread would hold up the exit until a remote read finished)."""

    def __init__(self, reader: "BlockReader | MixReader", gids: np.ndarray):
        self.reader = reader
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._finished = self._close_after = False
        self._samples: list[RawSample] = []
        self._error: Optional[BaseException] = None
        threading.Thread(target=self._run, args=(gids,), name="shardkit-read", daemon=True).start()

    def _run(self, gids: np.ndarray) -> None:
        try:
            self._samples = self.reader.read(gids)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer by result()
            self._error = exc
        finally:
            with self._lock:
                self._finished, close = True, self._close_after
            self._done.set()
            if close:
                self.reader.close()

    def result(self) -> list[RawSample]:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._samples

    def close_reader_when_done(self) -> None:
        """Close the reader now, or (if this read still runs) on its thread when it ends."""
        with self._lock:
            if not self._finished:
                self._close_after = True
                return
        self.reader.close()


def read_blocks(blocks: Iterable[Block], *, reader: "BlockReader | MixReader", chunk: int = 64, read_ahead: bool = True) -> Iterator[RawSample]:
    """Stage 1: read each block sequentially, emit its samples in the block's shuffled order.

    With ``read_ahead`` the next block is read on a background thread while this one is
    emitted (decoded), so a remote shard's round trips (or a cold disk) overlap with
    decoding instead of stalling the worker (memory: two blocks of JPEG bytes per worker).
    A block's read starts only once the previous read has succeeded, so at most one read is
    in flight, the reader is never used by two threads, and a failed read surfaces at once.
    Closing the stage early does not wait for an in-flight read: its thread closes the
    reader when that read ends.
    """
    pieces = _pieces(blocks, chunk)
    if not read_ahead:
        try:
            for gids, order in pieces:
                yield from _emit(reader.read(gids), order)
        finally:
            reader.close()
        return
    inflight: Optional[tuple[_BlockRead, Optional[np.ndarray]]] = None
    try:
        first = next(pieces, None)
        if first is not None:
            inflight = _BlockRead(reader, first[0]), first[1]
        while inflight is not None:
            read, order = inflight
            inflight = None
            samples = read.result()  # raises the read's error here, in order
            nxt = next(pieces, None)
            if nxt is not None:
                inflight = _BlockRead(reader, nxt[0]), nxt[1]
            yield from _emit(samples, order)
    finally:
        if inflight is not None:
            inflight[0].close_reader_when_done()
        else:
            reader.close()


def _emit(samples: list[RawSample], order: Optional[np.ndarray]) -> Iterator[RawSample]:
    if order is None:
        yield from samples
    else:
        for i in order.tolist():
            yield samples[i]
