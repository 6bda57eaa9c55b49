"""Transport: the only code that touches memory shared between DataLoader workers and the main process.

A worker decodes each batch straight into shared memory, so the hand-off to the
main process copies no pixels. Creating, zero-filling, mapping and unmapping a
new ~10 MB segment per batch costs a worker about a fifth of its time
(a profile of two workers: 20 % of their time in the kernel), so :class:`ShardLoader <shardkit.loader.ShardLoader>` gives
each set of worker processes a :class:`Ring`: a fixed number of *slots* per
worker (one batch each), allocated in the main process before the workers start.

Buffer lifetime is explicit, with one writer per flag:

* a worker takes a slot whose flag (a small shared ``int64`` table
  ``[num_workers, slots]``) is 0, writes a nonzero token into the flag, decodes
  into the slot and sends an :class:`Envelope` that carries the slot's number,
  not its memory; if no slot is free it decodes into new memory instead (never
  blocks, never overwrites);
* when the main process unpickles the envelope it *leases* the slot: the batch's
  images are a tensor over a fresh numpy view of the slot, and a
  ``weakref.finalize`` on that view clears the flag once the last tensor, view,
  storage or numpy array of the batch is gone (torch holds the view until the
  storage dies). A batch the DataLoader discards (a loop left early) is unpickled
  and dropped, so its slot comes back too; a pinned copy (``pin_memory``) drops the
  leased tensor at once.
* a leased batch sent on to another process (a ``torch.multiprocessing`` queue) is
  safe by design: the tensor's memory is not torch shared memory, so torch's
  pickler moves the storage into a new shared segment (one copy) and the slot is
  released; the other process never sees the slot.

Only the main process clears flags and only a worker sets them, each on its own
row, so no lock is needed.

The epoch position goes the other way, main -> workers, through a
:class:`PositionBox`: a small shared int64 tensor created with the dataset (so
persistent workers, which hold a stale copy of everything else, see it too),
written only by the main process while no iteration is starting, read by each
worker once when its iteration starts. Batches carry data only (:mod:`shardkit.loader.batchtypes`);
the envelope also carries the worker id and its counters, for :class:`ShardLoader`. Only a
:class:`~shardkit.loader.batchtypes.PixelBatch` or ``ViewBatch`` made in a slot travels by its slot (its pixel fields);
every other batch (raw samples, encoded JPEGs, pixels in new memory) is pickled whole.
Rings are found by id in a process-local registry of live rings, because
``DataLoader`` unpickles worker results inside its own machinery.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from multiprocessing import shared_memory
from typing import Any, Optional

import numpy as np
import torch

from shardkit.errors import ShardkitError
from shardkit.loader.batchtypes import Batch
from shardkit.loader.rows import PLANES, FieldRows
from shardkit.loader.stats import Counters
from shardkit.plan.position import Position, Segment

#: live rings of this process, by id (weak: a ring lives as long as its loader and its leased batches)
_RINGS: "weakref.WeakValueDictionary[str, Ring]" = weakref.WeakValueDictionary()
_ids = itertools.count()


class PositionBox:
    """The epoch position, handed one way from the main process to the workers.

    Layout: ``[epoch, batches_done, size, len(history), (world_size, num_workers, batches_done, nodes) * len(history)]``.
    """

    MAX_HISTORY = 64  #: topology changes within one epoch

    def __init__(self) -> None:
        self.box = torch.zeros(4 + 4 * self.MAX_HISTORY, dtype=torch.int64).share_memory_()

    def write(self, pos: Position) -> None:
        """Publish ``pos`` (main process; workers read it when their next iteration starts)."""
        if len(pos.history) > self.MAX_HISTORY:
            raise ShardkitError(
                f"more than {self.MAX_HISTORY} topology changes within epoch {pos.epoch}; finish the epoch on one topology"
            )
        flat = [pos.epoch, pos.batches_done, pos.size, len(pos.history)]
        flat += [v for s in pos.history for v in (s.world_size, s.num_workers, s.batches_done, s.nodes)]
        self.box[: len(flat)] = torch.tensor(flat, dtype=torch.int64)

    def read(self) -> Position:
        """The published position."""
        v = self.box.tolist()
        n = v[3]
        return Position(v[0], v[1], tuple(Segment(*v[4 + 4 * i : 8 + 4 * i]) for i in range(n)), v[2])


def ring_slots(prefetch_factor: int) -> int:
    """Slots per worker: its batches in flight, one the training step holds, one being received or pinned."""
    return prefetch_factor + 2


class Ring:
    """Shared batch slots for one set of worker processes (created in the main process).

    Args:
        num_workers: rows (one per DataLoader worker).
        slots: slots per worker.
        slot_bytes: bytes of one slot (a full batch).
    """

    def __init__(self, num_workers: int, slots: int, slot_bytes: int):
        self.id = f"{os.getpid()}-{next(_ids)}"
        self.slots, self.slot_bytes = slots, slot_bytes
        self.flags = torch.zeros(num_workers, slots, dtype=torch.int64).share_memory_()
        # one segment per worker; its pages are allocated when first written (a slot that is never
        # needed costs no memory), and the name goes when the ring does (or the process: resource tracker)
        self.memory = [
            shared_memory.SharedMemory(create=True, size=max(1, slots * slot_bytes)) for _ in range(num_workers)
        ]
        self._views = [np.ndarray((slots * slot_bytes,), np.uint8, buffer=m.buf) for m in self.memory]
        weakref.finalize(self, _free, self.memory, self._views)
        self.leased = 0  #: batches received in a slot
        self.unslotted = 0  #: batches received in new memory (no slot was free)
        _RINGS[self.id] = self

    def __getstate__(self) -> dict[str, Any]:  # to spawned workers: segment names, the flag table by file descriptor
        return {
            "id": self.id,
            "slots": self.slots,
            "slot_bytes": self.slot_bytes,
            "flags": self.flags,
            "names": [m.name for m in self.memory],
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        names = state.pop("names")
        self.__dict__.update(state, leased=0, unslotted=0)
        self.memory = [shared_memory.SharedMemory(name=n) for n in names]
        self._views = [np.ndarray((self.slots * self.slot_bytes,), np.uint8, buffer=m.buf) for m in self.memory]

    # ------------------------------------------------------------------ main process

    def lease(self, worker: int, slot: int, token: int, nbytes: int) -> np.ndarray:
        """A new numpy view of ``nbytes`` of a worker's slot; the slot is released when it dies."""
        start = slot * self.slot_bytes
        view = self._views[worker][start : start + nbytes]
        weakref.finalize(view, self._release, worker, slot, token)
        self.leased += 1
        return view

    def _release(self, worker: int, slot: int, token: int) -> None:
        flags = self.flags.numpy()
        if flags[worker, slot] == token:
            flags[worker, slot] = 0

    def in_use(self) -> int:
        """Slots currently lent out (tests, diagnostics)."""
        return int((self.flags != 0).sum())

    # ------------------------------------------------------------------ worker

    def writer(self, worker: int) -> "SlotWriter":
        """The worker side for DataLoader worker ``worker``."""
        return SlotWriter(self, worker)


