"""``ShardLoader``: the main-process side -- DataLoader, epochs, stats, resumable state.

``shardkit.load(url, ...)`` is the one call most users need::

    loader = shardkit.load("s3://bucket/ds/train", batch_size=256, num_workers=8)
    for epoch in range(90):
        loader.set_epoch(epoch)               # optional: a finished pass advances the epoch
        for images, labels in loader:         # uint8 [B,3,224,224], int64 [B]
            ...
        print(loader.stats)

State dicts are plain dicts (put them inside your ``torch.save``): the format
version, the dataset fingerprint, the plan options, the epoch, the segments
of the epoch already read with other topologies and the batches consumed with
the current one. Loading on the same ranks x workers resumes exactly (the
same remaining batches, in the same order, without reading or decoding the
consumed ones); on another topology the rest of the epoch is re-planned
(elastic resume), still covering exactly the samples not yet seen.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import torch

from shardkit.loader.dataset import ShardDataset
from shardkit.loader.decode.strategies import Consumer, DeviceDecoders
from shardkit.loader.doctor import epoch_report
from shardkit.loader.pool import WorkerPool
from shardkit.loader.state import resume_state, saved_generations, state_of
from shardkit.loader.stats import EpochMeter, LoaderStats
from shardkit.loader.view import View, describe_views, scaled_views
from shardkit.plan import RankSplit
from shardkit.plan.position import Position

log = logging.getLogger("shardkit.loader")


@dataclass(frozen=True)
class EpochInfo(RankSplit):
    """:class:`~shardkit.plan.epoch.RankSplit` of the epoch the next ``iter()`` gives, saying which.

    Attributes:
        epoch: the epoch these figures describe.
        batches_done: batches of it already handed out (a pass left early continues after them).
    """

    epoch: int
    batches_done: int


class ShardLoader:
    """Iterable of ``(images uint8 [B,3,S,S], labels int64 [B])`` batches for this rank (with ``fields=``:
    dicts of those fields, in that order, :mod:`shardkit.loader.fields`).

    Args:
        dataset: the :class:`ShardDataset` (its config holds the DataLoader options).
        with_keys: also yield each batch's sample keys: ``(images, labels, keys)`` (in a mixture
            qualified by source, ``"1/00000042"``).
        with_source: also yield each sample's source index (int64 ``[B]``), last in the tuple.
    """

    def __init__(self, dataset: ShardDataset, *, with_keys: bool = False, with_source: bool = False):
        self.dataset = dataset
        self.config = dataset.config
        self.with_keys = with_keys
        self.with_source = with_source
        #: the fields of each (dict) batch, in order (``()``: tuples)
        self.fields: tuple[str, ...] = dataset.config.fields
        if self.fields and (with_keys or with_source):
            raise ValueError(
                "with_keys/with_source and fields= are exclusive: name 'key' and 'source' among the fields instead"
            )
        self._pool = WorkerPool(dataset)  #: the DataLoader and its worker processes
        self._device_decoders = DeviceDecoders(self.config.image)  # decode_on="device": one per (device, size)
        self._decode_device = torch.device("cpu")  # where the current iteration decodes decode_on="device" batches
        #: where the epoch stands: the one value state_dict/load_state_dict/set_epoch read and replace;
        #: advanced per batch handed out, published to the workers when an iteration starts
        self._position: Position = dataset.position
        self._meter = EpochMeter(self._position.epoch)  # what :attr:`stats` reports

    def __len__(self) -> int:
        """Batches this rank yields in the whole epoch the next ``iter()`` gives (the same on every rank).

        Epochs can differ by a batch (a mixture's fractional ``repeat``): ``len()`` is always the
        one of the epoch the next ``iter()`` belongs to (:attr:`epoch_info` says which).
        An iteration left early (``break``) keeps its place: iterating again continues the
        same epoch with the batches not yet handed out (``len()`` minus those), as a resume
        from :meth:`state_dict` would. :meth:`restart_epoch` starts the epoch over instead.
        A loop that stopped after exactly ``len()`` batches without asking for one more
        (Lightning, ``zip``, ``itertools.islice``) has finished the epoch: ``len()`` and the
        next ``iter()`` are the next epoch's.
        """
        return self.num_batches()

    def num_batches(self, epoch: Optional[int] = None) -> int:
        """Batches this rank yields in the whole of ``epoch`` (None: the epoch the next ``iter()`` gives, as ``len()``)."""
        return self.dataset.num_batches(self._upcoming().epoch if epoch is None else epoch)

    def _upcoming(self) -> Position:
        """The position the next ``iter()`` starts from: an epoch whose batches were all handed out
        (a loop that stopped after exactly ``len()`` batches) is the next epoch's start."""
        pos = self._position
        if pos.batches_done >= self.dataset.rank_split(pos).num_batches:
            return pos.next_epoch()
        return pos

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names the labels index (a mixture's: merged by name, or ``"i/name"`` per source)."""
        return self.dataset.classes

    @property
    def flip_pairs(self) -> tuple[tuple[int, int], ...]:
        """The keypoint index pairs a mirror swaps (the ``flip_pairs`` option, else the manifest's; ``()`` without
        keypoints): pass them on, e.g. ``GpuAugment(..., flip_pairs=loader.flip_pairs)``."""
        return tuple(self.dataset.rows.flip_pairs)

    def close(self) -> None:
        """Stop the worker processes now (persistent ones too); the loader stays usable (new workers on the next ``iter``)."""
        self._pool.close()

    def __enter__(self) -> "ShardLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return self.iter_on("cpu")

    def iter_on(self, device: "torch.device | str") -> Iterator[Any]:
        """Iterate, with ``decode_on="device"`` batches decoded on ``device`` (``iter(loader)``: on the CPU).

        :class:`~shardkit.loader.prefetch.DevicePrefetcher` iterates the loader this way, inside its side
        stream. With ``decode_on="worker"`` the same as ``iter(loader)``.
        """
        self._decode_device = torch.device(device)
        try:
            yield from self._iterate()
        except RuntimeError as exc:
            # torch's SIGCHLD watchdog raises "... is killed by signal" at any point of the main
            # thread (not only in next()): the same one-line story as a death seen in next()
            died = self._pool.died(exc)
            if died is None:
                raise
            raise died from exc

    def _iterate(self) -> Iterator[Any]:
        # an epoch consumed by a loop that stopped after len() batches without asking for one
        # more (Lightning, zip, islice): this iteration is the next epoch, not an empty one
        self._position = self._upcoming()
        self.dataset.publish(self._position)  # the workers of this iteration read it when they start
        meter, strategy = self._meter, self.dataset.strategy
        meter.start(self._position.epoch)
        consumer = self._consumer()
        envelopes = self._pool.envelopes(self._position.size)
        while True:
            t = time.perf_counter()
            env = next(envelopes, None)
            if env is None:
                break
            meter.wait_s += time.perf_counter() - t
            meter.counters[env.worker] = env.counters
            batch = env.batch
            del env
            try:  # e.g. decode_on="device": decoded here, before it counts as handed out
                batch = strategy.finish(batch, consumer)
            except Exception:
                self.close()  # e.g. strict=True: as a worker's DataError, the batch is not handed out
                raise
            meter.batches += 1
            self._position = self._position.advanced()  # a batch counts as consumed once handed out
            meter.t1 = time.perf_counter()
            # A batch whose samples were all skipped (logged, counted) is still yielded, empty:
            # every rank must yield the same number of batches or DDP waits forever.
            if self.fields:
                out = strategy.deliver_fields(batch, self.fields, self._sources)
            else:
                out = strategy.deliver(
                    batch, with_keys=self.with_keys, sources=self._sources if self.with_source else None
                )
            yield out
            del out, batch  # the user's references alone decide when a batch's slot is released
        meter.t1 = time.perf_counter()
        if self.config.log_every_epoch:
            log.info("%s", self.report())
        self._position = self._position.next_epoch()  # a finished pass advances the epoch
        self.dataset.publish(self._position)

    def _consumer(self) -> Consumer:
        """What this iteration's strategy may use to finish a batch here (device decoders, this process's counters)."""
        epoch, device = self._position.epoch, self._decode_device
        mixture = len(self.dataset.sources) > 1
        return Consumer(
            lambda size: self.device_decoder(device, size),
            strict=self.config.strict,
            counters=self._meter.counters,
            source_of=(lambda g: self.dataset.sources_of(g, epoch)) if mixture else None,
        )

    def _sources(self, batch: Any) -> torch.Tensor:
        """Each sample's source index (``with_source=True``)."""
        return torch.from_numpy(self.dataset.sources_of(batch.gids.numpy(), self._position.epoch))

    # ------------------------------------------------------------------ epochs and stats

    @property
    def epoch(self) -> int:
        """The epoch of the pass in progress, or of the last batch handed out (inside a loop, the batches' epoch).

        After a whole pass it is the next epoch; after a pass stopped at exactly ``len()`` batches it is still that
        pass's until the next ``iter()`` (``len()`` and :attr:`epoch_info` ``.epoch`` describe the pass ``iter()`` gives)."""
        return self._position.epoch

    def set_epoch(self, epoch: int, size: Optional[int] = None) -> None:
        """Make ``epoch`` the current epoch (shard order and shuffles change with it).

        Another epoch than the current one starts from its beginning on the next
        ``iter()``. The current epoch keeps its position, so the usual loop
        ``for epoch in range(start, n): loader.set_epoch(epoch)`` continues an
        epoch restored by :meth:`load_state_dict` instead of restarting it (a
        finished pass has already moved the loader to the next epoch).

        Args:
            epoch: the epoch.
            size: output image size from the next ``iter()`` on (progressive resolution),
                kept for later epochs until set again and saved in :meth:`state_dict`;
                persistent workers keep running. Crops stay a function of (seed, epoch,
                sample): only the output resolution changes. ``None``: unchanged. The
                shared batch slots hold the largest size seen when the workers started;
                a larger size goes into new memory per batch until they restart, so pass
                the largest size of a schedule to :func:`load` (``size=``). With ``views=``:
                the first view's size; every view is scaled by ``size / views[0].size``
                (rounded to the nearest int, halves up, at least 1: :attr:`views`); the slots
                hold the configured views, so configure them at the schedule's largest size.
        """
        if size is not None and (type(size) is not int or size < 1):
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        up = self._upcoming()  # a pass stopped at exactly len() has finished its epoch: set_epoch(it) replays it
        pos = up if epoch == up.epoch else up.started(epoch)
        if size is not None:
            pos = pos.resized(0 if size == self._configured_size else size)
            if self.config.image.views:
                self._warn_if_views_too_large(size)
            else:
                self._pool.warn_if_slots_too_small(size)
        self._position = pos

    @property
    def _configured_size(self) -> int:
        """The size ``set_epoch(size=)`` is relative to: the single crop's, or the first view's."""
        image = self.config.image
        return image.views[0].size if image.views else image.size

    def _warn_if_views_too_large(self, size: int) -> None:
        """The shared slots hold the configured views: a larger reference ``size`` goes into new memory per batch."""
        c = self.config
        if (
            size > self._configured_size
            and c.workers.reuse_buffers
            and c.workers.num_workers
            and self.dataset.strategy.uses_ring
        ):
            log.warning(
                "shardkit: size %d is larger than the first view's configured size (%d): the shared batch slots hold "
                "the configured views, so batches of views %s go to new memory; configure the views at the "
                "schedule's largest size",
                size,
                self._configured_size,
                describe_views(scaled_views(c.image.views, size)),
            )

    @property
    def size(self) -> int:
        """The output image size of the next batches (the configured one unless :meth:`set_epoch` set another);
        with ``views=`` the first view's size (:attr:`views` has them all)."""
        return self._position.size or self._configured_size

    @property
    def views(self) -> tuple[View, ...]:
        """The :class:`~shardkit.View` groups of the next batches at their current sizes (``set_epoch(size=)``
        scales them all with the first), ``()`` without ``views=``."""
        return scaled_views(self.config.image.views, self._position.size)

    def restart_epoch(self) -> None:
        """Start the current epoch over on the next ``iter()`` (after an iteration left early)."""
        up = self._upcoming()
        self._position = up.started(up.epoch)

    def device_decoder(self, device: "torch.device | str" = "cpu", size: int = 0) -> Any:
        """The :class:`~shardkit.loader.decode.device.DeviceDecoder` that decodes this loader's batches of output ``size``
        (0: the configured one) on ``device`` with ``decode_on="device"``; its ``stats`` count batched,
        fallback, retried and corrupt samples."""
        return self._device_decoders.get(device, size)

    @property
    def epoch_info(self) -> "EpochInfo":
        """The epoch the next ``iter()`` gives and how it is split over ranks: ``epoch``, ``batches_done``
        (already handed out), ``num_batches`` (``len()``), ``padded`` and ``dropped`` samples. After a
        finished pass (whole, or stopped at exactly ``len()``) that is the next epoch."""
        pos = self._upcoming()
        return EpochInfo(**vars(self.dataset.rank_split(pos)), epoch=pos.epoch, batches_done=pos.batches_done)

    @property
    def stats(self) -> LoaderStats:
        """Counters of the current or last epoch (samples, skipped, bytes, time waiting...)."""
        return self._meter.stats(len(self.dataset.sources))

    def report(self) -> str:
        """One line about the current or last epoch: the share of it the loop waited for data, img/s,
        skipped samples, read retries and the slowest worker stage (``log_every_epoch=True`` logs it);
        with ``decode_on="device"``, where and by which library the batches were decoded; with ``views=``,
        the views of the next batches (count x size per group); with target fields, the boxes dropped
        (less than ``min_visible`` of their area left in the crop, or a crowd region)."""
        views = f" | views {describe_views(self.views)}" if self.config.image.views else ""
        stats = self.stats
        dropped = f", {stats.boxes_dropped} boxes dropped" if self.dataset.rows.targets else ""
        return epoch_report(self._meter.epoch, stats) + dropped + views + self._device_decoders.where()

    # ------------------------------------------------------------------ state

    def _topology(self) -> tuple[int, int, int]:
        return self.dataset.world_size, max(1, self.config.workers.num_workers or 0), self.dataset.nodes

    def state_dict(self) -> dict[str, Any]:
        """A plain dict with everything needed to continue this epoch exactly (put it in your checkpoint)."""
        ws, nw, nodes = self._topology()
        pos = self._upcoming()  # a finished epoch is saved as the next one's start
        return state_of(pos, self.dataset.identity, world_size=ws, num_workers=nw, nodes=nodes)

    def load_state_dict(self, state: dict[str, Any], *, allow_remix: bool = False) -> None:
        """Continue from ``state``: exactly on the same topology, re-planned (elastic) on another one.

        Args:
            state: what :meth:`state_dict` returned.
            allow_remix: accept a state saved with other sources or weights: the rest of its epoch
                keeps the saved plan, the new mixture starts at the next epoch boundary.

        The state's generation wins: a state saved before an append (or a new correction) re-pins each source to
        the generation it was saved at, so its epoch continues exactly; ``len()`` and ``classes`` are then that
        generation's. A loader opened without a state reads the newest generation.

        Raises:
            ShardkitError: the state is from another dataset (shard sizes, contents or classes differ) or
                another mixture (every difference named), other ordering options, an unknown format, or a
                field has the wrong type or range (named).
        """
        ws, nw, nodes = self._topology()
        before = self.dataset.snapshots
        repinned = self.dataset.repin(saved_generations(state, before))
        try:
            resumed = resume_state(
                state, self.dataset.identity, world_size=ws, num_workers=nw, nodes=nodes, allow_remix=allow_remix
            )
        except BaseException:
            if repinned:
                self.dataset.use(before)  # a refused state leaves the loader as it was
            raise
        if repinned:
            self.close()  # the workers hold a copy of the dataset: new ones read the state's generation
        if self.dataset.replan(resumed.schedule, resumed.position.epoch):
            self.close()  # the workers hold a copy of the dataset: new ones plan with the new mixtures
        self._position = resumed.position
