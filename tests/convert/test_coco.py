"""``coco:`` sources against pycocotools: demo scenes written as COCO json, plus broken annotations of every kind."""

from __future__ import annotations

import json
import os
import random
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.options import ConvertConfig, ScanConfig
from shardkit.convert.scan import discover
from shardkit.convert.scan.detection import flip_pairs_of
from shardkit.convert.segments import Rle, semantic_mask
from shardkit.demo.scenes import CLASSES, scene
from shardkit.errors import ConvertError
from shardkit.format.fields import IGNORE
from tests.support.detection_sources import coco_rle, outline_distance, read_shards, write_scene_images

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools vs numpy 2
SETTINGS = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=25)
KINDS = ("no_image", "degenerate_box", "outside_image", "bad_category", "clipped")
KP_NAMES = ["left_end", "right_end"]


def write_coco(folder: str, seed: int, n: int, size: tuple[int, int], keypoints: bool, broken: dict[str, int]) -> str:
    """Scenes ``0..n-1`` of ``seed`` as a COCO file (sparse shuffled ids, polygons / RLE / crowd), plus ``broken``."""
    rng = random.Random(seed)
    cat_ids = rng.sample(range(1, 300), len(CLASSES) - 1)  # colour c has id cat_ids[c - 1]: not in colour order
    cats = [{"id": cat_ids[c - 1], "name": CLASSES[c], "supercategory": "shape"} for c in range(1, len(CLASSES))]
    if keypoints:
        for c in cats:
            c["keypoints"] = list(KP_NAMES)
    rng.shuffle(cats)
    img_ids = rng.sample(range(1, 10**6), n + 1)
    images, anns = [], []
    for i in range(n):
        s = scene(seed, i, size)
        images.append({"id": img_ids[i], "file_name": f"img/{i:03d}.jpg", "width": size[0], "height": size[1]})
        for (x0, y0, x1, y1), c, kp in zip(
            s.objects.boxes.tolist(), s.objects.labels.tolist(), s.objects.keypoints.tolist()
        ):
            a: dict[str, Any] = {
                "image_id": img_ids[i],
                "category_id": cat_ids[c - 1],
                "bbox": [x0, y0, x1 - x0, y1 - y0],
            }
            a["iscrowd"] = int(rng.random() < 0.2)
            shape = rng.choice(["polygon", "diamond", "rle", "rle-list", "none"])
            region = np.zeros((size[1], size[0]), bool)
            region[int(y0) : int(y1), int(x0) : int(x1)] = True
            if shape == "polygon":
                a["segmentation"] = [[x0, y0, x1, y0, x1, y1, x0, y1]]
            elif shape == "diamond":  # two polygons: a diamond and a small triangle in the rectangle
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                a["segmentation"] = [[cx, y0, x1, cy, cx, y1, x0, cy], [x0, y0, x0 + 3.3, y0, x0, y0 + 2.6]]
            elif shape in ("rle", "rle-list"):
                a["segmentation"] = coco_rle(region, compressed=shape == "rle")
            if keypoints:
                a["keypoints"] = [v for x, y, vis in kp for v in (x - 0.5, y - 0.5, vis)]  # COCO: pixel indices
                a["num_keypoints"] = 2
            anns.append(a)
    images.append({"id": img_ids[n], "file_name": "img/empty.jpg", "width": size[0], "height": size[1]})
    w, h = size
    for kind, count in broken.items():
        for _ in range(count):
            a = {"image_id": rng.choice(img_ids[:n]), "category_id": rng.choice(cat_ids), "bbox": [5, 5, 10, 10]}
            if kind == "no_image":
                a["image_id"] = 10**7 + rng.randrange(100)
            elif kind == "degenerate_box":
                a["bbox"] = [5, 5, rng.choice([0, -3]), 10]
            elif kind == "outside_image":
                a["bbox"] = [w + rng.randrange(0, 5), 4, 8, 8]
            elif kind == "bad_category":
                a["category_id"] = 1000 + rng.randrange(10)
            else:  # clipped: reaches past the left or bottom edge
                a["bbox"] = rng.choice([[-3.5, 4, 10, 10], [4, h - 4, 10, 10.25]])
            if keypoints:
                a["keypoints"] = [-2, 6, 2, 6, 6, 1]  # the first point lies outside the image: v becomes 0
            anns.insert(rng.randrange(len(anns) + 1), a)
    for k, a in enumerate(anns):
        a["id"] = k + 1
    path = os.path.join(folder, "annotations", "instances.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats, "info": {}}, f)
    return path


def reference(path: str) -> tuple[dict[str, Any], int, list[str]]:
    """What pycocotools reads: per file name, the kept objects (clipped xyxy, class, crowd, keypoints, mask)."""
    coco = COCO(path)
    cat_ids = sorted(coco.getCatIds())
    names = [coco.loadCats(c)[0]["name"] for c in cat_ids]
    out = {}
    for img in coco.loadImgs(coco.getImgIds()):
        w, h = img["width"], img["height"]
        objs, mask = [], np.zeros((h, w), np.uint8)
        for a in coco.loadAnns(coco.getAnnIds(imgIds=[img["id"]])):
            x, y, bw, bh = a["bbox"]
            box = [max(x, 0), max(y, 0), min(x + bw, w), min(y + bh, h)]
            if a["category_id"] not in cat_ids or bw <= 0 or bh <= 0 or box[2] <= box[0] or box[3] <= box[1]:
                continue
            label = cat_ids.index(a["category_id"]) + 1
            kp = None
            if "keypoints" in a:
                kp = np.array(a["keypoints"], np.float32).reshape(-1, 3)
                kp[kp[:, 2] > 0, :2] += 0.5  # pixel indices -> edge coordinates (the pixel's centre)
                kp[(kp[:, 0] < 0) | (kp[:, 0] > w) | (kp[:, 1] < 0) | (kp[:, 1] > h), 2] = 0
            objs.append((box, label, bool(a.get("iscrowd")), kp))
            if a.get("segmentation"):
                mask[coco.annToMask(a) > 0] = IGNORE if a.get("iscrowd") else label
        out[img["file_name"]] = (objs, mask)
    return out, len(coco.dataset["annotations"]), ["background", *names]


@SETTINGS
@example(seed=0, n=2, w=64, h=48, keypoints=True, broken=dict.fromkeys(KINDS, 1))
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 4),
    w=st.integers(40, 120),
    h=st.integers(40, 120),
    keypoints=st.booleans(),
    broken=st.fixed_dictionaries({k: st.integers(0, 2) for k in KINDS}),
)
def test_coco_scan_matches_pycocotools(
    seed: int, n: int, w: int, h: int, keypoints: bool, broken: dict[str, int]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = write_coco(d, seed, n, (w, h), keypoints, broken)
        source = discover("coco:" + path, ConvertConfig(source=ScanConfig(masks=True)))
        ref, total, classes = reference(path)
    assert source.classes == classes  # categories sorted by id (not as listed, not by name, not in colour order)
    assert sorted(classes) == sorted(CLASSES)
    assert source.fields == ("image", "boxes") + (("keypoints",) if keypoints else ()) + ("mask",)
    assert source.keypoint_names == (KP_NAMES if keypoints else [])  # type: ignore[attr-defined]
    assert source.flip_pairs == ([[0, 1]] if keypoints else [])  # type: ignore[attr-defined]
    (split,) = source.splits
    assert [f.relpath for f in split.files] == sorted(ref)
    assert source.reader.root == os.path.dirname(path)  # --root defaults to the json's folder
    counts = split.annotations
    assert sum(counts.values()) == total  # every annotation accounted for
    for kind in KINDS[:-1]:
        assert counts.get(kind, 0) == broken[kind], kind
    assert counts["clipped"] == broken["clipped"]
    for f in split.files:
        objs, mask = ref[f.relpath]
        o = f.objects
        assert o is not None and len(o) == len(objs)
        assert np.array_equal(o.boxes, np.array([b for b, *_ in objs], np.float32).reshape(-1, 4))
        assert o.labels.tolist() == [c for _, c, *_ in objs]
        assert o.iscrowd.tolist() == [k for _, _, k, _ in objs]
        if keypoints:
            assert o.keypoints is not None
            assert np.array_equal(o.keypoints, np.array([k for *_, k in objs], np.float32).reshape(-1, 2, 3))
        else:
            assert o.keypoints is None
        assert f.segments is not None
        painted = semantic_mask(f.segments, w, h)
        differ = np.argwhere(painted != mask)  # only along polygon outlines (pycocotools' own scan conversion)
        if len(differ):
            outlines = [p for seg in f.segments if not isinstance(seg.shape, Rle) for p in seg.shape]
            near = np.min([outline_distance(differ[:, 1] + 0.5, differ[:, 0] + 0.5, p) for p in outlines], axis=0)
            assert near.max() <= 0.5**0.5, f.relpath
        if f.relpath != "img/empty.jpg":  # the scene itself: each of its rectangles kept exactly
            s = scene(seed, int(f.relpath[4:7]), (w, h))
            assert all(b in o.boxes.tolist() for b in s.objects.boxes.tolist())


def test_category_ids_with_gaps_become_contiguous_classes_and_person_keypoints_pair_up(tmp_path: Any) -> None:
    person = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder"]
    data = {
        "images": [{"id": 7, "file_name": "a.jpg", "width": 50, "height": 40}],
        "categories": [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person", "keypoints": person}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 90, "bbox": [1, 2, 3, 4]},
            {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0, 0, 50, 40], "keypoints": [1, 1, 2] * 7},
        ],
    }
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    source = discover(f"coco:{path}", ConvertConfig(source=ScanConfig(root=str(tmp_path / "images"))))
    assert source.classes == ["background", "person", "toothbrush"]
    assert source.reader.root == str(tmp_path / "images")
    (f,) = source.splits[0].files
    assert f.objects.labels.tolist() == [2, 1] and f.meta == {"image_id": 7}
    assert f.objects.boxes.tolist() == [[1, 2, 4, 6], [0, 0, 50, 40]]
    assert f.objects.keypoints.tolist()[0] == [[0, 0, 0]] * 7  # a category without keypoints: all zero
    assert f.segments is None  # no --masks
    assert source.flip_pairs == [[1, 2], [3, 4], [5, 6]]  # type: ignore[attr-defined]
    assert flip_pairs_of(["Left", "RIGHT", "wing-left", "wing-right", "left"]) == [[0, 1], [2, 3]]


