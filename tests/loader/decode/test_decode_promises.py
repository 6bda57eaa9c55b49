"""Decode promises checked by pixels and by memory, through the loader's own decoder.

Guarantees: an elongated image (more than 4:1) is cropped to its centre box before it is resized,
so a panorama costs the crop, not the panorama resized (measured as the peak RSS growth of a fresh
process), and gives the pixels torchvision's ``Resize`` + ``CenterCrop`` give; a PNG stored under a
``.jpg`` name decodes to its own pixels.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

import shardkit
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import tar_bytes, write_raw_dataset
from tests.support.probes import run_fresh


def _pattern(width: int, height: int) -> np.ndarray:
    """A smooth colour pattern (JPEG-friendly) of ``width`` x ``height``."""
    x = np.linspace(0, 4 * np.pi, width)[None, :]
    y = np.linspace(0, 2 * np.pi, height)[:, None]
    r = 128 + 100 * np.sin(x) * np.cos(y)
    g = 128 + 100 * np.cos(0.5 * x + y)
    b = np.broadcast_to(128 + 100 * np.sin(0.25 * x), r.shape)
    return np.clip(np.stack([r, g, b], -1), 0, 255).astype(np.uint8)


def _encode(arr: np.ndarray, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _reference(data: bytes, size: int) -> torch.Tensor:
    """torchvision's eval transform on the PIL-decoded image: ``Resize(round(size * 256 / 224))`` + ``CenterCrop(size)``."""
    from torchvision.transforms.v2 import functional as TF

    img = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    img = TF.resize(img, [int(round(size * 256 / 224))], antialias=True)
    return TF.center_crop(img, [size, size])


def _decode_eval(data: bytes, size: int) -> torch.Tensor:
    out = torch.zeros(3, size, size, dtype=torch.uint8)
    CropDecoder(ImageConfig(preset="eval", size=size), seed=0)(data, out, 0, 0)
    return out


@pytest.mark.parametrize("width, height", [(600, 100), (90, 700)])
def test_elongated_image_gives_the_center_crop_pixels(width, height):
    data = _encode(_pattern(width, height))
    ours, ref = _decode_eval(data, 32).float(), _reference(data, 32).float()
    diff = (ours - ref).abs()
    # the same pixels, within what decoding at another DCT scale changes (a 300 x 200 image: mean 0.4, max 2)
    assert diff.mean() < 5 and diff.max() < 40, (diff.mean(), diff.max())


_FRESH_PANORAMA = r"""
import json, sys, torch
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
dec = CropDecoder(ImageConfig(preset="eval", size=64), seed=0)
out = torch.zeros(3, 64, 64, dtype=torch.uint8)
dec(open(sys.argv[1], "rb").read(), out, 0, 0)  # a normal image first: lazy imports and buffers in place
before = peak_kib()
dec(open(sys.argv[2], "rb").read(), out, 0, 0)
print(json.dumps({"grew_kib": peak_kib() - before, "mean": float(out.float().mean())}))
"""


def test_elongated_image_is_cropped_before_resizing(tmp_path):
    """60000 x 8 (0.5 Mpx): resized whole to a 73-pixel short side it would take 547,500 x 73 x 3 bytes = 120 MB."""
    normal, panorama = tmp_path / "normal.jpg", tmp_path / "panorama.jpg"
    normal.write_bytes(_encode(_pattern(96, 72)))
    panorama.write_bytes(_encode(_pattern(60_000, 8)))
    report = run_fresh(_FRESH_PANORAMA, str(normal), str(panorama))
    assert 20 < report["mean"] < 235, report  # decoded (not a blank output)
    assert report["grew_kib"] < 16 << 10, report  # KiB: the crop, not the panorama resized


def _load_one(data: bytes, tmp_path, **kw) -> torch.Tensor:
    root = write_raw_dataset(str(tmp_path / "ds"), [(tar_bytes([("a.cls", b"0"), ("a.jpg", data)]), 1)], ["x"])
    ((images, labels),) = list(
        shardkit.load(root, batch_size=1, num_workers=0, preset="eval", pin_memory=False, shuffle=False, **kw)
    )
    assert labels.tolist() == [0]
    return images[0]


def test_png_named_jpg_decodes_to_its_pixels(tmp_path):
    png = _encode(_pattern(40, 30), "PNG")
    image = _load_one(png, tmp_path, size=16, resize_size=18)
    diff = (image.float() - _reference(png, 16).float()).abs()
    assert diff.max() <= 1, (diff.mean(), diff.max())  # lossless PNG: torchvision's pixels


def test_eval_resize_size_default_follows_size(tmp_path):
    png = _encode(_pattern(40, 30), "PNG")
    diff = (_load_one(png, tmp_path, size=16).float() - _reference(png, 16).float()).abs()
    assert diff.max() <= 1, (diff.mean(), diff.max())
