"""Decode a batch of JPEGs on the training device and crop it to the loader's output.

The consumer-side half of ``decode_on="device"``: workers only read shards,
parse each sample's header and compute its crop geometry exactly as the worker
path does (:meth:`shardkit.loader.decode.worker.CropDecoder.geometry`, a pure function
of seed, epoch and global sample id; :func:`batch_geometry` below), and send the
JPEG bytes, the geometry and the labels. :class:`DeviceDecoder` then

1. routes each sample by its header (:func:`~shardkit.loader.decode.jpegroute.jpeg_route`): baseline 8-bit
   YCbCr/gray JPEGs with standard subsampling go to one batched
   ``decode_jpeg(list, device=...)`` call (nvJPEG on CUDA, libjpeg-turbo on CPU) of
   TorchCodec, or of torchvision where TorchCodec is not installed
   (:mod:`shardkit.loader.decode.backend`); the rest (progressive, CMYK/YCCK, unusual subsampling,
   12-bit, not a JPEG, cut short, an EXIF orientation TorchCodec would apply) are decoded
   on the CPU by the worker path's own decoder and copied to the device. The route depends
   on the header only, so the counts are the same on every device and backend;
2. if the batched call fails on the data (a damaged file with a good header), bisects the
   list, so good samples still decode in batches and the bad one is decoded
   alone on the CPU; a sample no decoder can read is *dropped* (the batch is one
   smaller, as the worker path's skip rule), reported in
   :attr:`DecodedBatch.errors` and counted. Out-of-memory, CUDA and decoder-start
   errors are not the data's: they propagate (:func:`shardkit.loader.decode.backend.is_data_error`);
3. crops and resizes every sample in one batched pass (:mod:`shardkit.loader.decode.cropresize`): per sample and axis, a
   dense ``[S, window]`` matrix of the antialiased bilinear filter torch's
   ``interpolate(mode="bilinear", antialias=True)`` uses (the worker's resize),
   clamped where the worker clamps (the crop box in train, the whole image in
   eval), so the output is ``Wy @ image @ Wx^T`` as two batched matmuls over a
   zero-padded canvas of the samples' windows; a horizontal flip reverses
   ``Wx``'s rows. Samples are grouped into canvases of at most
   ``max_canvas_pixels`` (sorted by size), so one large image does not inflate
   the whole batch's canvas.

The decoded images are dropped when the call returns (peak memory is one batch's
decoded images plus one canvas). With ``device="cpu"`` everything runs on CPU
tensors, which is how the tests check it against the worker path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from shardkit.loader.config import ImageConfig, Preset
from shardkit.loader.decode.backend import (
    DECODE,
    check_backend,
    default_backend,
    import_backend,
    is_data_error,
    normalize_device,
    stream_barrier,
)
from shardkit.loader.decode.cropresize import axis_params, letterbox_params, resized_crops
from shardkit.loader.decode.decoders import make_decoder
from shardkit.loader.decode.jpegroute import Jpeg, jpeg_route
from shardkit.loader.decode.worker import MAX_EVAL_ASPECT, CropDecoder, Crops


@dataclass
class DeviceDecodeStats:
    """Cumulative counts of one :class:`DeviceDecoder` (reset with ``decoder.stats = DeviceDecodeStats(backend=decoder.backend)``).

    Attributes:
        samples: samples returned (decoded and cropped).
        batched: samples decoded by the batched device call.
        fallback: samples routed to the CPU decoder by their header, per reason (:func:`jpeg_route`).
        retried: samples whose header looked fine but whose batched decode failed; decoded alone on the CPU.
        corrupt: samples no decoder could read (dropped from their batch).
        batches: calls.
        backend: the library of the batched decode (``"torchcodec"`` or ``"torchvision"``).
    """

    samples: int = 0
    batched: int = 0
    fallback: Counter = field(default_factory=Counter)
    retried: int = 0
    corrupt: int = 0
    batches: int = 0
    backend: str = ""


@dataclass(frozen=True)
class DecodedBatch:
    """What :class:`DeviceDecoder` returns for one batch.

    Attributes:
        images: uint8 ``[n, 3, S, S]`` on the device (channels-last unless the config says otherwise).
        kept: int64 ``[n]`` (numpy) positions of the returned samples in the input; select labels/ids with it.
        errors: ``(position, message)`` of each dropped sample (could not be decoded).
    """

    images: Tensor
    kept: np.ndarray
    errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class BatchGeometry:
    """What a worker sends with a batch's JPEG bytes for ``decode_on="device"``.

    Attributes:
        kept: positions (in the worker's batch) of the samples whose header was readable.
        errors: ``(position, message)`` of the samples whose header was not (skipped, as the worker path does).
        sizes: int64 ``[n, 2]`` (width, height) from the headers of the kept samples.
        crops: their crop boxes and flips (:meth:`CropDecoder.geometry`).
        routes: their :func:`jpeg_route` (computed here, in the worker, not per sample in the consumer).
    """

    kept: np.ndarray
    errors: tuple[tuple[int, str], ...]
    sizes: np.ndarray
    crops: Crops
    routes: tuple[Optional[str], ...]


def batch_geometry(decoder: CropDecoder, jpegs: Sequence[bytes], epoch: int, gids: np.ndarray) -> BatchGeometry:
    """Worker side of ``decode_on="device"``: headers (no pixels) and the batch's crop geometry.

    Exactly the worker path's first two steps: :meth:`CropDecoder.header` per sample
    (an unreadable or oversized header skips its sample) and one vectorised
    :meth:`CropDecoder.geometry` call keyed by ``(seed, epoch, gid)``; plus each kept
    sample's :func:`jpeg_route`.
    """
    kept, errors, sizes = [], [], []
    for i, data in enumerate(jpegs):
        try:
            sizes.append(decoder.header(data))
        except Exception as exc:  # noqa: BLE001 - any header failure is a bad sample
            errors.append((i, f"cannot decode image ({type(exc).__name__}: {exc})"))
            continue
        kept.append(i)
    idx = np.array(kept, np.int64)
    size_arr = np.array(sizes, np.int64).reshape(-1, 2)
    crops = decoder.geometry(size_arr, epoch, np.asarray(gids, np.int64)[idx])
    return BatchGeometry(idx, tuple(errors), size_arr, crops, tuple(jpeg_route(jpegs[i]) for i in kept))


def _as_tensor(data: Jpeg) -> Tensor:
    if isinstance(data, Tensor):
        return data
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)  # bytearray: decode_jpeg wants a writable buffer


def _decode_list(tensors: list[Tensor], device: torch.device, backend: str) -> list[Tensor]:
    """One batched ``decode_jpeg`` call of ``backend`` (``backend.DECODE``), behind a ``stream_barrier``: RGB uint8."""
    stream_barrier(device)
    return DECODE[backend](tensors, device)


class DeviceDecoder:
    """Decodes a batch's JPEG bytes on ``device`` into the loader's ``[n, 3, S, S]`` uint8 crops.

    Args:
        image: the loader's :class:`~shardkit.loader.config.ImageConfig` (preset, size, layout,
            and the CPU fallback decoder); a per-sample ``hook`` is not supported (it runs on the
            CPU per sample: keep ``decode_on="worker"`` for it).
        device: where to decode (``"cuda"``: nvJPEG; ``"cpu"``: libjpeg-turbo); ``"cuda"`` means the
            current CUDA device (:func:`shardkit.loader.decode.backend.normalize_device`).
        max_canvas_pixels: pixels of one zero-padded canvas (samples x max height x max width of
            their windows); the float64 canvas (:mod:`shardkit.loader.decode.cropresize`) takes 24 bytes per pixel.
            Default 2**25 (~800 MB), which holds a whole batch of 256 from 256-px shards (256 x 256 x 341).
        backend: ``"torchcodec"`` or ``"torchvision"``; default: the process's choice
            (:func:`shardkit.loader.decode.backend.default_backend`: TorchCodec when it imports).

    Call ``decoder(jpegs, sizes, crops, routes)`` with the :class:`BatchGeometry` fields of the worker.
    ``decoder.backend`` (and ``decoder.stats.backend``) says which library decodes the batches.
    """

    def __init__(
        self,
        image: ImageConfig,
        device: Union[torch.device, str] = "cpu",
        *,
        max_canvas_pixels: int = 1 << 25,
        backend: Optional[str] = None,
    ):
        if image.hook is not None:
            raise ValueError("a per-sample hook runs on the CPU in the worker; use decode_on='worker' with a hook")
        if max_canvas_pixels < 1:
            raise ValueError(f"max_canvas_pixels must be >= 1, got {max_canvas_pixels}")
        self.cfg = image
        self.device = normalize_device(device)
        self.max_canvas_pixels = max_canvas_pixels
        self.backend = check_backend(backend) if backend is not None else default_backend()
        import_backend(self.backend)  # on a thread (no reference cycle through the caller); a failure raises here
        self.fallback_decoder = make_decoder(image.decoder)
        self.stats = DeviceDecodeStats(backend=self.backend)

    # --- decoding -----------------------------------------------------------

    def _cpu_pixels(self, data: Jpeg, width: int, height: int) -> Tensor:
        """The worker path's decode of one sample, on the CPU (raises for a file it cannot read)."""
        raw = bytes(data.numpy()) if isinstance(data, Tensor) else bytes(data)
        arr = self.fallback_decoder.decode(raw, int(width), int(height), bool(self.cfg.fast_decode))
        return torch.from_numpy(arr).permute(2, 0, 1)

    def _cpu_decode(
        self,
        i: int,
        jpegs: Sequence[Jpeg],
        sizes: np.ndarray,
        out: list[Optional[Tensor]],
        errors: list[tuple[int, str]],
        why: str = "",
    ) -> bool:
        """Decode sample ``i`` on the CPU into ``out[i]`` (on the device), or record it in ``errors``.

        Only the decode is guarded: the copy to the device is outside the ``except`` (an out-of-memory or
        CUDA error there is not the sample's fault and propagates)."""
        try:
            pixels = self._cpu_pixels(jpegs[i], sizes[i, 0], sizes[i, 1])
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any decoder failure is a bad sample
            errors.append((i, f"cannot decode image ({why}{type(exc).__name__}: {exc})"))
            return False
        out[i] = pixels.to(self.device)
        return True

    def _decode_batched(
        self,
        idx: list[int],
        tensors: dict[int, Tensor],
        jpegs: Sequence[Jpeg],
        sizes: np.ndarray,
        out: list[Optional[Tensor]],
        errors: list[tuple[int, str]],
    ) -> None:
        """Batched decode of ``idx``; on a data error bisect, and decode a failing single sample on the CPU."""
        try:
            images = _decode_list([tensors[i] for i in idx], self.device, self.backend)
        except Exception as exc:
            # out of memory, CUDA, decoder start: not the data's fault, no bisection, no drop
            if not is_data_error(exc):
                raise
            if len(idx) > 1:
                half = len(idx) // 2
                self._decode_batched(idx[:half], tensors, jpegs, sizes, out, errors)
                self._decode_batched(idx[half:], tensors, jpegs, sizes, out, errors)
                return
            if self._cpu_decode(idx[0], jpegs, sizes, out, errors, f"{type(exc).__name__}: {exc}; CPU: "):
                self.stats.retried += 1
            return
        for i, img in zip(idx, images):
            out[i] = img
        self.stats.batched += len(idx)

    def decode(
        self, jpegs: Sequence[Jpeg], sizes: np.ndarray, routes: Optional[Sequence[Optional[str]]] = None
    ) -> tuple[list[Optional[Tensor]], list[tuple[int, str]]]:
        """``3 x H x W`` uint8 images on the device (``None`` where undecodable) and the errors; the batched call decodes
        at full resolution, the CPU fallback at ``sizes`` (the stored size, or smaller for a DCT-scaled decode)."""
        out: list[Optional[Tensor]] = [None] * len(jpegs)
        errors: list[tuple[int, str]] = []
        if routes is None:
            routes = [jpeg_route(data) for data in jpegs]
        elif len(routes) != len(jpegs):
            raise ValueError(f"got {len(jpegs)} images and {len(routes)} routes; they must match")
        batch = [i for i, r in enumerate(routes) if r is None]
        if batch:  # first, so that the device works while the CPU decodes the rest
            self._decode_batched(batch, {i: _as_tensor(jpegs[i]) for i in batch}, jpegs, sizes, out, errors)
        for i, reason in enumerate(routes):
            if reason is None:
                continue
            self.stats.fallback[reason] += 1
            self._cpu_decode(i, jpegs, sizes, out, errors)
        return out, sorted(errors)

    # --- crop + resize ------------------------------------------------------

    def resize(self, images: list[Tensor], sizes: np.ndarray, crops: Crops) -> Tensor:
        """Crop ``crops.boxes`` (stored-image pixels, ``sizes`` (width, height)) of ``images`` and resize them to
        ``size`` (antialiased bilinear, as the worker), flipping where ``crops.flips``: uint8 ``[n, 3, S, S]``."""
        s, n = self.cfg.size, len(images)
        shape = (n, s, s, 3) if self.cfg.channels_last else (n, 3, s, s)
        out = torch.empty(shape, dtype=torch.uint8, device=self.device)
        if self.cfg.channels_last:
            out = out.permute(0, 3, 1, 2)
        if n == 0:
            return out
        dims = np.array([img.shape[1:] for img in images], np.int64)
        boxes = np.asarray(crops.boxes, np.float64)
        if self.cfg.preset in (Preset.DETECT, Preset.LETTERBOX):  # windows that may reach past the image: padded
            px = letterbox_params(
                s, sizes[:, 0].astype(np.float64), dims[:, 1].astype(np.float64), boxes[:, 0], boxes[:, 2]
            )
            py = letterbox_params(
                s, sizes[:, 1].astype(np.float64), dims[:, 0].astype(np.float64), boxes[:, 1], boxes[:, 3]
            )
            return resized_crops(images, px, py, np.asarray(crops.flips, bool), out, self.max_canvas_pixels)
        if self.cfg.preset is Preset.EVAL:
            clamp_box = sizes.max(1) > MAX_EVAL_ASPECT * sizes.min(1)  # the worker crops panoramas first
        else:
            clamp_box = np.ones(n, bool)
        px = axis_params(
            s, sizes[:, 0].astype(np.float64), dims[:, 1].astype(np.float64), boxes[:, 0], boxes[:, 2], clamp_box
        )
        py = axis_params(
            s, sizes[:, 1].astype(np.float64), dims[:, 0].astype(np.float64), boxes[:, 1], boxes[:, 3], clamp_box
        )
        return resized_crops(images, px, py, np.asarray(crops.flips, bool), out, self.max_canvas_pixels)

    def __call__(
        self, jpegs: Sequence[Jpeg], sizes: np.ndarray, crops: Crops, routes: Optional[Sequence[Optional[str]]] = None
    ) -> DecodedBatch:
        """Decode, crop and resize one batch.

        Args:
            jpegs: the samples' encoded bytes (``bytes`` or 1-D uint8 CPU tensors).
            sizes: int64 ``[n, 2]`` (width, height) from their headers (:attr:`BatchGeometry.sizes`).
            crops: their crop boxes and flips (:attr:`BatchGeometry.crops`).
            routes: their :func:`jpeg_route` if already known (:attr:`BatchGeometry.routes`); else computed here.

        Returns:
            A :class:`DecodedBatch`; undecodable samples are dropped and listed in ``errors``.
        """
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        n_boxes = len(crops.boxes)  # type: ignore[arg-type] # the device path always has boxes
        if len(jpegs) != len(sizes) or len(sizes) != n_boxes:
            raise ValueError(f"got {len(jpegs)} images, {len(sizes)} sizes and {n_boxes} crop boxes; they must match")
        decoded, errors = self.decode(jpegs, sizes, routes)
        kept = np.array([i for i, img in enumerate(decoded) if img is not None], np.int64)
        images = [decoded[i] for i in kept.tolist()]
        del decoded
        out = self.resize(images, sizes[kept], Crops(np.asarray(crops.boxes)[kept], np.asarray(crops.flips)[kept]))
        self.stats.samples += len(kept)
        self.stats.corrupt += len(errors)
        self.stats.batches += 1
        return DecodedBatch(out, kept, tuple(errors))
