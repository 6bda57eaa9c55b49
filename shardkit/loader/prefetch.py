"""Copy the next batch to the accelerator while the current step runs.

:class:`DevicePrefetcher` wraps any iterable of batches (a ``DataLoader``, the
shardkit loader). On CUDA it copies batch ``n + 1`` host-to-device on a side
stream with ``non_blocking=True`` and applies
the transform (e.g. :class:`~shardkit.augment.GpuAugment`) there, while the
training step on batch ``n`` runs on the consumer's stream. Before a batch is
handed out, the consumer's stream waits for the side stream and every tensor
of the batch is ``record_stream``-ed on it, so the caching allocator does not
reuse its memory early. Use ``DataLoader(pin_memory=True)``: copies from
pageable memory are not asynchronous.

There is one side stream per device, shared by every prefetcher (:data:`side_streams`):
scripts build a prefetcher per epoch and per validation pass, and memory the
caching allocator holds for one stream is not reused by another, so a stream per
prefetcher strands reserved memory each epoch (timm's per-epoch stream,
huggingface/pytorch-image-models#2781).

With a MixUp/CutMix transform (one with ``num_classes``), class-index labels are
checked on the host before they are copied (a label outside ``[0, num_classes)``
would be a device-side assert on CUDA): a ``ValueError`` names the label.

A shardkit loader with ``decode_on="device"`` sends JPEG bytes and crop
geometry instead of pixels; the prefetcher iterates it with
``loader.iter_on(device)`` (any loader with an ``iter_on`` method), so each
batch is decoded, cropped and resized on ``device`` (nvJPEG on CUDA,
:mod:`shardkit.loader.decode.device`) inside the side stream, before the transform
(which then must not crop again: e.g. ``GpuAugment`` of flips-free colour ops).

On a CPU device it is a transparent pass-through (it still applies the
transform, and decodes ``decode_on="device"`` batches on the CPU), so the same
training script runs everywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from shardkit.targets.batchdict import TARGET_FIELDS

Batch = Any
_END = object()


def _is_tensor_list(field: Any) -> bool:
    """A list of tensors as one field: the ``views`` of ``load(views=...)``."""
    return isinstance(field, list) and bool(field) and all(isinstance(t, Tensor) for t in field)


def _map_field(field: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(field, Tensor):
        return fn(field)
    return [fn(t) for t in field] if _is_tensor_list(field) else field


def _map_batch(batch: Batch, fn: Callable[[Tensor], Tensor]) -> Batch:
    """Apply ``fn`` to a tensor, or to the tensor fields of a tuple/list/namedtuple (and to each tensor of a
    field that is a list of tensors, such as the views of ``load(views=...)``)."""
    if isinstance(batch, Tensor):
        return fn(batch)
    if isinstance(batch, dict):  # load(fields=...): every tensor field (and the views) moved, the rest as is
        return {k: _map_field(v, fn) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        fields = [_map_field(f, fn) for f in batch]
        if hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*fields)
        return type(batch)(fields)
    raise TypeError(
        f"DevicePrefetcher expects batches that are a tensor, a tuple/list or a dict, got {type(batch).__name__}"
    )


def _tensors(batch: Batch) -> list[Tensor]:
    if isinstance(batch, Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    return [t for f in batch for t in ([f] if isinstance(f, Tensor) else f if _is_tensor_list(f) else [])]


def _default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def normalise_device(device: torch.device | str) -> torch.device:
    """``"cuda"`` -> ``cuda:<current device>``, so ``"cuda"`` and ``"cuda:0"`` name the same thing."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class SideStreams:
    """One side stream per device, created on first use and shared by every :class:`DevicePrefetcher`.

    Args:
        factory: makes the stream for a (normalised) device; default ``torch.cuda.Stream(device=...)``.
    """

    def __init__(self, factory: Callable[[torch.device], Any] | None = None) -> None:
        self._factory = factory or (lambda device: torch.cuda.Stream(device=device))
        self._streams: dict[torch.device, Any] = {}
        self._lock = threading.Lock()

    def get(self, device: torch.device | str) -> Any:
        """The side stream of ``device`` (made once)."""
        device = normalise_device(device)
        with self._lock:
            if device not in self._streams:
                self._streams[device] = self._factory(device)
            return self._streams[device]

    def clear(self) -> None:
        """Forget the streams (the next :meth:`get` makes new ones)."""
        with self._lock:
            self._streams.clear()


#: The side streams every :class:`DevicePrefetcher` uses (``side_streams.clear()`` forgets them).
side_streams = SideStreams()


def check_labels(batch: Batch, num_classes: int) -> None:
    """Refuse class indices outside ``[0, num_classes)`` in a batch's labels (the second field) while they
    are still on the host: on CUDA the one-hot scatter would be a device-side assert. Labels already on a
    device are not read here (that would wait for it): ``GpuAugment`` counts them (``label_errors``)."""
    if isinstance(batch, dict):
        labels = batch.get("label")
    elif isinstance(batch, Tensor) or len(batch) < 2:
        return
    else:
        labels = batch[1]
    if (
        not isinstance(labels, Tensor)
        or labels.device.type != "cpu"
        or labels.ndim != 1
        or labels.is_floating_point()
        or not len(labels)
    ):
        return
    bad = ((labels < 0) | (labels >= num_classes)).nonzero()
    if len(bad):
        i = int(bad[0, 0])
        raise ValueError(
            f"label {int(labels[i])} (sample {i} of the batch, {len(bad)} such) is outside [0, {num_classes}): "
            f"the MixUp/CutMix op has num_classes={num_classes}; fix the labels or num_classes"
        )


