"""The read stage: plan blocks -> raw samples, one sequential read per block, the next block read ahead.

:class:`~shardkit.loader.read.blocks.BlockReader` (one source) or :class:`MixReader` (one
per source of a mixture) turns a block's sample ids into :class:`RawSample` objects;
:func:`read_blocks` runs those reads one block ahead on a thread and emits each block's
samples in its planned (shuffled) order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Optional

import numpy as np

from shardkit.format import RawSample
from shardkit.loader.read.blocks import BlockReader, indexed_shards
from shardkit.loader.stats import COUNTERS, Counters
from shardkit.plan.epoch import Block

__all__ = ["BlockReader", "MixReader", "indexed_shards", "plan_blocks", "read_blocks"]


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

    def __init__(
        self,
        readers: Sequence[BlockReader],
        gid_base: np.ndarray,
        counters: Counters,
        rows: "Sequence[int] | np.ndarray",
        num_rows: int,
    ):
        self.readers, self.gid_base, self.counters = list(readers), gid_base, counters
        self.rows, self.num_rows = [int(r) for r in rows], num_rows

    def _counted(self, i: int, fn: Callable[..., Any], *args: Any) -> Any:
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


def read_blocks(
    blocks: Iterable[Block], *, reader: "BlockReader | MixReader", chunk: int = 64, read_ahead: bool = True
) -> Iterator[RawSample]:
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
