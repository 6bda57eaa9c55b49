"""Random access into a converted split: ``shardkit.open(url)`` is a map-style ``torch.utils.data.Dataset``.

``ds[i]`` finds sample ``i``'s shard from the manifest's shard sizes, that shard's sample index (loaded once,
kept in an LRU of :attr:`OpenDataset.max_indexes`), and reads exactly the sample's bytes with one ranged read
(:meth:`~shardkit.format.index.SampleIndex.byte_range`), through the storage layer's opener and its retries
(:meth:`~shardkit.storage.opener.ShardOpener.open_ranges`; a remote shard's file stays open, in an LRU like the
indexes, and its size comes from the manifest: no probe). :meth:`~shardkit.format.index.SampleIndex.slice`
checks them (CRC32C, tar headers) before anything is decoded: a sample whose bytes changed is a
:class:`~shardkit.errors.DataError` naming the shard and key, never other bytes. With a ``cache_dir``, a
shard already in the cache is read there (bytes that fail their check there are read again from the store);
a shard not in it is never downloaded whole for one item: its range is read from the store.

``get(key)`` and ``keys()`` read the split's key tables (:mod:`shardkit.format.tables`, one per generation),
checked against the manifest's sizes and sha256s, not every shard's index.

Every split is read as a :class:`~shardkit.format.snapshot.Snapshot` (:func:`~shardkit.format.snapshot.resolve`):
one generation (``generation=``, default the newest), its corrections and, for a selection folder, the selection.
The items are the samples that are in, in split order (``len`` counts them); item ``i`` is read at its stored
position and carries its changed label (:mod:`shardkit.loader.read.stored`); ``get`` of a removed key, or of one a
selection leaves out, is a :class:`KeyError` that says so.

Workers and threads: the dataset pickles without its open state (opener, indexes, key table), which each
process rebuilds on first use (a forked process notices the new pid and rebuilds too); one lock guards the
shared state of threads, and the reads themselves run outside it.
"""

from __future__ import annotations

import collections
import functools
import operator
import os
import threading
from dataclasses import replace
from typing import IO, Any, Optional, Union

import numpy as np
from torch.utils.data import Dataset

from shardkit.access.keys import SnapshotKeys
from shardkit.errors import DataError, ShardkitError, StorageError
from shardkit.format.index import READABLE_INDEX_FORMATS, IndexDamage, SampleIndex, index_url
from shardkit.format.manifest import Manifest
from shardkit.format.sample import RawSample, SampleRule
from shardkit.format.snapshot import Snapshot, resolve
from shardkit.format.tables import BUILD_COMMAND
from shardkit.loader.read.stored import relabel
from shardkit.storage import fs as storage
from shardkit.storage.cache import ShardCache
from shardkit.storage.opener import ShardOpener, StorageConfig

#: sample indexes kept per process
MAX_INDEXES = 64


#: positioned reads (one call, no seek; not on Windows)
_PREAD = hasattr(os, "pread")


