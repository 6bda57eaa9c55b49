"""The three batch types a worker makes: pixels, raw samples, encoded JPEGs (data only).

A batch is a set of named fields: the per-sample *rows* every batch has (``labels``,
``gids``, ``keys``) and the payload fields of its type (``images`` for
:class:`PixelBatch`, ``samples`` for :class:`RawBatch`, ``jpegs`` for :class:`JpegBatch`).
A :class:`ViewBatch` (``views=``) carries a list of pixel fields, one per view.
Which one a loader makes is decided once, by its output strategy
(:mod:`shardkit.loader.decode.strategies`). Which worker made a batch, which shared slot
holds it and whether it was copied are the transport's business (:mod:`shardkit.loader.transport`).

Every batch pickles its labels and ids inline as numpy arrays, not as two more shared-memory
segments (each one a file, a mapping and a file-descriptor hand-off per batch); a pixel
batch's images go through torch's shared-memory reducer (or the transport's ring).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional, TypeVar

import numpy as np
import torch

from shardkit.format import RawSample
from shardkit.loader.rows import FieldRows

B = TypeVar("B", bound="Batch")


class Batch:
    """What every batch type has: the rows ``labels`` (int64 ``[n]``), ``gids`` (int64 ``[n]`` global
    sample ids) and ``keys``, plus the payload fields named in :attr:`PAYLOAD`.

    ``n`` is at most ``batch_size``: a sample that cannot be read or decoded makes its batch smaller.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ()  #: the type's own fields, beside the rows
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    extra: Optional[FieldRows]

    def __len__(self) -> int:
        return len(self.keys)

    def relabelled(self: B, labels: torch.Tensor, keys: list[str]) -> B:
        """The batch with other labels and keys (a mixture's label space and qualified keys)."""
        return replace(self, labels=labels, keys=keys)  # type: ignore[type-var]

    def copied(self: B, copy: Callable[[torch.Tensor], torch.Tensor]) -> B:
        """The batch with its tensors (labels, the row fields, and images where it has them) replaced by ``copy(tensor)``."""
        return replace(self, labels=copy(self.labels), extra=_copied_rows(self.extra, copy))  # type: ignore[type-var]

    def pixels(self) -> list[torch.Tensor]:
        """The batch's uint8 pixel tensors, the ones a shared slot holds (none for bytes or samples)."""
        return []

    def rows_at(self, kept: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, list[str], Optional[FieldRows]]:
        """``(labels, gids, keys, extra)`` of the samples at positions ``kept`` (int64, ascending), every field
        kept together (the consumer dropped the others: :func:`~shardkit.loader.batching.drop_undecoded`)."""
        if len(kept) == len(self):
            return self.labels, self.gids, self.keys, self.extra
        rows, idx = kept.tolist(), torch.from_numpy(kept)
        extra = None if self.extra is None else self.extra.take(rows)  # every field keeps to the decoded samples
        return self.labels[idx], self.gids[idx], [self.keys[i] for i in rows], extra

    @classmethod
    def from_pixels(
        cls,
        pixels: list[torch.Tensor],
        labels: torch.Tensor,
        gids: torch.Tensor,
        keys: list[str],
        extra: Optional[FieldRows] = None,
    ) -> "Batch":
        """The batch of this type whose :meth:`pixels` are ``pixels`` (the transport rebuilds it from its slot)."""
        raise TypeError(f"a {cls.__name__} has no pixel fields")

    def pin_memory(self: B, device: Any = None) -> B:
        """Pinned copy (called by DataLoader's pin-memory thread)."""
        return self.copied(torch.Tensor.pin_memory)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        payload = tuple(getattr(self, f) for f in self.PAYLOAD)
        return _rebuild, (type(self), payload, self.labels.numpy(), self.gids.numpy(), self.keys, self.extra)


def _rebuild(
    cls: type,
    payload: tuple[Any, ...],
    labels: np.ndarray,
    gids: np.ndarray,
    keys: list[str],
    extra: Optional[FieldRows] = None,
) -> Batch:
    return cls(*payload, torch.from_numpy(labels), torch.from_numpy(gids), keys, extra)


def _copied_rows(extra: Optional[FieldRows], copy: Callable[[torch.Tensor], torch.Tensor]) -> Optional[FieldRows]:
    return None if extra is None else extra.copied(copy)