class DevicePrefetcher:
    """Iterate ``loader`` yielding its batches on ``device``, transformed.

    Args:
        loader: yields a tensor, tuples/lists such as ``(images, labels,
            *extra)`` or dicts (``load(fields=...)``); tensor fields (and every tensor of a field that is a
            list of tensors: the views of ``load(views=...)``) are moved to ``device``, other
            fields are passed through untouched. A loader with an ``iter_on(device)``
            method (:class:`~shardkit.loader.ShardLoader`) is iterated with it.
        device: target device; ``None``: ``"cuda"`` if available, else ``"cpu"``.
        transform: applied on ``device`` to the images (the first field, a dict's ``"image"``, or the
            batch if it is a tensor), e.g. a :class:`~shardkit.augment.GpuAugment`.
        transform_labels: call ``transform(images, labels)`` and replace the
            first two fields with its result (needed for MixUp/CutMix);
            ``None``: use the transform's ``needs_labels`` attribute (False
            if it has none).
        non_blocking: asynchronous host-to-device copies (CUDA only).

    ``len()`` is the loader's length.
    """

    def __init__(
        self,
        loader: Iterable[Batch],
        device: torch.device | str | None = None,
        transform: Callable[..., Any] | None = None,
        *,
        transform_labels: bool | None = None,
        non_blocking: bool = True,
    ) -> None:
        self.loader = loader
        device = torch.device(device) if device is not None else _default_device()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                "device is 'cuda' but torch.cuda.is_available() is False; pass device=None to fall back to the CPU"
            )
        self.device = normalise_device(device)
        self.transform = transform
        if transform_labels is None:
            transform_labels = bool(getattr(transform, "needs_labels", False))
        self.transform_labels = transform_labels
        self.non_blocking = non_blocking
        self._stream: torch.cuda.Stream | None = None  # side_streams' stream of the device, set on first CUDA iteration
        num_classes = getattr(transform, "num_classes", None)
        self._num_classes = num_classes if transform_labels and isinstance(num_classes, int) else None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _prepare(self, batch: Batch, non_blocking: bool) -> Batch:
        if self._num_classes is not None:
            check_labels(batch, self._num_classes)
        batch = _map_batch(batch, lambda t: t.to(self.device, non_blocking=non_blocking))
        if self.transform is None:
            return batch
        if isinstance(batch, Tensor):
            return self.transform(batch)
        if isinstance(batch, dict):
            return self._transform_dict(batch)
        fields = list(batch)
        if self.transform_labels:
            if len(fields) < 2:
                raise ValueError("transform_labels=True needs batches of (images, labels, ...)")
            fields[0], fields[1] = self.transform(fields[0], fields[1])
        else:
            fields[0] = self.transform(fields[0])
        return type(batch)(*fields) if hasattr(batch, "_fields") else type(batch)(fields)

    def _transform_dict(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A dict batch (``fields=``): the transform gets its ``image`` (and ``label``, else ``labels``); a
        batch with targets (boxes, keypoints, mask) goes whole to a transform that moves them."""
        assert self.transform is not None
        if "image" not in batch:
            raise ValueError("a transform needs the 'image' field: add it to fields=")
        if any(k in batch for k in TARGET_FIELDS):
            if not getattr(self.transform, "moves_targets", False):
                raise ValueError(
                    "the batch has target fields (boxes, keypoints, mask) and this transform would move only the "
                    "image: pass a shardkit GpuAugment (it moves them), or transform the dict batches yourself"
                )
            if self.transform_labels:
                raise ValueError(
                    "transform_labels=True does not apply to batches with targets (MixUp/CutMix refuse them)"
                )
            return self.transform(batch)
        out = dict(batch)
        if self.transform_labels:
            name = "label" if "label" in batch else "labels" if "labels" in batch else None
            if name is None:
                raise ValueError("transform_labels=True needs a 'label' or 'labels' field among fields=")
            out["image"], out[name] = self.transform(batch["image"], batch[name])
        else:
            out["image"] = self.transform(batch["image"])
        return out

    def _source(self) -> Iterable[Batch]:
        iter_on = getattr(self.loader, "iter_on", None)
        return iter_on(self.device) if callable(iter_on) else self.loader

    def __iter__(self) -> Iterator[Batch]:
        if self.device.type != "cuda":
            for batch in self._source():
                yield self._prepare(batch, non_blocking=False)
            return
        yield from self._iter_cuda()

    def _side_stream(self) -> Any:
        if self._stream is None:
            self._stream = side_streams.get(self.device)
        return self._stream

    def _iter_cuda(self) -> Iterator[Batch]:
        stream = self._side_stream()
        # side-stream work is ordered after whatever the consumer enqueued before iterating
        stream.wait_stream(torch.cuda.current_stream(self.device))
        ready: Batch = None
        have = False
        it = iter(self._source())
        while True:
            # next(): a loader's own device work (decode_on="device") is on the side stream too
            with torch.cuda.stream(stream):
                cpu_batch = next(it, _END)
                if cpu_batch is _END:
                    break
                nxt = self._prepare(cpu_batch, non_blocking=self.non_blocking)
            if have:
                yield ready
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_stream(stream)
            for t in _tensors(nxt):
                if t.device.type == "cuda":
                    t.record_stream(consumer)
            ready, have = nxt, True
        if have:
            yield ready