class OpenDataset(Dataset):
    """A converted split as a map-style dataset (see the module docstring; build it with :func:`open_dataset`).

    Attributes:
        snapshot: what is read (the pinned generation, its corrections, the selection).
        manifest: the split's manifest, pinned to the snapshot's generation (a selection's parent's).
        classes: class names (index -> name).
    """

    def __init__(
        self,
        snapshot: "Snapshot | Manifest",
        config: StorageConfig,
        decoder: str = "auto",
        max_indexes: int = MAX_INDEXES,
    ):
        if isinstance(snapshot, Manifest):
            snapshot = resolve(snapshot, allow_unsafe_names=config.allow_unsafe_names, **config.storage_options)
        manifest = snapshot.manifest
        where = manifest.url
        if manifest.sample_index not in READABLE_INDEX_FORMATS:
            raise ShardkitError(
                f"{where}: the shards have no sample index, which random access reads; build it with "
                f"`{BUILD_COMMAND} {manifest.base_url}`"
            )
        if max_indexes < 1:
            raise ValueError(f"max_indexes must be at least 1, got {max_indexes}")
        from shardkit.access.items import ItemSpec

        self.snapshot = snapshot
        self.manifest = manifest
        self.config = config
        self.decoder_name = decoder
        self.max_indexes = max_indexes
        self.spec = ItemSpec.of(manifest)
        self.offsets = np.concatenate([[0], np.cumsum(snapshot.shard_sizes)])  # the items: samples that are in
        self.urls = manifest.shard_urls()
        self._reset()

    # ------------------------------------------------------------------ per-process state

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._indexes: collections.OrderedDict[int, SampleIndex] = collections.OrderedDict()
        self._keys: Optional[SnapshotKeys] = None
        self._opener: Optional[ShardOpener] = None
        self._cache: Optional[ShardCache] = None
        self._decoder: Any = None
        self._files: collections.OrderedDict[int, tuple[IO[bytes], threading.Lock]] = collections.OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_lock", "_indexes", "_keys", "_opener", "_cache", "_decoder", "_pid", "_files"):
            state.pop(k)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _state(self) -> tuple[ShardOpener, Optional[ShardCache], Any]:
        if self._pid != os.getpid():  # a forked copy: the parent's lock, files and indexes are not ours
            self._reset()
        with self._lock:
            if self._opener is None:
                from shardkit.loader.decode.decoders import make_decoder

                self._opener = ShardOpener(replace(self.config, cache_dir=None))  # the store's ranges, never a download
                self._cache = ShardCache(self.config.cache_dir) if self.config.cache_dir else None
                self._decoder = make_decoder(self.decoder_name)
            return self._opener, self._cache, self._decoder

    # ------------------------------------------------------------------ the list interface

    @property
    def classes(self) -> list[str]:
        """Class names (index -> name)."""
        return list(self.manifest.classes)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: Union[int, slice]) -> Any:
        """Item ``i`` (negative counts from the end), or a list of the items of a slice."""
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        return self._item(self._position(i))

    def _position(self, i: Any) -> int:
        try:
            j = operator.index(i)
        except TypeError:
            raise TypeError(f"dataset indices must be integers or slices, not {type(i).__name__}") from None
        n = len(self)
        if not -n <= j < n:
            raise IndexError(f"index {j} out of range for a dataset of {n} samples")
        return j + n if j < 0 else j

    def get(self, key: str) -> dict[str, Any]:
        """The item whose key is ``key``.

        Raises:
            KeyError: no sample has this key, or a correction removed it, or the selection leaves it out (the
                error names it and says which).
            TableError: the split has no key table (the message names the command that builds it).
        """
        return self._item(self.index_of(key))

    def keys(self) -> list[str]:
        """Every key of the items, in order (``keys()[i]`` is ``self[i]["key"]``)."""
        return self.key_table().in_order()

    def index_of(self, key: str) -> int:
        """The item number of ``key`` (:class:`KeyError` naming it when it is not an item, and why)."""
        keys = self.key_table()
        at = keys.stored(key)
        if at is None:
            raise KeyError(f"no sample with key {key!r} in {self.manifest.base_url}")
        local = keys.planned(*at)
        if local is None:
            if self.snapshot.selection is None or self._removed(at):
                raise KeyError(
                    f"sample {key!r} was removed from {self.manifest.base_url} by a correction (generation "
                    f"{self.snapshot.generation} does not hold it)"
                )
            raise KeyError(f"sample {key!r} is not in the selection {self.snapshot.url}")
        return int(self.offsets[at[0]]) + local

    def _removed(self, at: tuple[int, int]) -> bool:
        """Whether a correction (not the selection) removed the stored sample ``at``."""
        from shardkit.format.snapshot import corrected

        opener, _, _ = self._state()
        kept = corrected(self.manifest, opener.fetch).kept[at[0]]
        return kept is not None and at[1] not in set(kept.tolist())

    def key_table(self) -> SnapshotKeys:
        """The key tables of the snapshot's generations, loaded and checked once per process."""
        opener, _, _ = self._state()
        with self._lock:
            if self._keys is not None:
                return self._keys
        keys = SnapshotKeys.load(self.snapshot, opener.fetch)
        with self._lock:
            self._keys = keys
        return keys

    # ------------------------------------------------------------------ one item

    def raw(self, i: int) -> RawSample:
        """Sample ``i`` as stored (checked, not decoded): one ranged read."""
        gid = self._position(i)
        shard = int(np.searchsorted(self.offsets, gid, side="right") - 1)
        pos = int(self.snapshot.subset.stored(shard, np.array([gid - int(self.offsets[shard])]))[0])
        idx = self._index(shard)
        lo, hi = idx.byte_range(pos, pos + 1)
        url = self.urls[shard]
        s = self._slice(idx, self._read(shard, lo, hi, cached=True), shard, pos, gid)
        if s.error and self._cache is not None and self._cached_path(shard) is not None:
            s = self._slice(idx, self._read(shard, lo, hi, cached=False), shard, pos, gid)  # the store's bytes
        if s.error:
            raise DataError(s.error if url in s.error else f"{url}: sample {pos} ({s.key}): {s.error}")
        relabel(s, self.snapshot.subset.relabels[shard], self.manifest.classes)
        return s

    def _item(self, gid: int) -> dict[str, Any]:
        from shardkit.access.items import decode_item

        s = self.raw(gid)
        _, _, decoder = self._state()
        try:
            return decode_item(s, self.spec, decoder)
        except ValueError as exc:
            raise DataError(f"{s.shard}: sample {s.index} ({s.key}): {exc}") from None

    @functools.cached_property
    def _rule(self) -> SampleRule:
        m = self.manifest
        return SampleRule(tuple(m.fields), len(m.classes) or None, len(m.targets) or None, len(m.keypoint_names))

    def _slice(self, idx: SampleIndex, data: bytes, shard: int, pos: int, gid: int) -> RawSample:
        return idx.slice(data, pos, pos + 1, url=self.urls[shard], first_gid=gid, rule=self._rule)[0]

    def _index(self, shard: int) -> SampleIndex:
        opener, _, _ = self._state()
        with self._lock:
            idx = self._indexes.get(shard)
            if idx is not None:
                self._indexes.move_to_end(shard)
                return idx
        info, url = self.manifest.shards[shard], index_url(self.urls[shard])
        try:
            data = opener.fetch(url)
            idx = SampleIndex.from_bytes(data, url, shard_bytes=info.bytes, shard_sha256=info.sha256)
        except (FileNotFoundError, StorageError, IndexDamage) as exc:
            if isinstance(exc, StorageError) and "not found" not in str(exc):
                raise
            raise DataError(
                f"{exc if isinstance(exc, IndexDamage) else url + ': sample index not found'}; rebuild the "
                f"sample indexes with `{BUILD_COMMAND} {self.manifest.base_url}`"
            ) from None
        if len(idx) != info.samples:
            raise DataError(f"{url}: the index lists {len(idx)} samples, the manifest {info.samples}")
        with self._lock:
            self._indexes[shard] = idx
            while len(self._indexes) > self.max_indexes:
                self._indexes.popitem(last=False)  # the least recently used
        return idx

    def _cached_path(self, shard: int) -> Optional[str]:
        _, cache, _ = self._state()
        if cache is None:
            return None
        info = self.manifest.shards[shard]
        path = cache.path_for(info.sha256, info.bytes)
        try:
            return path if os.path.getsize(path) == info.bytes else None
        except OSError:
            return None

    def _read(self, shard: int, lo: int, hi: int, *, cached: bool) -> bytes:
        """Bytes ``[lo, hi)`` of ``shard``: from the cache when it holds the shard (and ``cached``), else one
        ranged read of the store (or the local file)."""
        opener, _, _ = self._state()
        path = self._cached_path(shard) if cached else None
        if path is not None:
            with open(path, "rb", buffering=0) as cf:
                cf.seek(lo)
                return cf.read(hi - lo)
        info = self.manifest.shards[shard]
        with self._lock:  # a shard stays open (its open checks the size): one read per item after it
            entry = self._files.pop(shard, None)
            if entry is None:
                entry = (opener.open_ranges(self.urls[shard], info.bytes, None), threading.Lock())
            self._files[shard] = entry  # most recently used last
            while len(self._files) > self.max_indexes:
                old = self._files.popitem(last=False)[1]
                with old[1]:
                    old[0].close()
        rf, lock = entry
        with lock:  # one file position per open shard, and never closed (evicted) under a read
            if not rf.closed:
                return self._read_open(rf, shard, lo, hi)
        # evicted by another thread between the lookup and this read: a handle of this read's own
        rf = opener.open_ranges(self.urls[shard], info.bytes, None)
        try:
            return self._read_open(rf, shard, lo, hi)
        finally:
            rf.close()

    def _read_open(self, rf: Any, shard: int, lo: int, hi: int) -> bytes:
        if _PREAD and storage.is_local(self.urls[shard]):
            return os.pread(rf.fileno(), hi - lo, lo)
        rf.seek(lo)
        return bytes(rf.read(hi - lo))

    def __repr__(self) -> str:
        return f"OpenDataset({self.snapshot.url!r}, {len(self)} samples, fields={list(self.spec.fields)})"


