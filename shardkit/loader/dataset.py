"""``ShardDataset``: the iterable dataset each DataLoader worker runs.

In ``__iter__`` a worker finds out who it is (explicit ``rank``/``world_size``
or ``torch.distributed``, plus ``get_worker_info``), asks
:func:`shardkit.plan.worker_plan` what to read for the current epoch and
resume point, and runs a ``webdataset.DataPipeline`` of three stages
(:mod:`shardkit.loader.read`, :mod:`shardkit.loader.batching`): plan blocks -> sequentially read raw
samples in shuffled emission order -> decoded uint8 batches.

The epoch position (:class:`shardkit.position.Position`: epoch, batches done,
topology history) reaches the workers one way, through a tiny shared tensor
created before any worker starts (:class:`shardkit.loader.transport.PositionBox`),
so :meth:`ShardDataset.set_epoch` on the main copy reaches ``persistent_workers``
too (they hold a stale pickled/forked copy of everything else). Each worker
reads it once, when its iteration starts.
"""

from __future__ import annotations

import copy
import os
from typing import Iterator, Optional, Sequence

import torch
from torch.utils.data import IterableDataset, get_worker_info

from .. import storage
from ..errors import StorageError
from ..manifest import Manifest, load_manifest
from ..plan import RankSplit, Stream, epoch_stream, rank_split, shard_offsets, worker_plan
from ..position import Position
from ..world import World, detect
from .batching import Batch, BatchSpec, decode_batches, plain_alloc
from .config import LoaderConfig
from .decode import CropDecoder
from .read import BlockReader, indexed_shards, plan_blocks, read_blocks
from .sources import ShardOpener, check_url
from .stats import Counters
from .transport import Envelope, PositionBox, Ring, envelopes, failures_as_items


