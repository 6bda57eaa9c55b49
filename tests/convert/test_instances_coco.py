"""``coco:`` ``--instances`` against pycocotools (instance masks).

Generated COCO files (Hypothesis: overlapping polygons, RLE as strings and lists, crowd regions, annotations
without a segmentation, and annotations skipped at the scan: no image, bad category, degenerate box) are scanned
and encoded at a smaller stored size; the stored instance map must equal the reference: each kept annotation's
``annToMask`` (pycocotools), painted from the largest (by its pycocotools area) to the smallest, then resized by a
deliberately simple float64 nearest loop (stored pixel ``(i, j)`` takes source pixel
``floor((j + 0.5) * in_w / out_w)``, likewise for rows). Where pycocotools' own polygon scan conversion and
shardkit's (pixel centres) may differ, within a pixel of a polygon's outline, or where two overlapping objects'
areas are so close that the outline pixels could swap their order, the stored pixel must be one of the objects
there. Annotations wholly hidden under smaller ones are counted ``hidden_instance`` (exactly, with RLE only).
One end-to-end conversion checks the member written to the shards and the manifest's counts.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.options import ConvertConfig, ScanConfig
from shardkit.convert.scan import discover
from shardkit.convert.targets import encode_targets, target_spec
from shardkit.errors import ConvertError
from shardkit.format.masks import decode_instances
from tests.support.detection_sources import coco_rle, outline_distance

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools vs numpy 2
BAND = 0.75  #: source pixels whose centre lies this close to a polygon's outline may go either way


def objects(w: int, h: int):
    """One annotation: (x0, y0, x1, y1) box, class 1-3, crowd, segmentation kind, polygon jitter seed."""
    return st.tuples(
        st.integers(0, w - 4),
        st.integers(0, h - 4),
        st.integers(3, w),
        st.integers(3, h),
        st.integers(1, 3),
        st.booleans(),
        st.sampled_from(["polygon", "triangle", "rle", "rle-list", "none"]),
    )


def write_coco(folder: str, w: int, h: int, anns_in: list[tuple], broken: int) -> str:
    images = [{"id": 7, "file_name": "a.jpg", "width": w, "height": h}]
    cats = [{"id": 10 + c, "name": f"c{c}"} for c in (1, 2, 3)]
    anns: list[dict[str, Any]] = []
    for x0, y0, bw, bh, c, crowd, kind in anns_in:
        x1, y1 = min(w, x0 + bw), min(h, y0 + bh)
        a: dict[str, Any] = {"image_id": 7, "category_id": 10 + c, "bbox": [x0, y0, x1 - x0, y1 - y0]}
        a["iscrowd"] = int(crowd)
        region = np.zeros((h, w), bool)
        region[y0:y1, x0:x1] = True
        if kind == "polygon":
            a["segmentation"] = [[x0 + 0.3, y0 + 0.2, x1 - 0.4, y0, x1, y1 - 0.3, x0, y1]]
        elif kind == "triangle":
            a["segmentation"] = [[x0, y0, x1, (y0 + y1) / 2, x0 + 0.5, y1]]
        elif kind in ("rle", "rle-list"):
            a["segmentation"] = coco_rle(region, compressed=kind == "rle")
        anns.append(a)
    for k in range(broken):  # skipped at the scan, with a segmentation each: they must leave no pixel
        a = {"image_id": 7, "category_id": 11, "bbox": [0, 0, w, h], "segmentation": [[0, 0, w, 0, w, h, 0, h]]}
        if k % 3 == 0:
            a["image_id"] = 99
        elif k % 3 == 1:
            a["category_id"] = 99
        else:
            a["bbox"] = [1, 1, 0, 5]
        anns.insert(k * 2 % (len(anns) + 1), a)
    for k, a in enumerate(anns):
        a["id"] = k + 1
    path = os.path.join(folder, "instances.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return path


def reference(path: str) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]], int]:
    """pycocotools: (rows painted smaller on top [h, w], unsure pixels [h, w], the kept (area, label), hidden)."""
    coco = COCO(path)
    (img,) = coco.loadImgs(coco.getImgIds())
    w, h = img["width"], img["height"]
    cats = sorted(coco.getCatIds())
    kept, masks, band = [], [], np.zeros((h, w), bool)
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    for a in coco.loadAnns(coco.getAnnIds(imgIds=[img["id"]])):
        bx, by, bw, bh = a["bbox"]
        if a["category_id"] not in cats or bw <= 0 or bh <= 0:
            continue
        seg = a.get("segmentation")
        m = coco.annToMask(a).astype(bool) if seg else np.zeros((h, w), bool)
        masks.append(m)
        kept.append((int(m.sum()), cats.index(a["category_id"]) + 1))
        if isinstance(seg, list):  # polygons: shardkit's pixel-centre rule and pycocotools' differ on the outline
            for p in seg:
                d = outline_distance(xs.reshape(-1), ys.reshape(-1), tuple(p)).reshape(h, w)
                band |= d <= BAND
    rows = np.full((h, w), -1, np.int64)
    for k in sorted(range(len(masks)), key=lambda k: (-kept[k][0], k)):
        rows[masks[k]] = k
    unsure = band.copy()
    for i in range(len(masks)):  # two overlapping objects of nearly one area may swap their order
        for j in range(i + 1, len(masks)):
            tol = 2 * (int((masks[i] & band).sum()) + int((masks[j] & band).sum()))
            if abs(kept[i][0] - kept[j][0]) <= tol:
                unsure |= masks[i] & masks[j]
    hidden = sum(1 for k, m in enumerate(masks) if m.any() and not (rows == k).any())
    return rows, unsure, kept, hidden


def nearest(src: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """The deliberately simple float64 nearest resize of the conversion's pure scale."""
    h, w = src.shape
    out = np.empty((out_h, out_w), src.dtype)
    for i in range(out_h):
        for j in range(out_w):
            out[i, j] = src[int(np.floor((i + 0.5) * h / out_h)), int(np.floor((j + 0.5) * w / out_w))]
    return out


