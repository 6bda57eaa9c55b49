"""The read schedule (:mod:`shardkit.loader.read.ranges`) against simple references: index ranges against a
loop over samples, the buffered header walk against the real ``ShardReader`` over a real
``io.BufferedReader`` that records its raw reads, and the cache download against ``copy_stream``."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.format.tar import ShardReader
from shardkit.loader.read import ranges
from shardkit.storage.cache import copy_stream
from tests.support.shard_reads import RecordingRaw, uniform_shard

ORACLE = settings(derandomize=True, deadline=None, max_examples=60, phases=[Phase.explicit, Phase.generate])


# ----------------------------------------------------------------------------------------- index ranges


def reference_ranges(sizes: list[int], wanted: list[int], max_range: int, max_hole: int) -> list[tuple[int, int]]:
    """The documented rule, one sample at a time: runs of consecutive samples, cut greedily into pieces of at
    most ``max_range`` bytes (one sample at least); a piece joins the read before it when it starts at most
    ``max_hole`` bytes after that read's end and the read stays within ``max_range`` bytes."""
    start = [0]
    for s in sizes:
        start.append(start[-1] + s)
    runs: list[list[int]] = []
    for i in wanted:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    pieces = []
    for run in runs:
        piece = [run[0]]
        for i in run[1:]:
            if start[i + 1] - start[piece[0]] <= max_range:
                piece.append(i)
            else:
                pieces.append(piece)
                piece = [i]
        pieces.append(piece)
    reads: list[tuple[int, int]] = []
    for p in pieces:
        lo, hi = start[p[0]], start[p[-1] + 1]
        if reads and 0 <= lo - reads[-1][1] <= max_hole and hi - reads[-1][0] <= max_range:
            reads[-1] = (reads[-1][0], hi)
        else:
            reads.append((lo, hi))
    return reads


@ORACLE
@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=40),
    keep=st.lists(st.booleans(), min_size=40, max_size=40),
    max_range=st.integers(1, 200),
    max_hole=st.integers(0, 60),
)
@example(sizes=[10] * 6, keep=[True, False] * 20, max_range=30, max_hole=10)  # a third piece would pass the limit
def test_index_ranges_match_a_loop_over_samples(sizes, keep, max_range, max_hole):
    n = len(sizes)
    wanted = [i for i in range(n) if keep[i]] or [n - 1]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)
    got = ranges.index_ranges(starts, np.array(wanted), max_range=max_range, max_hole=max_hole)
    assert got == reference_ranges(sizes, wanted, max_range, max_hole)
    # byte by byte: every wanted byte is read exactly once, and only holes of at most max_hole besides
    read = np.zeros(int(starts[-1]), np.int64)
    for lo, hi in got:
        read[lo:hi] += 1
    want = np.zeros_like(read)
    for i in wanted:
        want[int(starts[i]) : int(starts[i + 1])] = 1
    assert np.all(read[want == 1] == 1) and np.all(read <= 1)


# ----------------------------------------------------------------------------------------- the buffered walk


@ORACLE
@given(
    n=st.integers(1, 12),
    jpeg=st.integers(1, 9000),
    block=st.sampled_from([512, 1000, 1024, 4096, 5000, 8192, 1 << 16]),
    data=st.data(),
)
def test_walk_gets_match_the_real_reader_through_a_real_buffered_reader(n, jpeg, block, data):
    shard, layout = uniform_shard(n, jpeg)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    c = data.draw(st.integers(b, n))
    d = data.draw(st.integers(c, n))
    raw = RecordingRaw(shard)
    reader = ShardReader(io.BufferedReader(raw, buffer_size=block), "x.tar")
    got, state = ranges.walk_gets(layout, first=a, stop=b, block_size=block, shard_size=len(shard))
    keys = [reader.read(i).key for i in range(a, b)]
    assert keys == [f"k{i:06d}" for i in range(a, b)]
    assert got == raw.gets, (a, b)
    if d > c:  # the next block of the same shard continues the open reader
        raw.gets.clear()
        more, _ = ranges.walk_gets(layout, first=c, stop=d, block_size=block, shard_size=len(shard), state=state)
        for i in range(c, d):
            reader.read(i)
        assert more == raw.gets, (a, b, c, d)


@ORACLE
@given(size=st.integers(0, 40000), block=st.integers(1, 9000), chunk=st.integers(1, 9000))
def test_download_gets_match_copy_stream(size, block, chunk):
    raw = RecordingRaw(bytes(size))
    copy_stream(io.BufferedReader(raw, buffer_size=block), io.BytesIO(), chunk)
    assert ranges.download_gets(size, block_size=block, chunk=chunk) == raw.gets


@ORACLE
@given(
    size=st.integers(1, 5000),
    block=st.integers(1, 700),
    ops=st.lists(st.tuples(st.integers(0, 5200), st.integers(0, 1500)), min_size=1, max_size=12),
)
def test_buffered_read_matches_io_bufferedreader_for_any_seek_and_read(size, block, ops):
    raw = RecordingRaw(bytes(size))
    f = io.BufferedReader(raw, buffer_size=block)
    buf = ranges.Buffer()
    for offset, n in ops:
        raw.gets.clear()
        f.seek(offset)
        f.read(n)
        gets, buf = ranges.buffered_read(buf, offset, n, block_size=block, size=size)
        assert gets == raw.gets, (offset, n)
