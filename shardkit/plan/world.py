"""Topology as a value object: which rank and DataLoader worker this is.

Split functions take a :class:`World` explicitly, so "4 ranks x 8 workers" is
a unit test rather than 32 processes. :func:`detect` is the only place that
looks at ``torch.distributed`` and ``torch.utils.data.get_worker_info``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class World:
    """Position of one data-reading process in the job.

    Attributes:
        rank: global rank of the training process (0-based).
        world_size: number of training processes.
        worker: DataLoader worker index within the rank (0 when ``num_workers == 0``).
        num_workers: DataLoader workers per rank (1 when loading in the main process).
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"invalid rank {self.rank} for world_size {self.world_size}")
        if self.num_workers < 1 or not 0 <= self.worker < self.num_workers:
            raise ValueError(f"invalid worker {self.worker} for num_workers {self.num_workers}")

    @property
    def num_partitions(self) -> int:
        """Total number of reading processes: ``world_size * num_workers``."""
        return self.world_size * self.num_workers

    @property
    def partition(self) -> int:
        """Global index of this reader, rank-major: ``rank * num_workers + worker``."""
        return self.rank * self.num_workers + self.worker

    def with_worker(self, worker: int, num_workers: int) -> "World":
        """The same rank seen from DataLoader worker ``worker`` of ``num_workers``."""
        return replace(self, worker=worker, num_workers=max(1, num_workers))


def detect_rank() -> tuple[int, int]:
    """``(rank, world_size)`` from an initialised ``torch.distributed`` group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def detect_worker() -> tuple[int, int]:
    """``(worker, num_workers)`` inside a DataLoader worker, else ``(0, 1)``."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


def detect(rank: int | None = None, world_size: int | None = None) -> World:
    """The current :class:`World`; explicit ``rank``/``world_size`` win over detection."""
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither")
    if rank is None:
        rank, world_size = detect_rank()
    worker, num_workers = detect_worker()
    assert world_size is not None
    return World(rank=rank, world_size=world_size, worker=worker, num_workers=num_workers)