def _valid() -> dict[str, Any]:
    return {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 20, "height": 10}],
        "categories": [{"id": 3, "name": "cat", "keypoints": ["left", "right"]}],
        "annotations": [
            {
                "id": 5,
                "image_id": 1,
                "category_id": 3,
                "bbox": [1, 1, 2, 2],
                "keypoints": [0, 0, 0, 1, 1, 2],
                "segmentation": [[1, 1, 3, 1, 3, 3]],
            }
        ],
    }


def _set(d: dict[str, Any], where: str, value: Any) -> None:
    *path, last = where.split(".")
    for k in path:
        d = d[int(k)] if isinstance(d, list) else d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value


@pytest.mark.parametrize(
    "where, value, key",
    [
        ("images", KeyError, "images: missing"),
        ("images.0.file_name", "../a.jpg", "images[0].file_name"),
        ("images.0.width", 0, "images[0].width"),
        ("images.0.id", None, "images[0].id"),
        ("categories.0.name", "", "categories[0].name"),
        ("categories.0.keypoints", "left", "categories[0].keypoints"),
        ("annotations.0.bbox", [1, 1, 2], "annotations[0] (id 5).bbox"),
        ("annotations.0.bbox", [1, 1, "2", 2], "annotations[0] (id 5).bbox"),
        ("annotations.0.keypoints", [0, 0, 0], "annotations[0] (id 5).keypoints"),
        ("annotations.0.keypoints", [0, 0, 3, 1, 1, 2], "annotations[0] (id 5).keypoints"),
        ("annotations.0.iscrowd", 2, "annotations[0] (id 5).iscrowd"),
        ("annotations.0.segmentation", [[1, 2, 3]], "annotations[0] (id 5).segmentation"),
        ("annotations.0.segmentation", {"size": [9, 20], "counts": [180]}, "annotations[0] (id 5).segmentation"),
        ("annotations.0.segmentation", {"size": [10, 20], "counts": [150, 20]}, "RLE runs add up to 170"),
        ("annotations.0.segmentation", {"size": [10, 20], "counts": "0`"}, "ends inside a run length"),
        ("annotations", {"a": 1}, "annotations: is a dict"),
    ],
)
def test_a_malformed_file_is_one_line_naming_the_file_and_key(tmp_path: Any, where: str, value: Any, key: str) -> None:
    data = _valid()
    _set(data, where, value)
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConvertError) as err:
        discover(f"coco:{path}", ConvertConfig(source=ScanConfig(masks=True)))
    msg = str(err.value)
    assert msg.startswith(str(path)) and key in msg and "\n" not in msg, msg


