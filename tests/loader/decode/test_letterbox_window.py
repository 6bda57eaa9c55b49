"""The ``detect`` and ``letterbox`` presets resize only the window's part of the image: the output pixels
the scaled image covers show the decoded region they see, rounded to whole decoded pixels, and
:meth:`CropDecoder.decode_into` returns the box that map really is, which the targets follow.

The oracle is the pixels, as in ``test_targets_dct.py``: a stored image with a sharp vertical and a sharp horizontal
edge at known stored positions. Wherever the window shows an edge, the edge's position in the output (where the
profile across it crosses half way, interpolated between pixel centres) must be where the returned box maps the
stored edge, within 0.1 output pixel; the padding (0) must be exactly the output pixels whose centres the returned
box maps outside the image; and over the examples the returned box must differ from the planned one by more than
the tolerance somewhere, so that the test can tell them apart.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import image_bytes

SIZE = 48
GREY = 64
HALF = (GREY + 255) / 2


@functools.cache
def jpeg(w: int, h: int, ex: int, ey: int) -> bytes:
    """Grey (:data:`GREY`: image pixels never read as padding), with white right of stored column ``ex`` in the top
    half and white below stored row ``ey`` in the left half (two edges, each measured away from the other)."""
    img = np.full((h, w, 3), GREY, np.uint8)
    img[: h // 2, ex:] = 255
    img[ey:, : w // 2] = 255
    return image_bytes(img, quality=100, subsampling=0)


def crossing(p: np.ndarray) -> float:
    """Where the profile ``p`` first rises through :data:`HALF` (pixel ``i``'s centre at ``i + 0.5``), or nan."""
    above = p >= HALF
    if not above.any() or above[0]:
        return float("nan")
    j = int(np.argmax(above))
    return j - 0.5 + (HALF - p[j - 1]) / (p[j] - p[j - 1])


def to_output(v: float, lo: float, hi: float) -> float:
    return (v - lo) * SIZE / (hi - lo)


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)
@example(wh=(200, 120), preset="detect", seed=0, gid=3, decoder="pil")
@example(wh=(97, 211), preset="letterbox", seed=0, gid=0, decoder="simplejpeg")
@given(
    wh=st.tuples(st.integers(24, 400), st.integers(24, 400)),
    preset=st.sampled_from(["detect", "letterbox"]),
    seed=st.integers(0, 999),
    gid=st.integers(0, 999),
    decoder=st.sampled_from(["pil", "simplejpeg"]),
)
def test_the_window_pixels_follow_the_returned_box(wh, preset, seed, gid, decoder):
    w, h = wh
    ex, ey = (3 * w) // 4, (3 * h) // 4  # inside the white halves' far quarters: clear of the other edge
    dec = CropDecoder(ImageConfig(preset=preset, size=SIZE, decoder=decoder), seed)
    crops = dec.geometry(np.array([[w, h]]), 0, np.array([gid]))
    flip = bool(crops.flips[0])
    out = torch.full((3, SIZE, SIZE), 77, dtype=torch.uint8)
    used = dec.decode_into(jpeg(w, h, ex, ey), w, h, crops.boxes[0].tolist(), flip, out)
    img = (out.flip(-1) if flip else out).float().mean(0).numpy()  # the unflipped frame
    bx0, by0, bx1, by1 = used
    # the image's extent in the output, and the padding: every pixel whose centre maps outside is 0, the rest not 77
    ix0, ix1 = to_output(0, bx0, bx1), to_output(w, bx0, bx1)
    iy0, iy1 = to_output(0, by0, by1), to_output(h, by0, by1)
    centres = np.arange(SIZE) + 0.5
    inside = ((centres >= ix0) & (centres < ix1))[None, :] & ((centres >= iy0) & (centres < iy1))[:, None]
    assert (img[~inside] == 0).all(), "padding is 0 exactly where the returned box maps outside the image"
    assert (img[inside] >= GREY / 2).all(), "the image exactly where the returned box maps inside it"
    # the vertical edge, on rows of the top half well inside the image; the horizontal one on left-half columns
    edges = (
        (ex, bx0, bx1, (ix0, ix1), (iy0, (iy0 + iy1) / 2), 0),  # vertical: across columns, on top-half rows
        (ey, by0, by1, (iy0, iy1), (ix0, (ix0 + ix1) / 2), 1),  # horizontal: across rows, on left-half columns
    )
    for edge, lo, hi, extent, band, axis in edges:
        want = to_output(edge, lo, hi)
        first, last = max(0, int(np.ceil(band[0] + 2))), min(SIZE, int(np.floor(band[1] - 2)))
        if last <= first or not (max(1.5, extent[0] + 3) <= want <= min(SIZE - 1.5, extent[1] - 3)):
            continue  # the window does not show this edge clearly
        profile = img[first:last].mean(0) if axis == 0 else img[:, first:last].mean(1)
        seen = crossing(profile)
        # 1/8 output pixel: the half-crossing of a JPEG edge after an antialiased resize wanders by about 0.1 px; a
        # window or scale off by a decoded pixel's fraction moves it by several tenths
        assert abs(seen - want) <= 0.125, f"edge seen at {seen:.3f}, the returned box puts it at {want:.3f}"


def test_the_returned_box_is_not_the_planned_one():
    """The rounding to whole decoded pixels moves the map by more than the test's tolerance somewhere (else the
    test above could not tell a decoder that returns the planned box from one that returns the map it used)."""
    dec = CropDecoder(ImageConfig(preset="detect", size=SIZE, decoder="pil"), 0)
    w, h = 173, 131
    crops = dec.geometry(np.array([[w, h]] * 40), 0, np.arange(40))
    worst = 0.0
    for k in range(40):
        planned = crops.boxes[k].tolist()
        out = torch.empty((3, SIZE, SIZE), dtype=torch.uint8)
        used = dec.decode_into(jpeg(w, h, 100, 80), w, h, planned, bool(crops.flips[k]), out)
        for edge, a, b in ((100, 0, 2), (80, 1, 3)):
            worst = max(worst, abs(to_output(edge, used[a], used[b]) - to_output(edge, planned[a], planned[b])))
    assert worst >= 0.15