def open_dataset(
    url: Union[str, Manifest],
    *,
    cache_dir: Optional[str] = None,
    storage_options: Optional[dict[str, Any]] = None,
    config: Optional[StorageConfig] = None,
    decoder: str = "auto",
    max_indexes: int = MAX_INDEXES,
    generation: Optional[int] = None,
) -> OpenDataset:
    """Open a converted split, or a selection of one, for random access (``shardkit.open``).

    Args:
        url: the split folder or a selection folder (or either's ``manifest.json``), local or any fsspec URL,
            or a loaded manifest.
        generation: read this generation of an appended or corrected split (default: the newest; a selection
            reads its own).
        cache_dir: a shard cache the loader filled: shards in it are read locally (nothing is downloaded into it).
        storage_options: fsspec options (credentials, endpoint).
        config: the storage layer's options (retries, timeouts, request budget); ``cache_dir`` and
            ``storage_options`` given here win.
        decoder: the JPEG decoder (``"auto"``, ``"simplejpeg"``, ``"pil"``, ``"torchvision"``).
        max_indexes: shard sample indexes kept per process (least recently used dropped first).

    Raises:
        ManifestError: no split at ``url``, no such generation, or a selection whose parent changed.
        ShardkitError: the shards have no sample index (the message names the command that builds it).
    """
    cfg = config or StorageConfig()
    if storage_options is not None:
        cfg = replace(cfg, storage_options=dict(storage_options))
    if cache_dir is not None:
        cfg = replace(cfg, cache_dir=cache_dir)
    snap = resolve(url, generation=generation, allow_unsafe_names=cfg.allow_unsafe_names, **cfg.storage_options)
    return OpenDataset(snap, cfg, decoder, max_indexes)


__all__ = ["MAX_INDEXES", "OpenDataset", "open_dataset"]
