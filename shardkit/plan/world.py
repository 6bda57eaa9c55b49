"""Topology as a value object: which rank and DataLoader worker this is.

Split functions take a :class:`World` explicitly, so "4 ranks x 8 workers" is
a unit test rather than 32 processes. :func:`detect` is the only place that
looks at ``torch.distributed``, ``torch.utils.data.get_worker_info`` and ``torchrun``'s
environment (the node count, for node affinity).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Optional


@dataclass(frozen=True)
class World:
    """Position of one data-reading process in the job.

    Attributes:
        rank: global rank of the training process (0-based).
        world_size: number of training processes.
        worker: DataLoader worker index within the rank (0 when ``num_workers == 0``).
        num_workers: DataLoader workers per rank (1 when loading in the main process).
        nodes: machines the ranks run on, ``world_size // nodes`` ranks each, rank-major (``torchrun``'s
            numbering: rank ``r`` runs on node ``r // (world_size // nodes)``).
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1
    nodes: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.world_size % self.nodes:
            raise ValueError(
                f"{self.world_size} ranks do not divide over {self.nodes} nodes; give nodes= as a divisor of world_size"
            )
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

    @property
    def node(self) -> int:
        """The node this rank runs on."""
        return self.rank // (self.world_size // self.nodes)

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


def detect_nodes(world_size: int, rank: int, env: Optional[Mapping[str, str]] = None) -> int:
    """Nodes of a ``torchrun`` job: ``world_size // LOCAL_WORLD_SIZE``, checked against ``GROUP_RANK`` (or
    ``NODE_RANK``); 1 outside ``torchrun``, or when the environment describes another world."""
    env = os.environ if env is None else env
    try:
        local = int(env.get("LOCAL_WORLD_SIZE", "0"))
        group = int(env.get("GROUP_RANK", env.get("NODE_RANK", "-1")))
    except ValueError:
        return 1
    if local < 1 or world_size % local or (group >= 0 and group != rank // local):
        return 1
    return world_size // local


def detect(
    rank: int | None = None,
    world_size: int | None = None,
    nodes: int | None = None,
    env: Optional[Mapping[str, str]] = None,
) -> World:
    """The current :class:`World`; explicit ``rank``/``world_size``/``nodes`` win over detection (``env``:
    the environment to read ``torchrun``'s node layout from, default ``os.environ``, read here only)."""
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither")
    if rank is None:
        rank, world_size = detect_rank()
    worker, num_workers = detect_worker()
    assert world_size is not None
    if nodes is None:
        nodes = detect_nodes(world_size, rank, env)
    return World(rank=rank, world_size=world_size, worker=worker, num_workers=num_workers, nodes=nodes)
