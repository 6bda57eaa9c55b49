"""Which library decodes JPEGs for ``decode_on="device"`` and ``decoder="torchvision"``: TorchCodec, else torchvision.

torchvision 0.29 deprecates its image decoders in favour of TorchCodec (``torchcodec.decoders.decode_jpeg``:
a list of 1-D uint8 CPU tensors in, a list of ``3 x H x W`` uint8 tensors out; batched nvJPEG on CUDA,
libjpeg-turbo on CPU). The backend is chosen once per process (:func:`default_backend`) by
:func:`choose_backend`, a pure function of whether TorchCodec imports (injectable in tests; no
environment variables). torchvision's decoder is the fallback for installs without TorchCodec
(``pip install shardkit[gpu]`` brings it).

The two differ where this module hides it:

* TorchCodec applies the EXIF orientation; torchvision and the worker path (simplejpeg, PIL) decode the
  stored pixels. :func:`exif_orientation` reads the tag from the header, so that such files can be sent
  to a decoder that does not rotate (the crop geometry is computed on the stored size).
* Both raise ``RuntimeError`` for a bad JPEG in a batch, and for out-of-memory, CUDA and decoder-start
  failures too: :func:`is_data_error` tells them apart (only a data error may be bisected and the sample
  dropped; the others must propagate).
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Literal, Union

import torch
from torch import Tensor

TORCHCODEC = "torchcodec"
TORCHVISION = "torchvision"
BACKENDS = (TORCHCODEC, TORCHVISION)
#: the module each backend's decoder lives in
_MODULES = {TORCHCODEC: "torchcodec.decoders", TORCHVISION: "torchvision.io"}


def choose_backend(importable: Callable[[str], bool]) -> str:
    """``"torchcodec"`` if ``importable("torchcodec")``, else ``"torchvision"`` (its decoders are deprecated)."""
    return TORCHCODEC if importable(TORCHCODEC) else TORCHVISION


def import_backend(name: str) -> None:
    """Import ``name``'s decoder module on a fresh thread (raises what the import raised).

    torchvision's first import leaves a reference cycle through the importing stack (``torch.fx.wrap``
    keeps ``inspect.currentframe()`` in a local), which would keep the caller's frames -- a loader in the
    middle of its iteration, its worker processes -- alive until the garbage collector runs. A thread's
    stack holds nothing of the caller's.
    """
    module = _MODULES[check_backend(name)]
    if module in sys.modules:
        return
    failed: list[BaseException] = []

    def run() -> None:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # re-raised on the caller's thread
            failed.append(exc)

    t = threading.Thread(target=run, name=f"shardkit-import-{name}")
    t.start()
    t.join()
    if failed:
        if name == TORCHCODEC and isinstance(failed[0], ImportError):
            raise ImportError(
                f"the torchcodec JPEG backend cannot be imported ({failed[0]}): pip install 'shardkit[gpu]', "
                "or leave the backend unset to use torchvision's decoder"
            ) from failed[0]
        raise failed[0]


def _importable(name: str) -> bool:
    try:
        import_backend(name)
    except Exception:  # any failure to load (no package, a wheel for another torch, no libs): not importable
        return False
    return True


@functools.cache
def default_backend() -> str:
    """The backend of this process, chosen on first use: TorchCodec when it imports, else torchvision."""
    return choose_backend(_importable)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown JPEG backend {name!r}; choose from {', '.join(BACKENDS)}")
    return name


def _decode_torchcodec(tensors: list[Tensor], device: torch.device) -> list[Tensor]:
    from torchcodec.decoders import decode_jpeg

    return list(decode_jpeg(tensors, mode="RGB", device=device))


def _decode_torchvision(tensors: list[Tensor], device: torch.device) -> list[Tensor]:
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():  # torchvision >= 0.29 warns on every call; TorchCodec is used wherever installed
        warnings.simplefilter("ignore", DeprecationWarning)
        return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device))


#: backend name -> ``decode(list of 1-D uint8 CPU tensors, device) -> list of 3 x H x W uint8 RGB tensors``
DECODE: dict[str, Callable[[list[Tensor], torch.device], list[Tensor]]] = {
    TORCHCODEC: _decode_torchcodec,
    TORCHVISION: _decode_torchvision,
}


def stream_barrier(device: torch.device) -> None:
    """Wait until the work queued on ``device``'s current stream is done (a no-op off CUDA).

    Called before every batched device decode: nvJPEG writes its outputs from its own stream without waiting
    for the caller's stream (pytorch/vision#9606, meta-pytorch/torchcodec#1634), while the outputs are allocated
    in blocks the caching allocator may just have taken back from tensors that queued kernels still read. A host
    sync of the current stream costs little here, because the decode syncs anyway.
    """
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def normalize_device(device: Union[torch.device, str]) -> torch.device:
    """``device`` with its index: ``"cuda"`` is the current CUDA device (``cuda:0`` ...), ``"cpu"`` has none."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.index is None:
        module = getattr(torch, dev.type, None)
        if module is not None and hasattr(module, "current_device"):
            return torch.device(dev.type, module.current_device())
    return dev