class ShardDataset(IterableDataset):
    """Batches (or raw samples) of one rank's share of a shardkit dataset, for a ``DataLoader(batch_size=None)``.

    Args:
        url: dataset split directory or its ``manifest.json`` (local path or fsspec URL),
            or an already loaded :class:`shardkit.Manifest`.
        config: loader options.
        rank: this process's rank; with ``world_size``. Default: from ``torch.distributed`` (else 0 of 1).
        world_size: number of ranks.

    Each item is a :class:`shardkit.loader.batching.Batch` (``images`` uint8 ``[n,3,S,S]``,
    ``labels`` int64 ``[n]``, ``gids``, ``keys``); with ``config.raw`` its ``raw`` field holds the
    :class:`shardkit.loader.reader.RawSample` objects instead of images.
    """

    def __init__(self, url: "str | Manifest", config: Optional[LoaderConfig] = None, *, rank: Optional[int] = None, world_size: Optional[int] = None):
        super().__init__()
        self.config = config or LoaderConfig()
        src = self.config.source
        if isinstance(url, Manifest):
            self.manifest = url
        else:
            check_url(url, src)
            self.manifest = load_manifest(url, allow_unsafe_names=src.allow_unsafe_names, **src.storage_options)
        self.urls = self.manifest.shard_urls()
        if src.allow_unsafe_names:
            for u in self.urls:
                check_url(u, src)
        elif self.urls:
            check_url(self.urls[0], src)  # validated plain names: every URL has the first one's scheme
        if src.check_sizes:
            check_local_shards(self.manifest, self.urls)
        self.shard_sizes = self.manifest.shard_sizes
        self.shard_bytes = [s.bytes for s in self.manifest.shards]
        self.shard_offsets = shard_offsets(self.shard_sizes)
        world = detect(rank, world_size)
        self.rank, self.world_size = world.rank, world.world_size
        self._position = PositionBox()  # shared with (persistent) workers
        self._envelopes = False  # yield transport envelopes (ShardLoader's private copy only)
        self.ring: Optional[Ring] = None  #: shared batch slots of the current worker processes (private copy only)

    def for_loader(self) -> "ShardDataset":
        """A shallow copy for :class:`ShardLoader`: it yields :class:`Envelope` objects and writes into
        :attr:`ring` when one is set (position stays shared), so no other DataLoader's workers take a slot."""
        ds = copy.copy(self)
        ds._envelopes, ds.ring = True, None
        return ds

    # ------------------------------------------------------------------ position

    @property
    def position(self) -> Position:
        """The position the next iteration starts from (in workers too)."""
        return self._position.read()

    @property
    def epoch(self) -> int:
        return self.position.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (reaches persistent workers on their next ``iter``).

        For your own ``DataLoader``; a :class:`ShardLoader` owns its dataset's position (use
        ``loader.set_epoch``).
        """
        self.publish(Position(epoch))

    def publish(self, position: Position) -> None:
        """Make ``position`` the one the next iteration starts from (call between iterations).

        :class:`ShardLoader` owns the position of its dataset and publishes it when an
        iteration starts; use this directly only with your own ``DataLoader``.
        """
        self._position.write(position)

    # ------------------------------------------------------------------ plan

    def stream(self, position: Optional[Position] = None) -> Stream:
        """The epoch's stream after the elastic history (every rank's samples, in stream order)."""
        pos = self.position if position is None else position
        return epoch_stream(self.shard_sizes, self.config.plan, pos.epoch, pos.history)

    def rank_split(self, position: Optional[Position] = None) -> RankSplit:
        """How the epoch's stream is split over ranks (padded / dropped counts)."""
        return rank_split(len(self.stream(position)), self.world_size, self.config.plan)

    def __len__(self) -> int:
        """Batches this rank yields in a full epoch."""
        full = epoch_stream(self.shard_sizes, self.config.plan, 0, ())
        return rank_split(len(full), self.world_size, self.config.plan).num_batches

    def world(self) -> World:
        """This process's :class:`World` (call inside a worker to get the worker too)."""
        info = get_worker_info()
        if info is None:
            return World(self.rank, self.world_size, 0, 1)
        return World(self.rank, self.world_size, info.id, info.num_workers)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator["Batch | Envelope"]:
        import webdataset as wds

        cfg = self.config
        world = self.world()
        pos = self.position  # read once: this iteration's plan
        epoch = pos.epoch
        work = worker_plan(self.stream(pos), cfg.plan, world, epoch=epoch, batches_done=pos.batches_done, generation=len(pos.history))
        num_batches = -(-work.num_samples // cfg.batch_size)
        counters = Counters()
        reader = BlockReader(self.urls, self.shard_bytes, self.shard_offsets, ShardOpener(cfg.source), counters,
                             num_classes=len(self.manifest.classes) or None, sha256=indexed_shards(self.manifest, self.urls))
        decoder = None if cfg.raw else CropDecoder(cfg.image.at_size(pos.size), cfg.seed)  # size: set_epoch(..., size=)
        in_worker = get_worker_info() is not None
        writer = self.ring.writer(world.worker) if self._envelopes and self.ring is not None and in_worker and not cfg.raw else None
        spec = BatchSpec(cfg.batch_size, num_batches, epoch, cfg.strict, cfg.raw, alloc=writer or plain_alloc)
        stages = [
            _Const(work.blocks),
            _Stage(read_blocks, reader=reader, chunk=cfg.batch_size),
            _Stage(decode_batches, spec=spec, decoder=decoder, counters=counters),
        ]
        if self._envelopes:
            stages.append(_Stage(envelopes, worker=world.worker, counters=counters, writer=writer))
            if in_worker:
                stages.append(_Stage(failures_as_items, worker=world.worker))
        pipeline = wds.DataPipeline(*stages)
        return iter(pipeline)


def check_local_shards(manifest: Manifest, urls: Sequence[str]) -> None:
    """Refuse a dataset whose local shards are missing or not the size the manifest records (one stat per shard).

    Raises:
        StorageError: naming the first such shard (content is what ``shardkit verify`` checks).
    """
    for info, url in zip(manifest.shards, urls):
        if not storage.is_local(url):
            continue
        path = storage.local_path(url)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise StorageError(f"{url}: not found (the manifest lists this shard); restore it or convert again") from None
        except OSError as exc:
            raise StorageError(f"{url}: cannot stat shard ({exc.strerror or exc})") from None
        if size != info.bytes:
            raise StorageError(
                f"{url}: shard has {size} bytes, the manifest says {info.bytes} (truncated or replaced since conversion?); "
                "`shardkit verify` checks every shard's content; check_sizes=False serves what is readable"
            )


class _Const:
    """Pipeline source: the plan's blocks (picklable)."""

    def __init__(self, blocks: tuple) -> None:
        self.blocks = blocks

    def __call__(self) -> Iterator:
        return plan_blocks(self.blocks)


class _Stage:
    """A generator stage with keyword arguments bound (picklable, unlike a lambda)."""

    def __init__(self, fn, **kw) -> None:  # type: ignore[no-untyped-def]
        self.fn, self.kw = fn, kw

    def __call__(self, src: Iterator) -> Iterator:
        return self.fn(src, **self.kw)

