"""The options that decide the order and split of samples (:class:`PlanConfig`), and their defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from shardkit.choices import Choice, check_types


class EpochPolicy(Choice):
    """What to do when the samples of an epoch do not divide evenly over ranks."""

    PAD = "pad"  #: repeat the first few samples so every rank gets ceil(N / R)
    DROP = "drop"  #: leave the last few samples out so every rank gets floor(N / R)


#: samples per shuffle block, and at most in the first one (smaller, so that emitting starts sooner):
#: the one place of these defaults (:class:`PlanConfig`, which ``LoaderConfig.plan`` is)
SHUFFLE_BUFFER = 1024
SHUFFLE_INITIAL = 256


@dataclass(frozen=True)
class PlanConfig:
    """Options that decide the order and split of samples.

    Attributes:
        batch_size: samples per batch.
        seed: seed of every random choice (shard order, block permutations, crops).
        shuffle: shuffle shard order and samples; False reads in manifest order (e.g. for evaluation).
        shuffle_buffer: samples per shuffle block (memory: one block of raw samples per worker, up to
            two blocks of JPEG bytes in the loader: the one being decoded and the next one, read ahead).
        shuffle_initial: size of the first block (start emitting sooner); 0 means ``shuffle_buffer``.
            Default (None): ``min(SHUFFLE_INITIAL, shuffle_buffer)``.
        drop_last: drop each rank's last partial batch (reported in :class:`~shardkit.plan.split.RankSplit`);
            implies ``DROP`` for the rank split, since padding a batch that is dropped is pointless.
        policy: how uneven epochs are made even across ranks: ``"pad"`` (repeat a few samples) or ``"drop"``.
        node_affinity: each node reads the same share of the shards every epoch, shuffled within the share
            (:mod:`shardkit.plan.affinity`): with a node cache, epochs after the first read a share that fits
            from the cache. Needs the node count (``torchrun``'s environment, or ``nodes=``).
    """

    batch_size: int = 64
    seed: int = 0
    shuffle: bool = True
    shuffle_buffer: int = SHUFFLE_BUFFER
    shuffle_initial: Optional[int] = None
    drop_last: bool = False
    policy: EpochPolicy = EpochPolicy.PAD
    node_affinity: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.shuffle_initial is None:
            object.__setattr__(self, "_derived_initial", True)  # not a field: states and equality see the value only
            object.__setattr__(self, "shuffle_initial", min(SHUFFLE_INITIAL, self.shuffle_buffer))
        if self.shuffle_buffer < 1 or self.shuffle_initial < 0:  # type: ignore[operator]
            raise ValueError("shuffle_buffer must be >= 1 and shuffle_initial >= 0")
        object.__setattr__(self, "policy", EpochPolicy.parse(self.policy))

    def updated(self, **changes: Any) -> "PlanConfig":
        """``dataclasses.replace`` that derives ``shuffle_initial`` again from a new ``shuffle_buffer`` unless it
        was given (a given value stays, even one equal to the derived one)."""
        if getattr(self, "_derived_initial", False):
            changes.setdefault("shuffle_initial", None)
        return replace(self, **changes)