#: nvJPEG statuses that are not the file's fault: NOT_INITIALIZED, ALLOCATOR_FAILURE, EXECUTION_FAILED,
#: ARCH_MISMATCH, INTERNAL_ERROR (BAD_JPEG, JPEG_NOT_SUPPORTED, INCOMPLETE_BITSTREAM ... are)
_NVJPEG_NOT_DATA = {1, 5, 6, 7, 8}
_NVJPEG_STATUS = re.compile(r"nvjpeg\w*\s+failed[^0-9\n]{0,20}(\d+)", re.IGNORECASE)
#: message fragments of failures that are not the data's: memory, the CUDA runtime, the decoder failing to start
_NOT_DATA = (
    "out of memory",
    "cuda error",
    "cudaerror",
    "cuda driver",
    "cuda runtime",
    "device-side assert",
    "illegal memory access",
    "launch failure",
    "no kernel image",
    "cublas",
    "cudnn",
    "nvjpeg_status_not_initialized",
    "nvjpeg_status_allocator_failure",
    "nvjpeg_status_execution_failed",
    "nvjpeg_status_arch_mismatch",
    "nvjpeg_status_internal_error",
    "failed to create nvjpeg",
    "failed to initialize nvjpeg",
    "failed to create jpeg stream",
    "libnvjpeg",
    "could not load",
    "cannot open shared object",
)


def is_data_error(exc: BaseException) -> bool:
    """Whether a failed batched decode may be blamed on the data (then: bisect, and drop what no decoder reads).

    Only a plain ``RuntimeError`` (what both libraries raise for a bad JPEG) whose message names no
    out-of-memory, CUDA or decoder-start failure; ``torch.OutOfMemoryError``, ``torch.AcceleratorError``
    (CUDA errors), ``NotImplementedError``, ``MemoryError``, ``ImportError``/``OSError`` (a decoder that cannot
    start) and anything else are not.
    """
    if not isinstance(exc, RuntimeError) or isinstance(exc, (torch.cuda.OutOfMemoryError, NotImplementedError)):
        return False
    accel = getattr(torch, "AcceleratorError", None)
    if accel is not None and isinstance(exc, accel):
        return False
    msg = str(exc).lower()
    if any(p in msg for p in _NOT_DATA):
        return False
    m = _NVJPEG_STATUS.search(msg)
    return not (m and int(m.group(1)) in _NVJPEG_NOT_DATA)


_EXIF_ORIENTATION = 0x0112


def app1_orientation(payload: Union[bytes, memoryview]) -> int:
    """The EXIF orientation (1..8) in an APP1 segment's payload (after its length), 1 if none or unreadable."""
    p = bytes(payload[:6])
    if p != b"Exif\x00\x00":
        return 1
    tiff = bytes(payload[6 : 6 + 65536])
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order: Literal["little", "big"] = "little" if tiff[:2] == b"II" else "big"

    def u(off: int, n: int) -> int:
        return int.from_bytes(tiff[off : off + n], order) if off + n <= len(tiff) else -1

    ifd = u(4, 4)
    count = u(ifd, 2)
    if ifd < 8 or count < 0:
        return 1
    for k in range(min(count, 1000)):
        entry = ifd + 2 + 12 * k
        tag = u(entry, 2)
        if tag < 0:
            return 1
        if tag == _EXIF_ORIENTATION:
            value = u(entry + 8, 2)
            return value if 1 <= value <= 8 else 1
    return 1


def exif_orientation(data: Union[bytes, bytearray, memoryview]) -> int:
    """The EXIF orientation tag of a JPEG (1: stored upright, or no tag; 2..8: a viewer flips/rotates it).

    Reads the segments before the first scan only; never raises (a damaged header gives 1).
    """
    b = memoryview(data).cast("B")
    if bytes(b[:2]) != b"\xff\xd8":
        return 1
    i, n = 2, len(b)
    while i + 4 <= n:
        if b[i] != 0xFF:
            return 1
        m = b[i + 1]
        if m == 0xFF:
            i += 1
            continue
        if m == 0x01 or 0xD0 <= m <= 0xD8:
            i += 2
            continue
        if m == 0xDA:
            return 1
        seg_len = (b[i + 2] << 8) | b[i + 3]
        if m == 0xE1:
            found = app1_orientation(b[i + 4 : i + 2 + seg_len])
            if found != 1:
                return found
        i += 2 + seg_len
    return 1
