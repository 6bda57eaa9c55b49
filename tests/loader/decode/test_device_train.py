"""decode_on="device" with the TRAIN preset after a bad sample: crop boxes and flips stay with their samples.

A sample no decoder can read is dropped from its batch; every later sample must still be cropped
with its own box and flipped by its own flip (not the dropped sample's, shifted by one). The
oracle: images whose pixels tell their id and their geometry -- red rises left to right (a flip
or another horizontal crop is visible), green rises top to bottom (another vertical crop is
visible), blue is a per-id level -- compared with a deliberately simple reference: decode with
PIL, crop the box drawn for *that sample's id* (``CropDecoder.geometry`` keyed by (seed, epoch,
id), one sample at a time), resize with torch's antialiased bilinear, flip if its flip says so.
Runs on CPU tensors.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import image_bytes
from tests.support.decode_paths import bad_huffman, cut_scan, mean_diff

SEED, EPOCH, SIZE = 11, 2, 24
#: mean absolute difference allowed from the reference (measured: under 0.01 on CPU, where both decode with libjpeg-turbo)
TOLERANCE = 1.0


def shape(i: int) -> tuple[int, int]:
    """(width, height) of sample ``i``: sizes differ between neighbours, so a size shifted by one shows too."""
    return 48 + 8 * (i % 3), 40 + 8 * (i % 2)


def id_image(i: int) -> np.ndarray:
    """``H x W x 3`` uint8: red = x ramp, green = y ramp, blue = a level of its own per id."""
    W, H = shape(i)
    x = np.linspace(0, 255, W)[None, :].repeat(H, 0)
    y = np.linspace(0, 255, H)[:, None].repeat(W, 1)
    b = np.full((H, W), 20 + (i * 53) % 216)
    return np.stack([x, y, b], axis=2).round().astype(np.uint8)


def jpeg(i: int) -> bytes:
    return image_bytes(id_image(i), quality=95, subsampling=0)


def reference(data: bytes, cfg: ImageConfig, gid: int) -> torch.Tensor:
    """``3 x SIZE x SIZE`` uint8: PIL decode, crop the sample's own box, antialiased bilinear resize, its own flip."""
    img = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1).float()
    crops = CropDecoder(cfg, SEED).geometry(np.array([[img.shape[2], img.shape[1]]]), EPOCH, np.array([gid]))
    left, top, right, bottom = (int(v) for v in crops.boxes[0])
    out = F.interpolate(
        img[None, :, top:bottom, left:right],
        size=(cfg.size, cfg.size),
        mode="bilinear",
        antialias=True,
        align_corners=False,
    )[0]
    if crops.flips[0]:
        out = out.flip(-1)
    return out.round().clamp(0, 255).to(torch.uint8)


#: (bad positions in a batch of 10, how each is damaged)
CASES = [((0,), "cut"), ((3,), "huffman"), ((4, 5), "cut"), ((2, 7), "huffman"), ((9,), "cut"), ((1, 2, 8), "mixed")]


@pytest.mark.parametrize("bad,how", CASES)
def test_train_crops_and_flips_stay_with_their_samples_after_a_dropped_one(bad, how):
    cfg = ImageConfig(preset="train", size=SIZE, fast_decode=False)
    gids = np.arange(300, 310)
    good = [jpeg(int(g)) for g in gids]
    jpegs = list(good)
    for n, i in enumerate(bad):
        damage = {"cut": cut_scan, "huffman": bad_huffman}.get(how) or (cut_scan if n % 2 else bad_huffman)
        jpegs[i] = damage(good[i])
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, gids)
    assert geo.kept.tolist() == list(range(10)), "the damage must pass the header: it is found when decoding"
    assert geo.crops.flips.any() and not geo.crops.flips.all(), "a flip must be visible among these samples"
    out = DeviceDecoder(cfg, "cpu")([jpegs[i] for i in geo.kept], geo.sizes, geo.crops, geo.routes)
    assert sorted(e[0] for e in out.errors) == list(bad)
    assert out.kept.tolist() == [i for i in range(10) if i not in bad]
    for j, i in enumerate(out.kept.tolist()):
        d = mean_diff(out.images[j], reference(good[i], cfg, int(gids[i])))
        assert d <= TOLERANCE, f"output {j} (sample {i}, id {gids[i]}) is not its own crop and flip: mean diff {d:.1f}"


def test_the_oracle_sees_a_shift_by_one():
    """Not vacuous: a neighbour's box and flip, or a neighbour's pixels, are far off the reference."""
    cfg = ImageConfig(preset="train", size=SIZE, fast_decode=False)
    gids = np.arange(300, 310)
    refs = [reference(jpeg(int(g)), cfg, int(g)) for g in gids]
    for i in range(9):
        assert mean_diff(refs[i], refs[i + 1]) > 3 * TOLERANCE
        crops = CropDecoder(cfg, SEED).geometry(np.array([shape(int(gids[i]))] * 2), EPOCH, gids[i : i + 2])
        out = DeviceDecoder(cfg, "cpu")(
            [jpeg(int(gids[i]))], np.array([shape(int(gids[i]))]), type(crops)(crops.boxes[1:], crops.flips[1:])
        )
        assert mean_diff(out.images[0], refs[i]) > 3 * TOLERANCE, (
            f"sample {i} with sample {i + 1}'s crop looks like its own"
        )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_train_device_decode_after_bad_samples(tmp_path, num_workers):
    """Through the loader: decode_on="device", train preset, shuffled, bad scans among the samples: every
    good sample once, each image its own crop and flip (by key), the bad ones skipped and counted."""
    import shardkit
    from shardkit.format import EncodedSample
    from tests.support.data import write_samples

    n, bad = 24, {3, 4, 13, 23}
    shards = []
    for start in (0, 9, 18):
        samples = []
        for i in range(start, min(n, start + 9)):
            data = jpeg(i)
            samples.append(
                EncodedSample(
                    f"k{i:03d}",
                    bad_huffman(data) if i in {4, 23} else cut_scan(data) if i in bad else data,
                    i % 2,
                    {"class": str(i % 2)},
                )
            )
        shards.append(samples)
    root = write_samples(str(tmp_path / "d"), shards, ["0", "1"])
    loader = shardkit.load(
        root,
        batch_size=5,
        num_workers=num_workers,
        seed=SEED,
        preset="train",
        size=SIZE,
        fast_decode=False,
        shuffle_buffer=7,
        decode_on="device",
        with_keys=True,
        persistent_workers=False,
    )
    loader.set_epoch(EPOCH)
    cfg = loader.config.image
    seen = []
    for images, labels, keys in loader:
        for j, key in enumerate(keys):
            i = int(key[1:])  # key k{i}: sample id i (written in order), its pixels tell i
            d = mean_diff(images[j], reference(jpeg(i), cfg, i))
            assert d <= TOLERANCE, f"{key}: not its own crop and flip (mean diff {d:.1f})"
            assert int(labels[j]) == i % 2
        seen += keys
    assert sorted(seen) == [f"k{i:03d}" for i in range(n) if i not in bad]
    assert loader.stats.skipped == len(bad)
