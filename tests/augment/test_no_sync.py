"""CPU stand-ins for the CUDA-only "no host sync" check (``tests/augment/test_ops.py::test_no_host_sync_on_cuda``).

Guarantee: a ``GpuAugment`` call (parameter draws, generator draws included, and the apply step,
MixUp and CutMix included) never reads a tensor's value back to the host, so on a GPU it never
waits for the device. On CPU two checks stand in for ``torch.cuda.set_sync_debug_mode("error")``:
``apply`` traces with ``fullgraph=True`` (``tests/augment/test_ops.py::test_apply_traces_without_graph_breaks``:
a host read is a graph break), and here a whole call runs under a ``TorchFunctionMode`` that records
every tensor method that reads values to the host (``item``, ``bool``, ``tolist``, ``nonzero``,
boolean-mask indexing...), which covers the generator draws that cannot be traced.
"""

from __future__ import annotations

import torch

from shardkit.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ColorJitter,
    CutMix,
    GaussianBlur,
    GpuAugment,
    HorizontalFlip,
    MixUp,
    Normalize,
    RandomAffine,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
)
from tests.support.augment import HostReads, uint8_images


def _ops(per_sample: bool = False) -> list:
    return [
        RandomResizedCrop(16),
        HorizontalFlip(),
        RandomRotation(20, fill=3),
        RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
        ColorJitter(0.4, 0.4, 0.4, 0.1, order="random"),
        RandomGrayscale(0.2),
        GaussianBlur(3),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(),
        MixUp(4, per_sample=per_sample),
        CutMix(4, per_sample=per_sample),
    ]


def test_host_read_detector_sees_a_sync():
    x = torch.rand(4)
    with HostReads() as reads:
        float(x.sum()), x[x > 0.5], x.nonzero()
    assert reads.calls == ["__float__", "__getitem__[bool mask]", "nonzero"]


def test_a_whole_call_draws_and_applies_without_host_reads():
    for per_sample in (False, True):
        aug = GpuAugment(_ops(per_sample), seed=0, output_dtype=torch.bfloat16, memory_format="channels_last")
        x, labels = uint8_images(8, seed=1), torch.arange(8) % 4
        aug(x, labels)  # the first call creates the generator and cached constants (as on CUDA)
        with HostReads() as reads:
            for _ in range(3):
                out, soft = aug(x, labels)
        assert reads.calls == [], (per_sample, reads.calls)
        assert out.shape == (8, 3, 16, 16) and soft.shape == (8, 4)


def test_view_augment_draws_and_applies_without_host_reads():
    """The same for the views list: DINO's recipes, batched per recipe and size, and GpuAugment on a list."""
    from shardkit.augment import ViewAugment

    views = [uint8_images(4, 24, seed=1), uint8_images(4, 24, seed=1)] + [uint8_images(4, 12, seed=1) for _ in range(4)]
    aug = ViewAugment.dino(4, seed=0, output_dtype=torch.bfloat16)
    plain = GpuAugment(_ops()[:8], seed=0)
    aug(views), plain(views)  # generators and cached constants created
    with HostReads() as reads:
        for _ in range(2):
            out, flat = aug(views), plain(views)
    assert reads.calls == [], reads.calls
    assert [o.shape[-1] for o in out] == [24, 24, 12, 12, 12, 12] and len(flat) == 6
