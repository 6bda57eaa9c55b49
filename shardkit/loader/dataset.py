"""``ShardDataset``: the iterable dataset each DataLoader worker runs.

In ``__iter__`` a worker runs :func:`shardkit.loader.stages.worker_pipeline`: it finds out
who it is (explicit ``rank``/``world_size`` or ``torch.distributed``, plus ``get_worker_info``),
asks :func:`shardkit.plan.worker_plan` what to read for the current epoch and resume point,
and runs a ``webdataset.DataPipeline`` of three stages (:mod:`shardkit.loader.read.reader`,
:mod:`shardkit.loader.batching`): plan blocks -> sequentially read raw samples in shuffled
emission order -> the planned batches, made by the dataset's decode strategy
(:attr:`ShardDataset.strategy`). A plain URL is a one-source mixture whose plan is exactly
the single-dataset plan (:mod:`shardkit.plan.epoch` plans both); several sources
(:class:`shardkit.Source`) get one reader each and a fourth stage
(:mod:`shardkit.loader.mixing`: labels, keys, per-source counts).

The epoch position (:class:`shardkit.plan.position.Position`: epoch, batches done,
topology history) reaches the workers one way, through a tiny shared tensor
created before any worker starts (:class:`shardkit.loader.transport.PositionBox`),
so :meth:`ShardDataset.set_epoch` on the main copy reaches ``persistent_workers``
too (they hold a stale pickled/forked copy of everything else). Each worker
reads it once, when its iteration starts.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Optional

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from shardkit import plan as mix
from shardkit.errors import ShardkitError, StorageError
from shardkit.format.manifest import Manifest
from shardkit.format.snapshot import Snapshot, resolve
from shardkit.loader.config import LoaderConfig, StorageConfig
from shardkit.loader.decode.strategies import DecodeStrategy, strategy_for
from shardkit.loader.fields import check_fields
from shardkit.loader.mixing import background_first
from shardkit.loader.stages import worker_pipeline
from shardkit.loader.state import DatasetIdentity
from shardkit.loader.transport import PositionBox, Ring
from shardkit.plan import LabelMode, Mixture, Schedule, Source, SourceData, as_sources, check_data, label_space
from shardkit.plan.position import Position
from shardkit.plan.split import RankSplit, rank_split
from shardkit.plan.stream import MixedStream, sizes_fingerprint
from shardkit.plan.world import World, detect
from shardkit.storage import fs as storage
from shardkit.storage.opener import check_url


class ShardDataset(IterableDataset):
    """Batches (or raw samples) of one rank's share of a shardkit dataset, for a ``DataLoader(batch_size=None)``.

    Args:
        url: dataset split directory or its ``manifest.json`` (local path or fsspec URL),
            an already loaded :class:`shardkit.Manifest`, or a mixture: a list of
            :class:`shardkit.Source` (and URLs), see :mod:`shardkit.plan`.
        config: loader options.
        rank: this process's rank; with ``world_size``. Default: from ``torch.distributed`` (else 0 of 1).
        world_size: number of ranks.
        nodes: machines the ranks run on; default from ``torchrun``'s environment, else 1 (node affinity).
        epoch_size: a weighted mixture's samples per epoch (default: the sum of the sources' sizes).
        labels: a mixture's classes merged by name (``"merged"``) or kept apart (``"per_source"``).
        generation: pin this generation of a lone dataset (None: its newest; a selection: its own).

    Every source is resolved to a :class:`~shardkit.format.snapshot.Snapshot` (a split, an appended or corrected
    split, or a selection of one) and pinned for the loader's whole run: the plan counts the samples that are
    in, the readers read them at their stored positions with their changed labels (:mod:`shardkit.loader.read.stored`).

    Each item is a batch of the config's decode strategy (:mod:`shardkit.loader.batchtypes`): a
    :class:`~shardkit.loader.batchtypes.PixelBatch` (``images`` uint8 ``[n,3,S,S]``, ``labels`` int64
    ``[n]``, ``gids``, ``keys``); with ``config.raw`` a :class:`~shardkit.loader.batchtypes.RawBatch`
    (its ``samples`` are the :class:`shardkit.format.RawSample` objects); with ``decode_on="device"``
    a :class:`~shardkit.loader.batchtypes.JpegBatch` (encoded bytes and crop geometry). With ``config.fields``
    every batch's ``extra`` holds the rows of the asked-for ``labels``, ``target``, ``text`` and ``meta``
    (:class:`~shardkit.loader.rows.FieldRows`).
    """

    def __init__(
        self,
        url: "str | Manifest | Source | Sequence[str | Source]",
        config: Optional[LoaderConfig] = None,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        nodes: Optional[int] = None,
        epoch_size: Optional[int] = None,
        labels: "LabelMode | str" = LabelMode.MERGED,
        generation: Optional[int] = None,
    ):
        super().__init__()
        self.config = config or LoaderConfig()
        if isinstance(url, Manifest):
            self.sources: tuple[Source, ...] = (Source(url.url or "<manifest>"),)
            self._origins: tuple["str | Manifest", ...] = (url,)
        else:
            self.sources = as_sources(url)
            self._origins = tuple(s.url for s in self.sources)
        if generation is not None and len(self.sources) > 1:
            raise ValueError(
                "generation= pins a lone dataset; a mixture reads each source's newest generation (a selection: its own)"
            )
        self.label_mode = LabelMode.parse(labels)  #: ``merged`` or ``per_source`` (saved in states, checked on resume)
        self._epoch_size = epoch_size
        self._build(tuple(self._resolve(i, generation) for i in range(len(self.sources))))
        world = detect(rank, world_size, nodes)
        self.rank, self.world_size, self.nodes = world.rank, world.world_size, world.nodes
        if self.config.plan.node_affinity:
            warn_few_shards(self.mixture, self.nodes)
        self._position = PositionBox()  # shared with (persistent) workers
        self._envelopes = False  # yield transport envelopes (ShardLoader's private copy only)
        self.ring: Optional[Ring] = None  #: shared batch slots of the current worker processes (private copy only)

    def _build(self, snapshots: "tuple[Snapshot, ...]") -> None:
        """Everything planned and read from the sources' snapshots (at construction, and when a state re-pins)."""
        src = self.config.source
        self.snapshots = snapshots  #: one per source: the pinned generation, its corrections and selection
        manifests = [s.manifest for s in snapshots]
        self.manifests = tuple(manifests)  #: one per source, pinned to its snapshot's generation
        self.manifest = manifests[0]  #: the lone source's manifest (a mixture's first source's)
        urls_per_source = [m.shard_urls() for m in manifests]
        for urls in urls_per_source:
            if src.allow_unsafe_names:
                for u in urls:
                    check_url(u, src)
            elif urls:
                check_url(urls[0], src)  # validated plain names: every URL has the first one's scheme
        if src.check_sizes:
            for m, urls in zip(manifests, urls_per_source):
                check_local_shards(m, urls)
        if len(manifests) > 1:
            check_data(self.sources, [_source_data(s) for s in snapshots])
        #: which mixture plans each epoch: one immutable value, replaced when a state is loaded (:meth:`replan`)
        self.schedule = Schedule(Mixture(self.sources, tuple(s.shard_sizes for s in snapshots), self._epoch_size))
        names = self.config.fields
        #: the row fields (``labels``, ``target``, ``text``, ``meta``) the workers build, checked against every source
        self.rows = check_fields(
            names,
            manifests,
            [s.url for s in self.sources],
            raw=self.config.raw,
            min_visible=self.config.min_visible,
            flip_pairs=self.config.flip_pairs,
        )
        #: the class label is handed out (the default batches, or ``"label"`` among ``fields``)
        self.yields_label = not names or "label" in names
        classed_targets = "box_labels" in names or "mask" in names
        classed = self.yields_label or "labels" in names or classed_targets  # else no class space is needed
        self.labels = label_space(
            [m.classes if classed else [] for m in manifests], self.label_mode
        )  #: the mixture's classes and label tables
        if classed_targets:
            self.labels = background_first(self.labels, [list(m.classes) for m in manifests])
            if "mask" in names and len(self.labels.classes) > 255:
                raise ValueError(
                    f"the mixture has {len(self.labels.classes)} classes but a mask holds class indices below 255: "
                    "ask for fields without 'mask', or mix fewer class names"
                )
        self.urls = [u for urls in urls_per_source for u in urls]
        self.shard_sizes = [int(n) for s in snapshots for n in s.shard_sizes]  #: samples in per shard (planned)
        self.shard_bytes = [s.bytes for m in manifests for s in m.shards]
        self.shard_offsets = self.mixture.shard_offsets

    def _resolve(self, i: int, generation: Optional[int]) -> Snapshot:
        """Source ``i``'s snapshot at ``generation`` (None: its newest); in a mixture an error names the source (a
        lone URL keeps the plain message)."""
        cfg = self.storage_config(self.sources[i])
        origin = self._origins[i]
        try:
            if not isinstance(origin, Manifest):
                check_url(origin, cfg)
            return resolve(
                origin, generation=generation, allow_unsafe_names=cfg.allow_unsafe_names, **cfg.storage_options
            )
        except ShardkitError as exc:
            if len(self.sources) == 1:
                raise
            raise type(exc)(f"source {i} ({self.sources[i].url}): {exc}") from exc

    @property
    def generations(self) -> tuple[int, ...]:
        """The generation each source is pinned to (for the loader's whole run, unless a state re-pins it)."""
        return tuple(s.generation for s in self.snapshots)

    def repin(self, generations: "Sequence[Optional[int]]") -> bool:
        """Pin source ``i`` to ``generations[i]`` (None: keep it), e.g. a loaded state's; whether anything changed
        (then running workers hold a stale copy).

        Raises:
            ManifestError: a source has no such generation (naming the ones it has).
        """
        if all(g is None or g == s.generation for g, s in zip(generations, self.snapshots)):
            return False
        self.use(
            tuple(
                s if g is None or g == s.generation else self._resolve(i, g)
                for i, (g, s) in enumerate(zip(generations, self.snapshots))
            )
        )
        return True

    def use(self, snapshots: "tuple[Snapshot, ...]") -> None:
        """Read these snapshots of the sources (one per source, as :attr:`snapshots`) from now on."""
        self._build(snapshots)

    def storage_config(self, source: Source) -> StorageConfig:
        """The loader's source options with ``source``'s own storage options, if it has any."""
        src = self.config.source
        return src if source.storage_options is None else replace(src, storage_options=source.storage_options)

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names the labels index (a mixture's merged or per-source classes)."""
        return self.labels.classes

    @property
    def mixture(self) -> Mixture:
        """The mixture that plans the epochs (after a remix: from the switch on)."""
        return self.schedule.mixture

    def mixture_for(self, epoch: int) -> Mixture:
        """The mixture that plans ``epoch`` (a remixed state finishes its epoch with the saved one)."""
        return self.schedule.mixture_for(epoch)

    @property
    def identity(self) -> DatasetIdentity:
        """What a loader state is saved from and checked against (:mod:`shardkit.loader.state`)."""
        return DatasetIdentity(self.snapshots, self.schedule, self.label_mode, self.classes, self.config.plan)

    def replan(self, schedule: Schedule, epoch: int) -> bool:
        """Plan with ``schedule`` (a loaded state's, :func:`shardkit.loader.state.resume_state`); whether it plans
        ``epoch`` or the epochs after it with other mixtures than before (then running workers hold a stale copy)."""
        changed = not self.schedule.plans_like(schedule, epoch)
        self.schedule = schedule
        return changed

    def source_rows(self, m: Mixture) -> np.ndarray:
        """Index among this loader's sources of each source of ``m`` (found by shard sizes)."""
        if m.shard_base.shape == self.mixture.shard_base.shape and all(
            np.array_equal(a, b) for a, b in zip(m.shard_sizes, self.mixture.shard_sizes)
        ):
            return np.arange(len(self.sources), dtype=np.int64)
        mine = [sizes_fingerprint(s) for s in self.mixture.shard_sizes]
        return np.array([mine.index(sizes_fingerprint(s)) for s in m.shard_sizes], np.int64)

    def sources_of(self, gids: np.ndarray, epoch: int) -> np.ndarray:
        """Index among this loader's sources of mixture sample ids ``gids`` of ``epoch``."""
        m = self.mixture_for(epoch)
        return self.source_rows(m)[m.source_of(gids)]

    def remix(self, now: Mixture, later: Mixture, epoch: int) -> None:
        """Plan ``epoch`` with ``now`` and the epochs after it with ``later`` (:meth:`replan` with :meth:`Schedule.switching`)."""
        self.replan(Schedule.switching(now, later, epoch), epoch)

    @functools.cached_property
    def strategy(self) -> DecodeStrategy:
        """The output mode, chosen once from the config (:func:`shardkit.loader.decode.strategies.strategy_for`)."""
        return strategy_for(self.config)

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

    def stream(self, position: Optional[Position] = None) -> MixedStream:
        """The epoch's stream after the elastic history (every rank's samples, in stream order)."""
        pos = self.position if position is None else position
        return mix.epoch_stream(
            self.mixture_for(pos.epoch),
            self.config.plan,
            pos.epoch,
            pos.history,
            world_size=self.world_size,
            nodes=self.nodes,
        )

    def rank_split(self, position: Optional[Position] = None) -> RankSplit:
        """How the epoch's stream is split over ranks (padded / dropped counts)."""
        return rank_split(len(self.stream(position)), self.world_size, self.config.plan)

    def __len__(self) -> int:
        """Batches this rank yields in a full epoch (the current one: fractional repeats vary it by a sample or so)."""
        return self.num_batches(self.epoch)

    def num_batches(self, epoch: int) -> int:
        """Batches this rank yields in the whole of ``epoch``."""
        return rank_split(len(self.stream(Position(epoch))), self.world_size, self.config.plan).num_batches

    def world(self) -> World:
        """This process's :class:`World` (call inside a worker to get the worker too)."""
        info = get_worker_info()
        if info is None:
            return World(self.rank, self.world_size, 0, 1, self.nodes)
        return World(self.rank, self.world_size, info.id, info.num_workers, self.nodes)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        """This worker's batches of the published position (:func:`~shardkit.loader.stages.worker_pipeline`)."""
        return worker_pipeline(self)


def warn_few_shards(mixture: Mixture, nodes: int) -> None:
    """Warn when a source has fewer than :data:`shardkit.plan.affinity.MIN_SHARDS_PER_NODE` shards per node
    (node affinity then shuffles each epoch among too few shards: docs/design/node-affinity.md)."""
    import warnings

    from shardkit.plan.affinity import MIN_SHARDS_PER_NODE

    for s, sizes in zip(mixture.sources, mixture.shard_sizes):
        if nodes > 1 and len(sizes) < MIN_SHARDS_PER_NODE * nodes:
            warnings.warn(
                f"{s.url}: {len(sizes)} shards over {nodes} nodes is fewer than {MIN_SHARDS_PER_NODE} per node; node "
                "affinity shuffles each node's share among too few shards (convert with smaller shards, or leave "
                "node_affinity off)",
                stacklevel=3,
            )


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
            raise StorageError(
                f"{url}: not found (the manifest lists this shard); restore it or convert again"
            ) from None
        except OSError as exc:
            raise StorageError(f"{url}: cannot stat shard ({exc.strerror or exc})") from None
        if size != info.bytes:
            raise StorageError(
                f"{url}: shard has {size} bytes, the manifest says {info.bytes} (truncated or replaced since conversion?); "
                "`shardkit verify` checks every shard's content; check_sizes=False serves what is readable"
            )


def _source_data(snap: Snapshot) -> SourceData:
    """What the mixture checks need from one source's snapshot (two selections of one split are two sources)."""
    m = snap.manifest
    sums = [s.sha256 for s in m.shards]
    text = ",".join(sums) if all(sums) else f"{m.url}|{m.shard_sizes}"  # without checksums: the same place
    if not snap.subset.is_everything:
        text += "|" + snap.subset.fingerprint()
    identity = hashlib.sha256(text.encode()).hexdigest()
    image = tuple((k, m.options.get(k)) for k in ("short_side", "max_side"))
    return SourceData(m.url, identity=identity, num_samples=snap.num_samples, image=image)