def _free(memory: list[shared_memory.SharedMemory], views: list[np.ndarray]) -> None:
    """Unmap and remove a ring's segments (no lease is left: each one keeps its ring alive)."""
    views.clear()
    for m in memory:
        try:
            m.close()
            m.unlink()
        except (BufferError, OSError):  # pragma: no cover - still mapped by a writer in this process, or already gone
            pass


class SlotWriter:
    """A worker's side of a :class:`Ring`: hands out free slots as batch buffers (an ``alloc`` for the decode stage)."""

    def __init__(self, ring: Ring, worker: int):
        self.ring, self.worker = ring, worker
        self.row = ring.flags.numpy()[worker]
        self.memory = torch.from_numpy(ring._views[worker])
        self._seq = 0
        # slot's offset in the ring memory -> (slot, token), until the batch is sent (by offset, not data pointer:
        # a batch whose every sample failed is an empty view of its slot, and an empty tensor's data pointer is 0)
        self._taken: dict[int, tuple[int, int]] = {}

    def __call__(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A uint8 tensor of ``shape``: a free slot, or new memory when none is free or it does not fit."""
        n = int(np.prod(shape))
        free = np.flatnonzero(self.row == 0)
        if not n or not len(free) or n > self.ring.slot_bytes:
            return torch.empty(shape, dtype=torch.uint8)
        slot = int(free[0])
        self._seq = self._seq % 0x7FFFFFFFFFFF + 1
        self.row[slot] = self._seq
        start = slot * self.ring.slot_bytes
        t = self.memory[start : start + n].view(shape)
        self._taken[start] = (slot, self._seq)
        return t

    def claim(self, images: torch.Tensor) -> tuple[int, int]:
        """``(slot, token)`` of a batch's images (``(-1, 0)``: not in a slot).

        A slot's batch must be claimed, even an empty one: pickled unslotted, its tensor would go through
        torch's shared-memory reducer, which moves the storage, the whole ring segment, to new memory.
        """
        if images.untyped_storage().data_ptr() != self.memory.untyped_storage().data_ptr():
            return (-1, 0)
        return self._taken.pop(int(images.storage_offset()), (-1, 0))


@dataclass(frozen=True)
class Envelope:
    """A batch on its way from a worker to :class:`ShardLoader`, with what only the transport and loader read.

    Attributes:
        batch: the data.
        worker: DataLoader worker id that made it.
        counters: the worker's cumulative :data:`shardkit.loader.stats.COUNTERS` for this epoch.
        ring: id of the :class:`Ring` it was made for ("" without one).
        slot: the worker's slot holding the batch's pixels (``batch.pixels()``, -1: none); only meaningful in the worker.
        token: the slot's flag value.
        slot_start: element offset of the slot in the worker's ring memory.
    """

    batch: Batch
    worker: int
    counters: np.ndarray
    ring: str = ""
    slot: int = -1
    token: int = 0
    slot_start: int = 0

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        b = self.batch
        pixels = b.pixels()
        if self.slot < 0 or not pixels:
            return _receive_unslotted, (b, self.worker, self.counters, self.ring)
        layouts = tuple((tuple(t.shape), t.stride(), t.storage_offset() - self.slot_start) for t in pixels)
        extra, planes = _slotted_planes(b.extra, pixels[0], self.slot_start)
        nbytes = max(
            (
                off + sum((d - 1) * s for d, s in zip(shape, stride)) + 1
                for shape, stride, off in layouts + tuple(p[1:4] for p in planes)
                if all(shape)
            ),
            default=0,
        )
        return _receive_slotted, (
            self.ring,
            self.worker,
            self.slot,
            self.token,
            nbytes,
            type(b),
            layouts,
            b.labels.numpy(),
            b.gids.numpy(),
            b.keys,
            self.counters,
            extra,
            planes,
        )

    def pin_memory(self, device: Any = None) -> "Envelope":
        """The envelope with a pinned copy of the batch (DataLoader's pin-memory thread); its slot is released at once."""
        return self.copied(torch.Tensor.pin_memory)

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "Envelope":
        """The envelope with the batch's tensors replaced by ``copy(tensor)``; nothing refers to the slot any more."""
        return replace(self, batch=self.batch.copied(copy), slot=-1, token=0)


#: a pixel target plane carried by its slot: (field, byte shape, byte strides, byte offset in the slot, dtype)
PlaneLayout = tuple[str, tuple[int, ...], tuple[int, ...], int, str]


def _slotted_planes(
    extra: Optional[FieldRows], images: torch.Tensor, slot_start: int
) -> tuple[Optional[FieldRows], tuple[PlaneLayout, ...]]:
    """``extra`` without its pixel target planes that lie in the images' slot, and those planes' layouts (in
    bytes: an int16 instance map travels as its bytes and is viewed as int16 again on arrival)."""
    if extra is None:
        return None, ()
    ptr = images.untyped_storage().data_ptr()
    planes: list[PlaneLayout] = []
    for name in PLANES:
        t = getattr(extra, name)
        if t is None or t.untyped_storage().data_ptr() != ptr:
            continue  # not asked for, or in memory of its own: pickled with the rows
        u = t.view(torch.uint8)
        planes.append((name, tuple(u.shape), u.stride(), u.storage_offset() - slot_start, str(t.dtype)))
        extra = extra.updated(**{name: None})
    return extra, tuple(planes)


def _ring(ring_id: str) -> Ring:
    ring = _RINGS.get(ring_id)
    if ring is None:
        raise ShardkitError(
            f"a batch in shared slot ring {ring_id} arrived in process {os.getpid()}, which does not own that ring "
            "(its loader was closed or collected while the batch was in flight); iterate the loader again"
        )
    return ring


def _receive_slotted(
    ring_id: str,
    worker: int,
    slot: int,
    token: int,
    nbytes: int,
    cls: type[Batch],
    layouts: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...],
    labels: np.ndarray,
    gids: np.ndarray,
    keys: list[str],
    counters: np.ndarray,
    extra: Optional[FieldRows] = None,
    planes: tuple[PlaneLayout, ...] = (),
) -> Envelope:
    """Unpickled in the main process: lease the slot and view the batch's pixel fields and pixel target planes
    in it (the row fields, pickled inline, come with the labels)."""
    memory = torch.from_numpy(_ring(ring_id).lease(worker, slot, token, nbytes))
    pixels = [memory.as_strided(shape, stride, offset) for shape, stride, offset in layouts]
    if planes:
        assert extra is not None
        views: dict[str, Any] = {
            name: memory.as_strided(shape, stride, offset).view(getattr(torch, dtype.removeprefix("torch.")))
            for name, shape, stride, offset, dtype in planes
        }
        extra = extra.updated(**views)
    batch = cls.from_pixels(pixels, torch.from_numpy(labels), torch.from_numpy(gids), keys, extra)
    return Envelope(batch, worker, counters)


def _receive_unslotted(batch: Batch, worker: int, counters: np.ndarray, ring_id: str) -> Envelope:
    ring = _RINGS.get(ring_id) if ring_id else None
    if ring is not None:
        ring.unslotted += 1
    return Envelope(batch, worker, counters)


@dataclass(frozen=True)
class WorkerFailure:
    """What a worker sends instead of a batch when its iteration fails: the error as one line.

    ``DataLoader`` would re-raise a worker's exception as ``Caught X in DataLoader worker
    process N. Original Traceback ...``; :class:`ShardLoader` raises :meth:`exception` instead,
    of the same class where it can, whose message names the shard and the cause.
    """

    exc_type: type
    message: str
    worker: int

    def exception(self) -> BaseException:
        msg = f"{self.message} (DataLoader worker {self.worker})"
        try:
            return self.exc_type(msg)
        except Exception:  # noqa: BLE001 - a class that cannot be built from one message
            return RuntimeError(f"{self.exc_type.__name__}: {msg}")


def failures_as_items(items: Iterable[Envelope], *, worker: int) -> Iterator["Envelope | WorkerFailure"]:
    """Last stage in a worker: an exception ends the iteration as one :class:`WorkerFailure` item."""
    try:
        yield from items
    except Exception as exc:  # noqa: BLE001 - handed to the main process, which raises it
        message = " ".join(str(exc).split()) or type(exc).__name__
        exc_type = type(exc) if isinstance(exc, ShardkitError) or type(exc).__module__ == "builtins" else RuntimeError
        if exc_type is RuntimeError and type(exc) is not RuntimeError:
            message = f"{type(exc).__name__}: {message}"
        yield WorkerFailure(exc_type, message, worker)


def envelopes(
    batches: Iterable[Batch], *, worker: int, counters: Counters, writer: Optional[SlotWriter] = None
) -> Iterator[Envelope]:
    """Last stage in a worker: wrap each batch with the worker id, a copy of its counters and its slot."""
    ring = writer.ring.id if writer is not None else ""
    for b in batches:
        pixels = b.pixels()
        slot, token = writer.claim(pixels[0]) if writer is not None and pixels else (-1, 0)
        start = slot * writer.ring.slot_bytes if writer is not None and slot >= 0 else 0
        yield Envelope(b, worker, counters.v.copy(), ring, slot, token, start)