def encoded(path: str, out_size: tuple[int, int]) -> tuple[np.ndarray, dict[str, int], Any]:
    source = discover("coco:" + path, ConvertConfig(source=ScanConfig(instances=True)))
    (split,) = source.splits
    (item,) = split.files
    out = encode_targets(item, source.reader, item.declared_size, out_size, target_spec(source))  # type: ignore[arg-type]
    assert out.instances is not None and out.objects is not None
    return decode_instances(out.instances, out_size, len(out.objects)), out.moved, out.objects


@settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=25)
@example(w=20, h=16, anns=[(2, 2, 8, 8, 1, False, "rle"), (2, 2, 8, 8, 2, False, "rle")], broken=0, scale=0.5)
@given(
    w=st.integers(12, 40),
    h=st.integers(12, 40),
    anns=st.data(),
    broken=st.integers(0, 3),
    scale=st.sampled_from([1.0, 0.7, 0.5, 0.37]),
)
def test_instance_maps_match_pycocotools_painted_smaller_on_top_and_resized_nearest(w, h, anns, broken, scale):
    if not isinstance(anns, list):
        anns = anns.draw(st.lists(objects(w, h), min_size=0, max_size=6))
    out_w, out_h = max(1, round(w * scale)), max(1, round(h * scale))
    with tempfile.TemporaryDirectory() as d:
        path = write_coco(d, w, h, anns, broken)
        got, moved, objs = encoded(path, (out_w, out_h))
        rows, unsure, kept, hidden = reference(path)
    assert objs.labels.tolist() == [c for _, c in kept]  # rows follow the stored objects (skipped ones: none)
    want, maybe = nearest(rows, out_w, out_h), nearest(unsure, out_w, out_h)
    assert got.dtype == np.int16 and got.shape == (out_h, out_w)
    assert np.array_equal(got[~maybe], want[~maybe]), np.argwhere((got != want) & ~maybe)[:3]
    assert got.max(initial=-1) < len(kept)
    if all(k in ("rle", "rle-list", "none") for *_, k in anns):
        assert moved.get("hidden_instance", 0) == hidden
    if anns and anns[0][:4] == anns[-1][:4] == (2, 2, 8, 8) and len(anns) == 2:  # the explicit example
        assert hidden == 1 and moved["hidden_instance"] == 1  # one object of a size: the later is on top


def test_instances_end_to_end_member_and_counts(tmp_path):
    from PIL import Image

    from shardkit.convert import convert
    from shardkit.convert.imageproc import EncodeConfig

    w, h = 40, 30
    anns = [(0, 0, 30, 20, 1, False, "rle"), (5, 5, 6, 6, 2, False, "rle"), (5, 5, 6, 6, 3, True, "rle")]
    path = write_coco(str(tmp_path), w, h, anns, 3)
    Image.new("RGB", (w, h), (128, 128, 128)).save(str(tmp_path / "a.jpg"))
    opts = ConvertConfig(
        image=EncodeConfig(short_side=None, max_side=20), source=ScanConfig(instances=True, masks=True)
    )
    convert("coco:" + path, str(tmp_path / "out"), opts, quiet=True, workers=1)
    split = tmp_path / "out" / "train"
    with open(split / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["fields"] == ["image", "boxes", "mask", "instances"]
    ann = manifest["annotations"]
    assert ann["hidden_instance"] == 1 and sum(ann.values()) == 6  # every annotation counted once
    (tar,) = [p for p in os.listdir(split) if p.endswith(".tar")]
    with tarfile.open(split / tar) as t:
        members = {m.name.split(".", 1)[1]: t.extractfile(m).read() for m in t.getmembers()}  # type: ignore[union-attr]
    im = Image.open(io.BytesIO(members["instances.png"]))
    assert im.mode == "I;16" and im.size == (20, 15)
    stored = np.asarray(im).astype(np.int64) - 1
    rows, _, _, _ = reference(path)
    assert np.array_equal(stored, nearest(rows, 20, 15))


def test_instances_for_voc_is_one_line(tmp_path):
    with pytest.raises(ConvertError, match="--instances") as e:
        discover("voc:" + str(tmp_path), ConvertConfig(source=ScanConfig(instances=True)))
    assert "\n" not in str(e.value)
