"""Shard bytes -> samples: :class:`BlockReader` reads the samples of one plan block at a time.

``read(gids)`` gets the samples of one block (consecutive ids of one or more shards, in
stored order), keeping one shard open across consecutive blocks. A shard with a sample
index (:mod:`shardkit.format.index`) is read with one range request per block, members
sliced out at their recorded offsets, every sample checked against its CRC32C and tar
headers; a shard of a dataset written without an index is read with the tar header walk
(:class:`shardkit.format.tar.ShardReader`, skipping forward without reading data). Bytes the
index rejects are withheld (each such sample carries its ``error``), never walked: a shard
that changed since conversion does not get a second, less careful reader. The read stage
that drives it is :mod:`shardkit.loader.read.reader`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import IO, Optional

import numpy as np

from shardkit.errors import StorageError
from shardkit.format import RawSample, ShardReader, TarDamage
from shardkit.format.index import READABLE_INDEX_FORMATS, IndexDamage, IndexMismatch, SampleIndex, index_url
from shardkit.format.manifest import Manifest
from shardkit.format.sample import SampleRule
from shardkit.loader.read import ranges
from shardkit.loader.read.stored import ReadMap
from shardkit.loader.stats import Counters
from shardkit.storage import fs as storage
from shardkit.storage.opener import ShardOpener

log = logging.getLogger("shardkit.loader")


class BlockReader:
    """Reads the samples of plan blocks, keeping one shard open across consecutive blocks.

    With ``sha256`` (the manifest's ``sample_index`` is set: every shard has a sidecar
    index) each shard's index is loaded once, when the shard is first read (the last
    :attr:`KEEP_INDEXES` are kept, least recently used dropped first), and a block's samples
    of one shard are one range read (:meth:`SampleIndex.slice
    <shardkit.format.index.SampleIndex.slice>` cuts the members out and checks each sample's
    CRC32C and tar headers). A sample whose bytes fail is withheld (its ``error`` set; the
    batcher skips and counts it, or raises under ``strict``). When the bytes came from the
    node cache, its entry is dropped and the range read again from the store once first (a
    damaged cache file is the cache's fault, not the dataset's). A shard whose index is
    missing, damaged or for other bytes is withheld whole (logged once, counted in
    :attr:`shards_withheld`), not walked. Without ``sha256`` (a dataset written without an
    index) shards are read with the header walk.

    Args:
        urls: shard URLs (manifest order).
        nbytes: shard sizes in bytes (checked at every open; the cache's content key).
        shard_offsets: global id of each shard's first sample.
        opener: opens shard URLs.
        counters: where read time and bytes are counted.
        num_classes: labels must lie in ``[0, num_classes)`` (None: any non-negative int64).
        rule: the dataset's :class:`~shardkit.format.sample.SampleRule` (its fields, class and target
            counts; wins over ``num_classes``): a sample breaking it is unusable (skipped and counted).
            A dataset without ``label`` reads every sample's label as -1.
        sha256: the shards' sha256s from the manifest when the shards have sample indexes (None: walk only;
            a None entry: that shard is walked, e.g. a mixture's source written before the index).
        content: the shards' sha256s from the manifest (the cache's content key), when ``sha256`` is None
            (default: ``sha256``).
        read_map: the snapshot's kept positions and changed labels (:class:`~shardkit.loader.read.stored.ReadMap`):
            ``gids`` and ``shard_offsets`` then count the samples that are in, and each is read at its stored
            position and handed out with its changed label (None: every stored sample, as stored).
        max_hole: read through a gap of at most this many bytes between wanted samples (0: never).
    """

    #: holes (samples left out, or consumed before a resume) up to this many bytes are read through rather than split
    #: into two range reads (the ``max_hole`` argument sets it per reader)
    MAX_HOLE_BYTES = ranges.MAX_HOLE_BYTES
    #: largest range read: a block of more bytes takes several (bounds the block's bytes held twice while its members are cut out)
    MAX_RANGE_BYTES = ranges.MAX_RANGE_BYTES
    #: sample indexes kept per reader (a worker's shards are read one after another)
    KEEP_INDEXES = 4

    def __init__(
        self,
        urls: Sequence[str],
        nbytes: Sequence[int],
        shard_offsets: np.ndarray,
        opener: ShardOpener,
        counters: Counters,
        num_classes: Optional[int] = None,
        *,
        sha256: Optional[Sequence[Optional[str]]] = None,
        rule: Optional[SampleRule] = None,
        content: Optional[Sequence[Optional[str]]] = None,
        read_map: Optional[ReadMap] = None,
        max_hole: int = ranges.MAX_HOLE_BYTES,
    ):
        self.urls, self.nbytes, self.offsets = urls, nbytes, shard_offsets
        self.map = None if read_map is None or read_map.is_everything else read_map
        self.MAX_HOLE_BYTES = max_hole
        self.rule = rule if rule is not None else SampleRule(num_classes=num_classes)
        self.num_classes = self.rule.num_classes
        self._no_label = "label" not in self.rule.fields
        self.opener, self.counters = opener, counters
        self.sha256 = sha256
        self.content = content if content is not None else sha256
        self._shard = -1
        self._reader: Optional[ShardReader] = None
        self._damaged: dict[int, str] = {}
        self._counted = 0  # bytes of the open reader already counted
        self._retries = 0  # opener retries already counted
        self._waits = 0  # opener cache waits already counted
        self._indexes: dict[int, SampleIndex] = {}  # recently used, oldest first
        self._withheld: dict[int, str] = {}  # shards whose index is missing, damaged or wrong: why
        self._ranged: tuple[int, Optional[IO[bytes]]] = (-1, None)  # the shard open for range reads
        self.shards_withheld = 0  #: shards withheld because their index is missing, damaged or for other bytes
        self.cache_refetches = 0  #: ranges read again from the store after their cached bytes failed a checksum
        self.range_reads = 0  #: range reads made through the index

    def _count_bytes(self) -> None:
        if self._reader is not None:
            self.counters.add("bytes_read", self._reader.bytes_read - self._counted)
            self._counted = self._reader.bytes_read
        if self.opener.retries != self._retries:
            self.counters.add("retries", self.opener.retries - self._retries)
            self._retries = self.opener.retries
        waits = getattr(self.opener, "cache_waits", 0)
        if waits != self._waits:
            self.counters.add("cache_waits", waits - self._waits)
            self._waits = waits

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

    def _content(self, shard: int) -> Optional[str]:
        return self.content[shard] if self.content is not None else None

    def _reader_for(self, shard: int, index: int) -> ShardReader:
        if self._reader is None or self._shard != shard or self._reader.index > index:
            self.close()
            self._reader = ShardReader(
                self.opener.open(self.urls[shard], self.nbytes[shard], self._content(shard)),
                self.urls[shard],
                rule=self.rule,
            )
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
            local = gids[a:b] - self.offsets[shard]  # planned positions
            if self.map is not None:
                local = self.map.stored(shard, local)
            indexed = self.sha256 is not None and self.sha256[shard] is not None
            got = self._read_indexed(shard, local) if indexed else self._walk(shard, local)
            if self.map is not None:
                for s, gid in zip(got, gids[a:b].tolist()):
                    s.gid = gid
                self.map.relabel(shard, got)
            out.extend(got)
        if self._no_label:  # the batch's class label row of a dataset without one (never handed out)
            for s in out:
                s.label = -1
        self._count_bytes()
        self.counters.add("read_s", time.perf_counter() - t0)
        return out

    # ------------------------------------------------------------------ the header walk

    def _walk(self, shard: int, local: np.ndarray) -> list[RawSample]:
        """The samples at stored positions ``local`` of ``shard``, by the header walk (unwanted samples are skipped
        by their headers)."""
        out = []
        url, first = self.urls[shard], int(self.offsets[shard])
        for index in local.tolist():
            gid = first + index
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

    def _withhold(self, shard: int, why: str) -> None:
        """Withhold every sample of ``shard``: its index is missing, damaged or for other bytes."""
        msg = (
            f"{why}; the samples of {self.urls[shard]} are withheld (check the dataset with `shardkit verify`; "
            f"`shardkit index` rebuilds sample indexes)"
        )
        self._withheld[shard] = msg
        self._indexes.pop(shard, None)
        self.shards_withheld += 1
        self.counters.add("shards_withheld", 1)
        log.warning("shardkit: %s", msg)

    def _index(self, shard: int) -> Optional[SampleIndex]:
        """The shard's sample index (loaded and checked once), None if the shard is withheld."""
        sha = self.sha256[shard] if self.sha256 is not None else None
        if shard in self._withheld or sha is None:
            return None
        idx = self._indexes.pop(shard, None)
        if idx is None:
            url = index_url(self.urls[shard])
            nbytes = int(self.nbytes[shard])

            def check(data: bytes) -> SampleIndex:  # its own CRC-32 and the shard it names: the cache's check too
                return SampleIndex.from_bytes(data, url, shard_bytes=nbytes, shard_sha256=sha)

            try:  # through the node cache when there is one: once per node
                idx = self.opener.fetch_sidecar(url, sha, check)
            except (FileNotFoundError, StorageError) as exc:  # a store that keeps failing raises: not a damaged index
                if isinstance(exc, StorageError) and "not found" not in str(exc):
                    raise
                self._withhold(shard, f"{url}: sample index not found")
                return None
            except IndexDamage as exc:
                self._withhold(shard, str(exc))
                return None
            samples = self._stored_size(shard, len(idx))
            if len(idx) != samples:
                self._withhold(shard, f"{url}: the index lists {len(idx)} samples, the manifest {samples}")
                return None
            while len(self._indexes) >= self.KEEP_INDEXES:
                self._indexes.pop(next(iter(self._indexes)))  # the least recently used
        self._indexes[shard] = idx  # most recently used last
        return idx

    def _stored_size(self, shard: int, listed: int) -> int:
        """Samples the manifest stores in ``shard`` (``listed``: what its index lists, for the last shard of a
        reader given no total)."""
        if self.map is not None:
            return int(self.map.stored_sizes[shard])
        return int(self.offsets[shard + 1] - self.offsets[shard]) if shard + 1 < len(self.offsets) else listed

    def _ranged_file(self, shard: int) -> IO[bytes]:
        if self._ranged[0] != shard or self._ranged[1] is None:
            self.close()  # one shard open at a time (walk or ranges)
            self._ranged = (shard, self.opener.open_ranges(self.urls[shard], self.nbytes[shard], self._content(shard)))
        f = self._ranged[1]
        assert f is not None
        return f

    def _read_indexed(self, shard: int, local: np.ndarray) -> list[RawSample]:
        """The samples at stored positions ``local`` of ``shard`` through its index (withheld ones carry ``error``).

        Consecutive samples are one range read (of at most :attr:`MAX_RANGE_BYTES`); a hole left by samples a
        subset leaves out or consumed before a resume is read through when it is small (:attr:`MAX_HOLE_BYTES`)
        but never sliced, checked or handed out,
        else the block takes one range read per run (:func:`shardkit.loader.read.ranges.index_groups`).
        """
        url, first = self.urls[shard], int(self.offsets[shard])
        idx = self._index(shard)
        if idx is not None and local[-1] >= len(idx):
            self._withhold(
                shard, f"{index_url(url)}: the index lists {len(idx)} samples, sample {int(local[-1])} was asked for"
            )
            idx = None
        if idx is None:
            why = self._withheld[shard]
            return [RawSample(key=f"#{i}", gid=first + i, shard=url, index=i, error=why) for i in local.tolist()]
        groups = ranges.index_groups(idx.starts, local, max_range=self.MAX_RANGE_BYTES, max_hole=self.MAX_HOLE_BYTES)
        out: list[RawSample] = []
        for group in groups:
            lo, hi = idx.byte_range(group[0][0], group[-1][1])
            data = self._read_range(shard, lo, hi)
            if self._from_cache() and len(data) == hi - lo and idx.damaged(data, group[0][0], group[-1][1]):
                data = self._from_store(shard, lo, hi)
            for i, j in group:
                a, b = idx.byte_range(i, j)
                piece = data if (a, b) == (lo, hi) else data[a - lo : b - lo]
                try:
                    out.extend(idx.slice(piece, i, j, url=url, first_gid=first + i, rule=self.rule))
                except IndexMismatch:  # the shard ends early: it changed since conversion
                    why = f"{url}: bytes {a}..{b} could not be read in full: the shard changed since conversion"
                    out.extend(
                        RawSample(key=idx.keys[x], gid=first + x, shard=url, index=x, error=why) for x in range(i, j)
                    )
        return out

    def _from_cache(self) -> bool:
        """The shard open for range reads is read from the node cache."""
        f = self._ranged[1]
        return f is not None and self.opener.cache_path_of(f) is not None

    def _from_store(self, shard: int, lo: int, hi: int) -> bytes:
        """The cached bytes of ``[lo, hi)`` failed a checksum: drop the cache entry and read the range again (a
        fresh download); the store's bytes are then what the index checks."""
        sha = self._content(shard)
        assert sha is not None  # a cache entry always has its content key
        self._close_ranged()
        self.opener.drop_cached(
            self.urls[shard], int(self.nbytes[shard]), sha, "a sample's CRC32C does not match the index"
        )
        self.cache_refetches += 1
        self.counters.add("cache_refetches", 1)
        return self._read_range(shard, lo, hi)

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


def indexed_shards(manifest: Manifest, urls: Sequence[str]) -> Optional[list[str]]:
    """The ``sha256`` argument of :class:`BlockReader` for ``manifest``'s shards: their sha256s when
    they have sample indexes this shardkit reads (and can be read by range), else None."""
    if manifest.sample_index not in READABLE_INDEX_FORMATS or not urls or storage.scheme(urls[0]) == "pipe":
        return None
    return [s.sha256 for s in manifest.shards]
