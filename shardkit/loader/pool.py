"""Reusing shared-memory batch buffers between DataLoader workers and the main process.

A worker normally writes every batch into a new shared-memory segment (so the
hand-off to the main process copies nothing): creating, zero-filling, mapping
and later unmapping ~10 MB per batch costs a worker about a fifth of its time
(measured: notes/issue-3.md). Instead each worker keeps a few buffers
(*slots*) and reuses one as soon as the main process no longer needs it.

Protocol (:class:`PoolState`: a small shared int64 tensor of flags ``[num_workers, slots]``
and the current *generation*, one per iteration):

* a worker takes a slot whose flag is 0, writes a fresh nonzero *token*
  ``(generation << 32) | sequence`` into it, fills the buffer and sends the
  batch with ``(slot, token)``; if no slot is free it falls back to a new
  segment, exactly like ``DataLoader`` (never blocks, never overwrites);
* the main process (:class:`MainPool`, driven by ``ShardLoader``) keeps one
  reference to each received slot's storage and clears the flag once nothing
  else in the process references that storage (its use count drops back to one
  and nobody else holds its Python object): batches handed to the user stay
  valid for as long as the user holds any tensor, view, numpy array or storage
  of them; a pinned copy (``pin_memory``) frees its slot at once;
* batches a ``DataLoader`` discards (a loop left early, then a new epoch) were
  never received: their slots are cleared when the next iteration starts, and
  any that a worker still finishing old work takes later carry an older
  *generation* and are cleared when the new generation's batches arrive
  (``DataLoader`` drains old batches before it hands out new ones).

Only the main process clears flags and only a worker sets them, each on its
own row, so no lock is needed. Only ``ShardLoader``'s own ``DataLoader`` sees
the state (a private copy of the dataset), so another ``DataLoader`` over the
same dataset never touches the slots. Without ``torch._C._storage_Use_Count``
(a private torch function) pooling is off and every batch gets a new segment.

Not seen: references in *other* processes. A batch sent on to another process
(a ``torch.multiprocessing`` queue) must be cloned first, or use
``reuse_buffers=False``.
"""

from __future__ import annotations

from typing import Any, Optional

import sys
from dataclasses import dataclass

import numpy as np
import torch

_use_count = getattr(torch._C, "_storage_Use_Count", None)


def pool_supported() -> bool:
    """Whether this torch lets the main process see when a storage is no longer used."""
    return _use_count is not None


def new_segment(shape: tuple[int, ...]) -> torch.Tensor:
    """A uint8 tensor of ``shape`` in a new shared-memory segment."""
    n = int(np.prod(shape))
    try:
        return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(n)).view(shape)
    except (AttributeError, RuntimeError):  # pragma: no cover - older torch
        return torch.empty(shape, dtype=torch.uint8).share_memory_()


@dataclass(frozen=True)
class PoolState:
    """What workers need: the shared flag table and the shared current generation."""

    flags: torch.Tensor  #: int64 ``[num_workers, slots]``
    generation: torch.Tensor  #: int64 ``[1]``


class WorkerPool:
    """A worker's slots: reusable shared-memory buffers of one batch shape.

    Args:
        state: the shared :class:`PoolState`.
        worker: this worker's row (a worker without a row never takes a slot).
        buffers: worker-local dict keeping the slot buffers alive across epochs.
        capacity: bytes of one slot (a full batch).
    """

    def __init__(self, state: PoolState, worker: int, buffers: dict[int, torch.Tensor], capacity: int):
        flags = state.flags.numpy()
        self.row = flags[worker] if 0 <= worker < len(flags) else np.ones(0, np.int64)
        self.generation = int(state.generation[0])  # read once: the iteration this worker produces for
        self.buffers = buffers
        self.capacity = capacity
        self.seq = 0

    def take(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, int, int]:
        """``(buffer, slot, token)``: a free slot's buffer (``slot = -1``, ``token = 0``: a new segment).

        Only full batches use slots, so a short batch's storage holds its own pixels only.
        """
        free = np.flatnonzero(self.row == 0)
        n = int(np.prod(shape))
        if len(free) and n == self.capacity:
            slot = int(free[0])
            buf = self.buffers.get(slot)
            if buf is None or buf.numel() < n:
                buf = self.buffers[slot] = new_segment((n,))
            self.seq = self.seq % 0xFFFFFFFF + 1
            token = (self.generation << 32) | self.seq
            self.row[slot] = token
            return buf[:n].view(shape), slot, token
        return new_segment(shape), -1, 0


