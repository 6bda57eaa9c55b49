"""The targets follow the box the pixels really came from: the worker decodes at a DCT scale (1/2, 1/4, 1/8) and
cuts its crop box rounded to that decoded pixel grid (up to half a decoded pixel, a quarter of an output pixel),
and :meth:`CropDecoder.decode_into` returns that box for the targets.

The oracle is the pixels: a sharp vertical edge at a known stored column, cut by crops whose left edge the DCT grid
rounds by up to 4 stored pixels; the edge's position in the output (where the row profile crosses half way, by
linear interpolation between pixel centres) must be where the returned box maps the stored edge, within 0.1
output pixel, while the requested box would put it at least 0.15 pixel off (so the test can tell them apart).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from shardkit.targets.crops import crop_maps
from shardkit.targets.geometry import move_points
from tests.support.data import image_bytes

W, H, EDGE, S = 1024, 768, 512, 32  #: stored size, the edge's stored column (on the 8 x 8 grid), output size


@functools.cache
def jpeg() -> bytes:
    img = np.zeros((H, W, 3), np.uint8)
    img[:, EDGE:] = 255
    return image_bytes(img, quality=100, subsampling=0)


def edge_in_output(out: torch.Tensor) -> float:
    """Where the output's mean row profile crosses 127.5, in edge coordinates (pixel ``i`` centre at ``i + 0.5``)."""
    p = out.float().mean(dim=(0, 1)).numpy()
    j = int(np.argmax(p >= 127.5))
    assert 0 < j, "the edge is inside the crop"
    return j - 0.5 + (127.5 - p[j - 1]) / (p[j] - p[j - 1])


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=20)
@given(k=st.integers(-6, 6), extra=st.integers(0, 7), flip=st.booleans())
def test_targets_follow_the_box_rounded_to_the_decoded_grid(k, extra, flip):
    dec = CropDecoder(ImageConfig(size=S, decoder="pil"), 0)
    bw = 16 * S + 8 * extra  # >= 16 stored px per output px: decoded at 1/8; whole decoded pixels wide
    x0 = (
        8 * (EDGE // 8 - bw // 16 + k) + 3
    )  # 3/8 of a decoded pixel off the 1/8 grid: both edges rounded 3 stored px left
    box = (float(x0), 100.0, float(x0 + bw), 100.0 + bw)
    out = torch.empty((3, S, S), dtype=torch.uint8)
    used = dec.decode_into(jpeg(), W, H, box, flip, out)
    seen = edge_in_output(out.flip(-1) if flip else out)  # measured in the unflipped frame
    point = torch.tensor([[[EDGE, 300.0]]])
    at_used = float(move_points(point, crop_maps(np.array([used]), np.array([flip]), S).float())[0, 0, 0])
    at_box = float(move_points(point, crop_maps(np.array([box]), np.array([flip]), S).float())[0, 0, 0])
    if flip:
        at_used, at_box = S - at_used, S - at_box
    assert abs(at_box - at_used) >= 0.15, "the test must tell the two boxes apart"
    assert abs(seen - at_used) <= 0.1, f"edge seen at {seen:.3f}, the targets' box puts it at {at_used:.3f}"
