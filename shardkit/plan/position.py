"""Where an epoch stands, as one immutable value: epoch, batches done, topology history, image size.

:class:`Position` is what :class:`shardkit.ShardLoader` owns and replaces (never
changes): advanced per batch handed out, moved to the next epoch when a pass ends,
replaced by ``set_epoch``/``load_state_dict``, and handed one way to the workers when
an iteration starts. with the mixture that plans its epoch, :mod:`shardkit.plan.epoch` turns it into what each worker reads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """A stretch of an epoch read with one topology: ``batches_done`` batches on each rank (``nodes``: the
    nodes its ranks ran on, which lays out the epoch with node affinity)."""

    world_size: int
    num_workers: int
    batches_done: int
    nodes: int = 1


@dataclass(frozen=True)
class Position:
    """Where an epoch stands: one immutable value, replaced (never changed) by its owner.

    Attributes:
        epoch: the epoch (seeds shard order, shuffles and crops).
        batches_done: batches each rank consumed with the current topology.
        history: earlier stretches of this epoch read with other topologies (elastic resume).
        size: output image size from this iteration on (progressive resolution); 0: the configured size.
            It stays when the epoch advances, until it is set again.
    """

    epoch: int = 0
    batches_done: int = 0
    history: tuple[Segment, ...] = ()
    size: int = 0

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.batches_done < 0 or self.size < 0:
            raise ValueError(
                f"epoch, batches_done and size must be >= 0, got {self.epoch}, {self.batches_done}, {self.size}"
            )
        object.__setattr__(self, "history", tuple(self.history))

    def advanced(self, batches: int = 1) -> "Position":
        """The position after ``batches`` more batches of this epoch."""
        return Position(self.epoch, self.batches_done + batches, self.history, self.size)

    def next_epoch(self) -> "Position":
        """The start of the next epoch (at the same image size)."""
        return Position(self.epoch + 1, size=self.size)

    def started(self, epoch: int) -> "Position":
        """The start of ``epoch`` (at the same image size)."""
        return Position(epoch, size=self.size)

    def resized(self, size: int) -> "Position":
        """The same point of the epoch with output image size ``size`` (0: the configured size)."""
        return Position(self.epoch, self.batches_done, self.history, size)

    def replanned(self, world_size: int, num_workers: int, nodes: int = 1) -> "Position":
        """The same point of the epoch for another topology: what ``world_size`` x ``num_workers``
        readers on ``nodes`` nodes consumed becomes a finished :class:`Segment` of the history."""
        if not self.batches_done:
            return self
        seg = Segment(world_size, num_workers, self.batches_done, nodes)
        return Position(self.epoch, 0, (*self.history, seg), self.size)
