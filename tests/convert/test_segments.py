"""COCO segmentations: the RLE codec and the polygon rasteriser against pycocotools, and the semantic mask."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.segments import (
    Rle,
    Segment,
    parse_segmentation,
    polygon_mask,
    rle_counts,
    rle_mask,
    rle_of,
    rle_string,
    semantic_mask,
)
from shardkit.format.fields import IGNORE
from tests.support.detection_sources import outline_distance

cocomask = pytest.importorskip("pycocotools.mask")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools vs numpy 2

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=60)


@st.composite
def masks(draw: st.DrawFn) -> np.ndarray:
    h, w = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**31))
    p = draw(st.sampled_from([0.0, 0.05, 0.5, 0.95, 1.0]))
    return np.random.default_rng(seed).random((h, w)) < p


@SETTINGS
@example(np.arange(35).reshape(5, 7) % 3 == 1)  # starts with background: every delta rule matters
@given(masks())
def test_rle_codec_matches_pycocotools(m: np.ndarray) -> None:
    ref = cocomask.encode(np.asfortranarray(m.astype(np.uint8)))
    rle = rle_of(m)
    assert rle.size == tuple(ref["size"])
    assert rle.counts == ref["counts"].decode("ascii")  # the same compressed string, byte for byte
    assert np.array_equal(rle_mask(rle), m)
    assert np.array_equal(rle_mask(Rle(rle.size, ref["counts"].decode("ascii"))), cocomask.decode(ref).astype(bool))
    runs = rle_counts(rle.counts)
    assert rle_string(runs) == rle.counts
    # uncompressed counts (COCO's crowd annotations) mean the same mask as pycocotools reads them
    frm = cocomask.frPyObjects({"size": list(m.shape), "counts": runs}, *m.shape)
    assert np.array_equal(rle_mask(Rle(rle.size, tuple(runs))), cocomask.decode(frm).astype(bool))


def test_rle_strings_that_break_the_format_are_value_errors() -> None:
    with pytest.raises(ValueError, match="ends inside"):
        rle_counts("0`")  # 0x30 + 0x20: "more" set on the last character
    with pytest.raises(ValueError, match="alphabet"):
        rle_counts("0 1")
    with pytest.raises(ValueError, match="add up"):
        rle_mask(Rle((2, 2), (1, 1)))


@st.composite
def polygons(draw: st.DrawFn) -> tuple[int, int, tuple[float, ...]]:
    w, h = draw(st.integers(4, 48)), draw(st.integers(4, 48))
    n = draw(st.integers(3, 8))
    scale = draw(st.sampled_from([1, 2, 4, 10]))
    coords = draw(st.lists(st.integers(-5 * scale, (max(w, h) + 5) * scale), min_size=2 * n, max_size=2 * n))
    return w, h, tuple(c / scale for c in coords)


@SETTINGS
@example((20, 16, (1.5, 2.25, 17.0, 3.0, 9.5, 14.75, 0.0, 8.0)))
@given(polygons())
def test_polygon_mask_matches_pycocotools_but_along_the_outline(case: tuple[int, int, tuple[float, ...]]) -> None:
    w, h, poly = case
    ref = cocomask.decode(cocomask.merge(cocomask.frPyObjects([list(poly)], h, w))).astype(bool)
    mine = polygon_mask((poly,), w, h)
    differ = np.argwhere(mine != ref)
    if len(differ):  # only pixels whose square touches the outline (centre within half a diagonal)
        assert outline_distance(differ[:, 1] + 0.5, differ[:, 0] + 0.5, poly).max() <= 0.5**0.5


@st.composite
def rectangles(draw: st.DrawFn) -> tuple[int, int, int, tuple[float, float, float, float]]:
    w, h, scale = draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.sampled_from([1, 4, 10]))
    xs = sorted(draw(st.lists(st.integers(-3 * scale, (w + 3) * scale), min_size=2, max_size=2, unique=True)))
    ys = sorted(draw(st.lists(st.integers(-3 * scale, (h + 3) * scale), min_size=2, max_size=2, unique=True)))
    return w, h, scale, (xs[0] / scale, ys[0] / scale, xs[1] / scale, ys[1] / scale)


@SETTINGS
@example((20, 12, 4, (2.25, 1.5, 9.75, 7.0)))
@example((20, 12, 1, (-2.0, 3.0, 9.0, 14.0)))
@given(rectangles())
def test_rectangles_cover_exactly_the_pixels_whose_centre_they_hold(
    case: tuple[int, int, int, tuple[float, float, float, float]],
) -> None:
    """Corners on any quarter or tenth of a pixel: pixel ``i`` is inside when ``x0 <= i + 0.5 < x1``."""
    w, h, scale, (x0, y0, x1, y1) = case
    poly = (x0, y0, x1, y0, x1, y1, x0, y1)
    cx, cy = np.arange(w) + 0.5, np.arange(h) + 0.5
    ref = ((y0 <= cy) & (cy < y1))[:, None] & ((x0 <= cx) & (cx < x1))[None, :]
    assert np.array_equal(polygon_mask((poly,), w, h), ref)
    if scale == 1:  # pycocotools agrees on whole-pixel rectangles: the reference is the right one
        coco = cocomask.decode(cocomask.merge(cocomask.frPyObjects([list(poly)], h, w))).astype(bool)
        assert np.array_equal(coco, ref)


def test_semantic_mask_paints_in_order_crowds_as_ignore() -> None:
    a = Segment(1, False, ((0.0, 0.0, 4.0, 0.0, 4.0, 4.0, 0.0, 4.0),))
    b = Segment(2, False, ((2.0, 2.0, 6.0, 2.0, 6.0, 6.0, 2.0, 6.0),))
    crowd_mask = np.zeros((6, 6), bool)
    crowd_mask[5, :] = True
    c = Segment(3, True, rle_of(crowd_mask))
    out = semantic_mask([a, b, c], 6, 6)
    want = np.zeros((6, 6), np.uint8)
    want[0:4, 0:4] = 1
    want[2:6, 2:6] = 2
    want[5, :] = IGNORE
    assert np.array_equal(out, want)
    with pytest.raises(ValueError, match="RLE of size"):
        semantic_mask([c], 5, 6)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"size": [2], "counts": [4]}, "not \\[height, width\\]"),
        ({"size": [2, 2], "counts": 4}, "neither a list of ints nor a string"),
        ([[0, 0, 1, 1]], "at least 6 numbers"),
        ([[0, 0, 1, 1, 2, True]], "at least 6 numbers"),
        ("abc", "neither polygons nor an RLE"),
    ],
)
def test_malformed_segmentations_are_one_line_value_errors(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_segmentation(value, 1, False)