def test_two_categories_with_one_id_or_two_images_with_one_name_are_refused(tmp_path: Any) -> None:
    for change, key in [
        (lambda d: d["categories"].append({"id": 3, "name": "dog"}), "categories[1].id"),
        (
            lambda d: d["images"].append({"id": 2, "file_name": "./a.jpg", "width": 5, "height": 5}),
            "images[1].file_name",
        ),
    ]:
        data = _valid()
        change(data)
        path = tmp_path / "ann.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ConvertError, match=key.replace("[", r"\[").replace("]", r"\]")):
            discover(f"coco:{path}", ConvertConfig())
    with pytest.raises(ConvertError, match="not JSON"):
        (tmp_path / "bad.json").write_text("{")
        discover(f"coco:{tmp_path / 'bad.json'}", ConvertConfig())


def test_coco_convert_end_to_end(tmp_path: Any) -> None:
    from shardkit.convert import convert

    size = (96, 72)
    path = write_coco(str(tmp_path / "src"), 3, 3, size, True, {"no_image": 1, "clipped": 1})
    write_scene_images(
        str(tmp_path / "src" / "annotations" / "img"), 3, 3, size, [f"{i:03d}.jpg" for i in range(3)] + ["empty.jpg"]
    )
    res = convert(
        "coco:" + path, str(tmp_path / "out"), ConvertConfig(source=ScanConfig(masks=True)), quiet=True, workers=1
    )
    img = tmp_path / "src" / "annotations" / "img"
    assert res.bytes_in == sum(os.path.getsize(img / f) for f in os.listdir(img))  # the summary's "MB in"
    got = read_shards(
        str(tmp_path / "out"), 3, size, True, lambda m: None if "empty" in m["path"] else int(m["path"][4:7])
    )
    assert sorted(got) == ["img/000.jpg", "img/001.jpg", "img/002.jpg", "img/empty.jpg"]


def test_a_missing_file_or_an_empty_path_is_one_line(tmp_path: Any) -> None:
    with pytest.raises(ConvertError, match="not found"):
        discover(f"coco:{tmp_path / 'nope.json'}", ConvertConfig())
    with pytest.raises(ConvertError, match="no path after 'coco:'"):
        discover("coco:", ConvertConfig())
    with pytest.raises(ConvertError, match="--root does not apply"):
        discover(f"voc:{tmp_path}", ConvertConfig(source=ScanConfig(root=str(tmp_path))))
