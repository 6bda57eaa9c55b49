"""DevicePrefetcher: exactly the loader's batches, in order, moved and transformed."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from shardkit.augment import GpuAugment, HorizontalFlip, MixUp, RandomResizedCrop
from shardkit.loader.prefetch import DevicePrefetcher

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


class Images(Dataset):
    """Deterministic uint8 images; sample i is filled with i % 256 and keyed 'k<i>'."""

    def __len__(self) -> int:
        return 37

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, 16, 20), dtype=torch.uint8, generator=g), i % 5, f"k{i}"


def loader(num_workers: int = 0) -> DataLoader:
    return DataLoader(Images(), batch_size=8, num_workers=num_workers, pin_memory=torch.cuda.is_available())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_yields_the_loaders_batches_in_order(device, num_workers):
    expected = list(loader())
    pf = DevicePrefetcher(loader(num_workers), device=device)
    assert len(pf) == len(expected) == 5
    for _epoch in range(2):
        got = list(pf)
        assert len(got) == len(expected)
        for (xi, yi, ki), (xe, ye, ke) in zip(got, expected):
            assert xi.device.type == device and yi.device.type == device
            assert torch.equal(xi.cpu(), xe) and torch.equal(yi.cpu(), ye)
            assert ki == ke  # non-tensor fields pass through untouched


@pytest.mark.parametrize("device", DEVICES)
def test_applies_the_transform_on_the_device(device):
    aug = GpuAugment([RandomResizedCrop(12), HorizontalFlip()], seed=3)
    ref = GpuAugment([RandomResizedCrop(12), HorizontalFlip()], seed=3)
    for (x, y, _keys), (xe, ye, _) in zip(DevicePrefetcher(loader(), device=device, transform=aug), loader()):
        assert x.shape[-2:] == (12, 12) and x.dtype == torch.float32 and x.device.type == device
        assert torch.allclose(x, ref(xe.to(device)), atol=1e-6)
        assert torch.equal(y.cpu(), ye)


def test_mixing_transform_gets_the_labels():
    aug = GpuAugment([MixUp(5)], seed=0)
    pf = DevicePrefetcher(loader(), device="cpu", transform=aug)
    assert pf.transform_labels
    x, y, keys = next(iter(pf))
    assert y.shape == (8, 5) and torch.allclose(y.sum(1), torch.ones(8))
    assert len(keys) == 8


def test_tensor_and_namedtuple_batches():
    pf = DevicePrefetcher([torch.ones(2, 3)], device="cpu", transform=lambda t: t * 2)
    assert torch.equal(next(iter(pf)), torch.full((2, 3), 2.0))
    Batch = namedtuple("Batch", "images labels")
    pf = DevicePrefetcher([Batch(torch.ones(1), torch.zeros(1))], device="cpu")
    out = next(iter(pf))
    assert isinstance(out, Batch) and torch.equal(out.images, torch.ones(1))
    with pytest.raises(TypeError, match="tuple/list"):
        next(iter(DevicePrefetcher([{"a", "b"}], device="cpu")))  # a set (dicts are fields= batches)


def test_cpu_only_defaults():
    pf = DevicePrefetcher([], device=None)
    assert pf.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            DevicePrefetcher([], device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_one_side_stream_for_all_epochs():
    pf = DevicePrefetcher(loader(), device="cuda")
    list(pf)
    stream = pf._stream
    list(pf)
    assert pf._stream is stream and stream is not None
    # the batch is usable on the consumer stream right away, and stays intact while later copies run
    batches = []
    for x, _y, _ in pf:
        batches.append((x, x.float().sum()))
    for (x, total), (xe, _, _) in zip(batches, loader()):
        assert torch.equal(x.cpu(), xe) and x.float().sum() == total


@pytest.mark.parametrize("device", DEVICES)
def test_decode_on_device_loader_is_decoded_in_the_prefetcher(tmp_path, device):
    """A shardkit loader with decode_on="device": the prefetcher iterates it with iter_on(device), so batches
    are decoded, cropped and resized there (then transformed): the loader's own CPU-decoded batches, same keys."""
    import shardkit
    from shardkit.augment import ColorJitter, Normalize
    from tests.support.data import write_dataset

    ds = write_dataset(str(tmp_path / "train"), num_samples=20, shard_size=6, size=(40, 30))
    opts = dict(batch_size=8, num_workers=2, size=24, seed=1, decode_on="device", multiprocessing_context="fork")
    cpu = [(x.clone(), y, list(k)) for x, y, k in shardkit.load(ds.url, with_keys=True, **opts)]
    loader = shardkit.load(ds.url, with_keys=True, **opts)
    aug, ref = (
        GpuAugment([ColorJitter(0.4, 0.4, 0.4), Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))], seed=2)
        for _ in range(2)
    )
    got = list(DevicePrefetcher(loader, device=device, transform=aug))
    assert [k for _, _, k in got] == [k for _, _, k in cpu] and len(got) == 3
    assert loader.device_decoder(device).stats.samples == 20 and loader.stats.samples == 20
    for (x, y, _), (xc, yc, _) in zip(got, cpu):
        assert x.device.type == device and x.dtype == torch.float32 and torch.equal(y.cpu(), yc)
        expected = ref(xc.to(device))
        if device == "cpu":
            assert torch.allclose(x, expected, atol=1e-5)
        else:  # nvJPEG vs libjpeg-turbo: a couple of levels
            assert (x - expected).abs().mean() < 0.1
