"""Helpers for the GpuAugment tests: random uint8 batches and torch-call recorders.

``HostReads`` records every call that reads tensor values back to the host (a device sync on a GPU): the CPU
stand-in for ``torch.cuda.set_sync_debug_mode("error")``. ``MatmulCalls`` records matmul-family calls, whose
float32 results a lower global matmul precision (TF32, bf16) rounds on a GPU.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


def uint8_images(b: int, size: int | tuple[int, int] = 24, seed: int = 0) -> torch.Tensor:
    """uint8 ``[b, 3, h, w]`` uniform noise from a generator seeded with ``seed`` (``size``: ``h = w`` or ``(h, w)``)."""
    h, w = (size, size) if isinstance(size, int) else size
    return torch.randint(0, 256, (b, 3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


_HOST_READS = {
    "item",
    "tolist",
    "numpy",
    "cpu",
    "nonzero",
    "argwhere",
    "masked_select",
    "unique",
    "unique_consecutive",
    "bincount",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
}


class HostReads(TorchFunctionMode):
    """Records every torch call that reads tensor values to the host (a device sync on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in _HOST_READS:
            self.calls.append(name)
        elif (
            name == "repeat_interleave"
            and len(args) > 1
            and isinstance(args[1], torch.Tensor)
            and "output_size" not in kwargs
        ):
            self.calls.append(name)  # tensor repeats: the output size is read back
        elif name in ("__getitem__", "__setitem__") and len(args) > 1:
            idx = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx):
                self.calls.append(f"{name}[bool mask]")
        return func(*args, **kwargs)


class MatmulCalls(TorchFunctionMode):
    """Records matmul-family calls; with ``float32_only``, only those with a float32 tensor argument."""

    NAMES = {
        "matmul",
        "mm",
        "bmm",
        "baddbmm",
        "addmm",
        "addbmm",
        "addmv",
        "mv",
        "dot",
        "einsum",
        "linear",
        "tensordot",
        "__matmul__",
        "__rmatmul__",
    }

    def __init__(self, float32_only: bool = False) -> None:
        super().__init__()
        self.float32_only = float32_only
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in self.NAMES and (
            not self.float32_only or any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args)
        ):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))
