"""The two decode paths side by side, for the device-decode and JPEG-backend tests: what the loader's worker
makes of a batch of encoded images (decoded one by one) and what the device decoder makes of it (batched); JPEGs
damaged in the two ways that route a sample to the CPU fallback, and the mean difference the tests compare by."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

import shardkit.loader.decode.device as dd
from shardkit.demo.sampledata import make_image
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.device import DeviceDecoder, batch_geometry
from shardkit.loader.decode.resample import channels_last_empty
from shardkit.loader.decode.worker import CropDecoder

SEED, EPOCH = 7, 3


def encode(size: tuple[int, int], seed: int, mode: str = "RGB", fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(make_image(seed % 3, seed, size)).convert(mode).save(
        buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}), **kw
    )
    return buf.getvalue()


def worker_path(cfg: ImageConfig, jpegs: list[bytes], gids: np.ndarray) -> tuple[torch.Tensor, list[int]]:
    """What the loader's worker makes of the samples (decoded one by one), and which it keeps."""
    cd = CropDecoder(cfg, SEED)
    out = channels_last_empty((len(jpegs), 3, cfg.size, cfg.size))
    kept: list[int] = []
    for i, data in enumerate(jpegs):
        try:
            cd(data, out[len(kept)], EPOCH, int(gids[i]))
        except Exception:  # noqa: BLE001 - the worker skips it
            continue
        kept.append(i)
    return out[: len(kept)], kept


def device_path(
    cfg: ImageConfig, jpegs: list, gids: np.ndarray, device: str, **kw
) -> tuple[dd.DecodedBatch, dd.BatchGeometry, DeviceDecoder]:
    geo = batch_geometry(CropDecoder(cfg, SEED), jpegs, EPOCH, gids)
    dec = DeviceDecoder(cfg, device, **kw)
    return dec([jpegs[i] for i in geo.kept], geo.sizes, geo.crops, geo.routes), geo, dec


def diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.cpu().int() - b.cpu().int()).abs().float()


def cut_scan(data: bytes) -> bytes:
    """Header intact, scan cut short: routed to the CPU by its header, which cannot decode it."""
    return data[: len(data) * 2 // 3]


def bad_huffman(data: bytes) -> bytes:
    """A Huffman table libjpeg rejects: the batched call fails, bisection isolates it, the CPU fails too."""
    i = data.index(b"\xff\xc4")
    return data[: i + 5] + b"\xff" * 16 + data[i + 21 :]


def mean_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference of two images, as float32 on the CPU."""
    return float((a.cpu().float() - b.cpu().float()).abs().mean())
