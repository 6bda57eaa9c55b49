"""The worker pool: the one owner of a :class:`ShardLoader <shardkit.loader.ShardLoader>`'s ``DataLoader``.

It starts the worker processes (``DataLoader(batch_size=None)`` over a private copy of the
dataset, so no other DataLoader's workers take a slot), sizes the shared batch slots for them
(:class:`~shardkit.loader.transport.Ring`, only where the decode strategy sends pixels),
receives their envelopes, turns a dead worker or a worker's error into one line, and stops
them. Every use of torch's DataLoader internals goes through :mod:`shardkit.private_apis`.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch.utils.data import DataLoader

from shardkit.errors import ShardkitError
from shardkit.loader.dataset import ShardDataset
from shardkit.loader.transport import Envelope, Ring, WorkerFailure, ring_slots
from shardkit.loader.worker_death import dead_workers, death_message, reported_dead
from shardkit.private_apis import dataloader_iterator, shutdown_dataloader, unguarded_main_line

log = logging.getLogger("shardkit.loader")


def check_main_guard(method: Optional[str] = None) -> None:
    """:class:`ShardkitError` if worker processes started with ``method`` (None: multiprocessing's default) would
    re-run the caller: ``spawn`` and ``forkserver`` workers import the ``__main__`` script, so a script iterating a
    loader at its top level outside ``if __name__ == "__main__":`` would iterate it again in every worker, which
    multiprocessing refuses there (the worker dies). The rule is the converter's too
    (:func:`shardkit.private_apis.unguarded_main_line`)."""
    method = method or multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if method == "fork":
        return  # forked workers do not import the script
    where = unguarded_main_line()
    if where is not None:
        path, line = where
        raise ShardkitError(
            f"{path}: line {line} iterates a shardkit loader with {method} worker processes outside "
            f'if __name__ == "__main__": (each worker imports the script and would run it again); put the loop '
            "under that guard, or pass num_workers=0"
        )


class WorkerPool:
    """The DataLoader and its worker processes for one loader.

    Args:
        dataset: the loader's dataset (its config holds the DataLoader options).
    """

    def __init__(self, dataset: ShardDataset):
        self.dataset = dataset
        self.config = dataset.config
        self._dl: Optional[DataLoader] = None
        self._copy: Optional[ShardDataset] = None  # the DataLoader's private copy of the dataset
        self._ring_size = 0  # image size the current ring's slots hold
        self._num_workers = self.config.workers.num_workers or 0  # resolved by LoaderConfig (None: its default)

    @property
    def ring(self) -> Optional[Ring]:
        """The shared batch slots of the current worker processes (``None``: none, or no workers yet)."""
        return self._copy.ring if self._copy is not None else None

    def dataloader(self, size: int = 0) -> DataLoader:
        """The DataLoader for the next iteration, with batch slots for output ``size`` (0: the configured one).

        A DataLoader whose worker died is replaced; one without persistent workers gets a new ring
        (every iteration starts new worker processes).
        """
        if self._dl is not None and dead_workers(dataloader_iterator(self._dl), wait_s=0):
            self.close()  # a worker died (torch's SIGCHLD handler may have raised anywhere): start fresh ones
        if self._dl is None:
            c = self.config
            nw = self._num_workers
            if nw > 0:
                check_main_guard(c.workers.multiprocessing_context.value if c.workers.multiprocessing_context else None)
            persistent = (nw > 0) if c.workers.persistent_workers is None else (c.workers.persistent_workers and nw > 0)
            kw: dict[str, Any] = {}
            if nw > 0:
                kw["prefetch_factor"] = c.workers.prefetch_factor
                kw["persistent_workers"] = persistent
                if c.workers.multiprocessing_context:
                    kw["multiprocessing_context"] = c.workers.multiprocessing_context.value
                if c.workers.timeout:
                    kw["timeout"] = c.workers.timeout
            self._copy = self.dataset.for_loader()  # private: only this DataLoader's workers see the ring
            self._dl = DataLoader(
                self._copy,
                batch_size=None,
                num_workers=nw,
                pin_memory=c.workers.pin_memory and torch.cuda.is_available(),
                **kw,
            )
            self._new_ring(size)
        elif not self._dl.persistent_workers:
            self._new_ring(size)  # every iteration starts new worker processes: a new ring for them
        return self._dl

    def _new_ring(self, size: int) -> None:
        """Shared batch slots for the worker processes about to start (set before they fork or spawn)."""
        c, strategy = self.config, self.dataset.strategy
        assert self._copy is not None
        if (
            self._num_workers > 0 and c.workers.reuse_buffers and strategy.uses_ring
        ):  # raw samples, encoded JPEGs: no pixels
            # slots for the largest size seen so far: a smaller batch uses the start of its slot
            # (untouched pages cost no memory), so a progressive-resolution run keeps its slots
            self._ring_size = max(self._ring_size, c.image.size, size)
            self._copy.ring = Ring(
                self._num_workers,
                ring_slots(c.workers.prefetch_factor),
                strategy.slot_bytes(c.plan.batch_size, self._ring_size),
            )
        else:
            self._copy.ring = None

    def warn_if_slots_too_small(self, size: int) -> None:
        """Say so when running persistent workers' slots cannot hold batches of ``size`` (they go to new memory)."""
        if self._dl is not None and self._dl.persistent_workers and self._ring_size and size > self._ring_size:
            log.warning(
                "shardkit: size %d is larger than the shared batch slots of the running workers (%d): batches go to new "
                "memory until the workers restart (loader.close()); pass the schedule's largest size to load(size=...)",
                size,
                self._ring_size,
            )

    def envelopes(self, size: int = 0) -> Iterator[Envelope]:
        """Start an iteration (workers now, for a non-persistent DataLoader) and return its envelopes.

        A worker's error ends it as that error (one line, not DataLoader's traceback dump); a worker
        that died ends it as a ``RuntimeError`` naming the worker and how it died. Either way the
        workers are stopped: the next iteration starts fresh ones at the batches already handed out.
        """
        return self._receive(iter(self.dataloader(size)))

    def _receive(self, it: Iterator[Any]) -> Iterator[Envelope]:
        while True:
            try:
                env: Envelope | WorkerFailure = next(it)
            except StopIteration:
                return
            except BaseException as exc:
                # A worker died or raised: its DataLoader (persistent workers included) cannot be
                # reused; the next iter() starts fresh workers at the batches already handed out.
                dead = (dead_workers(it) or reported_dead(exc)) if isinstance(exc, Exception) else []
                self.close()
                if dead and not isinstance(exc, ShardkitError):
                    # e.g. ConnectionResetError while receiving a batch from a worker the OOM killer took
                    raise RuntimeError(death_message(dead, exc)) from exc
                raise
            if isinstance(env, WorkerFailure):  # a worker's error, as one line (not DataLoader's traceback dump)
                self.close()
                raise env.exception() from None
            yield env
            del env  # the user's references alone decide when a batch's slot is released

    def died(self, exc: RuntimeError) -> Optional[RuntimeError]:
        """The one-line error for torch's SIGCHLD watchdog's ``exc`` ("... is killed by signal", raised at any point
        of the main thread), the workers stopped; ``None`` if ``exc`` is not that."""
        dead = reported_dead(exc)
        if not dead:
            return None
        try:
            self.close()
        except RuntimeError:
            pass
        return RuntimeError(death_message(dead, exc))

    def close(self) -> None:
        """Stop the worker processes now (persistent ones too); the next :meth:`dataloader` starts new ones."""
        dl, self._dl, self._copy = self._dl, None, None
        if dl is not None:
            shutdown_dataloader(dl)
