"""The settings of ``shardkit simulate`` (:class:`SimSettings`): a cluster and its loader options, each default here.

A module of its own with light imports, so that the command's options are built without the loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

from shardkit.choices import check_types
from shardkit.storage.budget import EXPECTED_IMG_PER_S, REQUEST_BUDGET

#: the most reading processes one replay holds (memory grows with them: about 1.2 kB each)
MAX_PROCESSES = 1 << 20


@dataclass(frozen=True)
class SimSettings:
    """A cluster and its loader settings.

    Attributes:
        nodes, ranks_per_node, workers: the topology (``workers``: DataLoader workers per rank, 0: none).
        img_per_s_per_rank: what each rank consumes.
        epochs: epochs to replay (the node cache carries over).
        batch_size, seed: plan options (the rest are :class:`~shardkit.plan.PlanConfig`'s defaults).
        block_size: the buffered read size in bytes, or ``"auto"`` (:func:`shardkit.storage.budget.auto_block_size`
            for ``expected_img_per_s``, the budget (``REQUEST_BUDGET`` when none) and the prefixes).
        request_budget: GET/s per prefix for the whole world (None: no limiter).
        expected_img_per_s: the rate the auto block size is sized for (None: ``img_per_s_per_rank``).
        index: read through sample indexes where the dataset has them (False: the header walk, as ``--no-index``).
        cache: a node-local shard cache (``cache_dir``), kept across epochs.
        node_affinity: each node reads the same share of the shards every epoch (``load(..., node_affinity=True)``).
        latency_s: seconds to the first byte of each request (model constant).
        bytes_per_s_per_process: a process's transfer rate (model constant).
    """

    nodes: int = 1
    ranks_per_node: int = 8
    workers: int = 8
    img_per_s_per_rank: float = EXPECTED_IMG_PER_S
    epochs: int = 1
    batch_size: int = 64
    seed: int = 0
    block_size: Union[int, str] = "auto"
    request_budget: Optional[float] = REQUEST_BUDGET
    expected_img_per_s: Optional[float] = None
    index: bool = True
    cache: bool = False
    node_affinity: bool = False
    latency_s: float = 0.03
    bytes_per_s_per_process: float = 100e6

    def __post_init__(self) -> None:
        check_types(self)
        if min(self.nodes, self.ranks_per_node, self.epochs, self.batch_size) < 1 or self.workers < 0:
            raise ValueError("--nodes, --ranks-per-node, --epochs and --batch-size must be >= 1, --workers >= 0")
        if not math.isfinite(self.img_per_s_per_rank) or self.img_per_s_per_rank <= 0:
            raise ValueError(f"--img-per-s-per-rank must be a number > 0, got {self.img_per_s_per_rank}")
        if not math.isfinite(self.latency_s) or self.latency_s < 0:
            raise ValueError(f"--latency-ms must be a number >= 0, got {self.latency_s * 1e3:g}")
        if not math.isfinite(self.bytes_per_s_per_process) or self.bytes_per_s_per_process <= 0:
            raise ValueError(f"--mb-per-s-per-process must be a number > 0, got {self.bytes_per_s_per_process / 1e6:g}")
        if self.expected_img_per_s is not None and not (
            math.isfinite(self.expected_img_per_s) and self.expected_img_per_s > 0
        ):
            raise ValueError(f"expected_img_per_s must be a number > 0, got {self.expected_img_per_s}")
        if self.processes > MAX_PROCESSES:
            raise ValueError(
                f"--nodes x --ranks-per-node x --workers is {self.processes:,} reading processes; the simulator "
                f"replays at most {MAX_PROCESSES:,} (a 4,096-node world of 8 ranks x 32 workers)"
            )
        if isinstance(self.block_size, str) and self.block_size != "auto":
            raise ValueError(f"--block-size must be a size in bytes or 'auto', not {self.block_size!r}")
        if isinstance(self.block_size, int) and self.block_size < 1:
            raise ValueError(f"--block-size must be >= 1 byte, got {self.block_size}")
        if self.request_budget is not None and not (math.isfinite(self.request_budget) and self.request_budget > 0):
            raise ValueError(f"--request-budget must be > 0 GET/s (or none), got {self.request_budget}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def processes(self) -> int:
        """Reading processes of the world: ``world_size * max(1, workers)``."""
        return self.world_size * max(1, self.workers)
