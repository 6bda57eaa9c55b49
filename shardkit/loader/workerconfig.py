"""The ``DataLoader`` worker processes and shared batch slots: :class:`WorkerConfig` (a group of
:class:`~shardkit.loader.config.LoaderConfig`, re-exported there)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from shardkit.choices import Choice, check_types


class MultiprocessingContext(Choice):
    """How DataLoader worker processes start."""

    FORK = "fork"
    SPAWN = "spawn"
    FORKSERVER = "forkserver"


def default_num_workers() -> int:
    """The CPUs this process may run on, at most 8 (the ``num_workers`` default)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, cpus)


@dataclass(frozen=True)
class WorkerConfig:
    """How batches are made and handed over: the ``DataLoader`` worker processes and the shared batch slots.

    Attributes:
        num_workers: DataLoader worker processes (0: load in the main process). Default (None):
            the CPUs available to this process, at most 8 (:func:`default_num_workers`).
        pin_memory: pin batches for fast host-to-GPU copies (only used when CUDA is available).
        persistent_workers: keep workers alive between epochs (default: on when ``num_workers > 0``).
        prefetch_factor: batches each worker prepares ahead (default 4; each worker also has
            ``prefetch_factor + 2`` shared batch slots, :mod:`shardkit.loader.transport`).
        multiprocessing_context: :class:`MultiprocessingContext` (``"fork"``, ``"spawn"``,
            ``"forkserver"``) or None (default: the platform's).
        timeout: seconds to wait for one batch from a worker before raising (0: wait forever, as
            ``DataLoader``); a bound turns any stuck worker into an error instead of a hang.
        reuse_buffers: workers reuse their shared-memory batch buffers once the main process
            no longer references a batch (:mod:`shardkit.loader.transport`); False: new memory per
            batch, as plain ``DataLoader`` does.
    """

    num_workers: Optional[int] = None
    pin_memory: bool = True
    persistent_workers: Optional[bool] = None
    prefetch_factor: int = 4
    multiprocessing_context: Optional[MultiprocessingContext] = None
    timeout: float = 0.0
    reuse_buffers: bool = True

    def __post_init__(self) -> None:
        check_types(self)
        if self.num_workers is None:
            object.__setattr__(self, "num_workers", default_num_workers())
        if self.multiprocessing_context is not None:
            object.__setattr__(
                self, "multiprocessing_context", MultiprocessingContext.parse(self.multiprocessing_context)
            )
        if self.prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be >= 1, got {self.prefetch_factor}")
        if self.num_workers < 0:  # type: ignore[operator]
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")