class MainPool:
    """The main process's side: a flag table for one set of worker processes.

    Args:
        num_workers: rows.
        slots: slots per worker.
    """

    def __init__(self, num_workers: int, slots: int):
        self.state = PoolState(torch.zeros(num_workers, slots, dtype=torch.int64).share_memory_(), torch.zeros(1, dtype=torch.int64).share_memory_())
        self.flags = self.state.flags
        self._flags = self.flags.numpy()
        self.held: dict[tuple[int, int], tuple[int, Any]] = {}  #: (worker, slot) -> (token, storage)
        self.generation = 0
        self._base_refs = self._calibrate()
        self.pooled = 0  #: batches received in a slot
        self.unpooled = 0  #: batches received in a new segment (no slot was free)

    def next_generation(self) -> int:
        """Start an iteration (call before its batches are requested).

        Slots lent to batches this process never received are cleared now: those
        batches will be discarded by the DataLoader (a worker still finishing one
        may take a slot after this; :meth:`release_unused` clears it later).
        """
        self.generation += 1
        self.state.generation[0] = self.generation
        for w, s in zip(*np.nonzero(self._flags)):
            if (int(w), int(s)) not in self.held:
                self._flags[w, s] = 0
        return self.generation

    def _clear(self, key: tuple[int, int], token: int) -> None:
        if self._flags[key] == token:
            self._flags[key] = 0

    def received(self, worker: int, slot: int, token: int, images: torch.Tensor, copied: bool) -> None:
        """Account for a batch from ``(worker, slot)``; ``copied``: its images are a copy (pinned)."""
        if slot < 0:
            self.unpooled += 1
        else:
            self.pooled += 1
            if copied:
                self._clear((worker, slot), token)
            else:
                self.held[(worker, slot)] = (token, images.untyped_storage())
        self.release_unused()

    @staticmethod
    def _refs(entry: tuple[int, Any]) -> int:
        return sys.getrefcount(entry[1])

    def _calibrate(self) -> int:
        """What :meth:`_refs` reports for a held storage that nobody else references."""
        probe = {(0, 0): (0, torch.empty(1, dtype=torch.uint8).untyped_storage())}
        return max(self._refs(entry) for entry in list(probe.values()))

    def _unused(self, entry: tuple[int, Any]) -> bool:
        """Whether only this pool references the held storage: no tensor or view shares it
        (use count), and nobody else holds its Python object (``tensor.untyped_storage()``
        returns the pool's own object, which the use count cannot tell apart)."""
        return _use_count(entry[1]._cdata) <= 1 and self._refs(entry) <= self._base_refs  # type: ignore[misc]

    def release_unused(self) -> None:
        """Free every held slot nothing references any more, and slots of discarded batches."""
        assert _use_count is not None
        for key, entry in list(self.held.items()):
            if self._unused(entry):
                del self.held[key]
                self._clear(key, entry[0])
        stale = (self._flags != 0) & ((self._flags >> 32) < self.generation)
        for w, s in zip(*np.nonzero(stale)):
            key = (int(w), int(s))
            if key not in self.held:
                self._flags[key] = 0

    def num_held(self) -> int:
        """Slots currently lent out (tests, diagnostics)."""
        return len(self.held)


def pool_slots(prefetch_factor: int) -> int:
    """Slots per worker: its batches in flight, one the training step holds, one being pinned."""
    return prefetch_factor + 2


def pool_for(num_workers: int, prefetch_factor: int, raw: bool) -> Optional[MainPool]:
    """A :class:`MainPool` when batches go through worker processes and torch supports it."""
    if num_workers <= 0 or raw or not pool_supported():
        return None
    return MainPool(num_workers, pool_slots(prefetch_factor))