@dataclass
class PixelBatch(Batch):
    """Decoded pixels: ``images`` uint8 ``[n, 3, S, S]`` (``decode_on="worker"``, or after device decode).

    Attributes:
        images: the batch's pixels (channels-last in memory unless the config says otherwise).
        labels: int64 ``[n]``.
        gids: int64 ``[n]``.
        keys: sample keys.
        extra: the rows of the other fields asked for (``fields=``), or ``None``.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ("images",)
    images: torch.Tensor
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    extra: Optional[FieldRows] = None

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "PixelBatch":
        return replace(self, images=copy(self.images), labels=copy(self.labels), extra=_copied_rows(self.extra, copy))

    def pixels(self) -> list[torch.Tensor]:
        return [self.images]

    @classmethod
    def from_pixels(
        cls,
        pixels: list[torch.Tensor],
        labels: torch.Tensor,
        gids: torch.Tensor,
        keys: list[str],
        extra: Optional[FieldRows] = None,
    ) -> Batch:
        """The batch of this type whose :meth:`pixels` are ``pixels`` (the transport rebuilds it from its slot)."""
        return cls(pixels[0], labels, gids, keys, extra)


@dataclass
class ViewBatch(Batch):
    """Multi-crop pixels (``views=``): ``views`` a list of uint8 ``[n, 3, S_v, S_v]``, one per view, in order.

    Row ``i`` of every view is the same sample (views of one sample travel, and are skipped, together).

    Attributes:
        views: the views' pixels (channels-last in memory unless the config says otherwise).
        labels: int64 ``[n]``.
        gids: int64 ``[n]``.
        keys: sample keys.
        extra: the rows of the other fields asked for (``fields=``), or ``None``.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ("views",)
    views: list[torch.Tensor]
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    extra: Optional[FieldRows] = None

    def copied(self, copy: Callable[[torch.Tensor], torch.Tensor]) -> "ViewBatch":
        return replace(
            self, views=[copy(v) for v in self.views], labels=copy(self.labels), extra=_copied_rows(self.extra, copy)
        )

    def pixels(self) -> list[torch.Tensor]:
        return list(self.views)

    @classmethod
    def from_pixels(
        cls,
        pixels: list[torch.Tensor],
        labels: torch.Tensor,
        gids: torch.Tensor,
        keys: list[str],
        extra: Optional[FieldRows] = None,
    ) -> Batch:
        """The batch whose :meth:`pixels` are ``pixels`` (the transport rebuilds it from its slot)."""
        return cls(list(pixels), labels, gids, keys, extra)


@dataclass
class RawBatch(Batch):
    """Undecoded samples (``raw=True``): the :class:`~shardkit.format.RawSample` objects, rows beside them.

    Attributes:
        samples: the batch's samples (label and key as the loader reports them).
        labels: int64 ``[n]``.
        gids: int64 ``[n]``.
        keys: sample keys.
        extra: the rows of the other fields asked for (``fields=``), or ``None``.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ("samples",)
    samples: list[RawSample]
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    extra: Optional[FieldRows] = None

    @property
    def raw(self) -> list[RawSample]:
        """:attr:`samples` (the field's name when one batch type had every mode's fields)."""
        return self.samples

    def relabelled(self, labels: torch.Tensor, keys: list[str]) -> "RawBatch":
        """The batch with other labels and keys, its samples carrying them too."""
        samples = [replace(s, key=k, label=int(v)) for s, k, v in zip(self.samples, keys, labels.tolist())]
        return replace(self, samples=samples, labels=labels, keys=keys)


@dataclass(frozen=True, eq=False)
class Jpegs:
    """A batch's encoded images and crop geometry (``decode_on="device"``).

    One flat buffer, not ``n`` bytes objects: it pickles as a few arrays, and the decoder takes
    zero-copy slices of it (:meth:`tensors`).

    Attributes:
        data: uint8 ``[total bytes]``: the samples' JPEG bytes, one after another.
        offsets: int64 ``[n + 1]``: sample ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
        sizes: int64 ``[n, 2]`` (width, height) from the headers.
        boxes: float64 ``[n, 4]`` crop boxes (:class:`~shardkit.loader.decode.worker.Crops`).
        flips: bool ``[n]``.
        routes: each sample's :func:`~shardkit.loader.decode.jpegroute.jpeg_route`.
        shards: each sample's shard URL (names a sample that cannot be decoded).
        size: the output size the worker's geometry is for (``size`` of the epoch's image options).
    """

    data: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    boxes: np.ndarray
    flips: np.ndarray
    routes: tuple[Optional[str], ...]
    shards: tuple[str, ...]
    size: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def tensors(self) -> list[torch.Tensor]:
        """The samples' bytes as 1-D uint8 tensors (views of :attr:`data`)."""
        flat, off = torch.from_numpy(self.data), self.offsets.tolist()
        return [flat[a:b] for a, b in zip(off, off[1:])]


@dataclass
class JpegBatch(Batch):
    """Encoded JPEGs and their crop geometry (``decode_on="device"``, before the consumer decodes them).

    Attributes:
        jpegs: the samples' bytes and geometry.
        labels: int64 ``[n]``.
        gids: int64 ``[n]``.
        keys: sample keys.
        extra: the rows of the other fields asked for (``fields=``), or ``None``.
    """

    PAYLOAD: ClassVar[tuple[str, ...]] = ("jpegs",)
    jpegs: Jpegs
    labels: torch.Tensor
    gids: torch.Tensor
    keys: list[str]
    extra: Optional[FieldRows] = None

    @property
    def encoded(self) -> Jpegs:
        """:attr:`jpegs` (the field's name when one batch type had every mode's fields)."""
        return self.jpegs
