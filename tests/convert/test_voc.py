"""``voc:`` sources: demo scenes written as Pascal VOC folders (1-based inclusive boxes), against the scenes' objects."""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from shardkit.convert.imageproc import SkipReason
from shardkit.convert.options import ConvertConfig, ScanConfig
from shardkit.convert.scan import discover
from shardkit.convert.scan.voc import VOC_CLASSES
from shardkit.demo.scenes import CLASSES, scene
from shardkit.errors import ConvertError
from tests.support.detection_sources import read_shards, write_scene_images

SETTINGS = settings(phases=[Phase.explicit, Phase.generate], derandomize=True, deadline=None, max_examples=25)
KINDS = ("degenerate_box", "outside_image", "clipped")


def xml_of(filename: str, size: tuple[int, int] | None, objects: list[tuple[str, list[float], bool]]) -> str:
    parts = [f"<annotation><folder>VOC2012</folder><filename>{filename}</filename>"]
    if size:
        parts.append(f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>")
    for name, (xmin, ymin, xmax, ymax), difficult in objects:
        parts.append(
            f"<object><name>{name}</name><pose>Unspecified</pose><truncated>0</truncated>"
            f"<difficult>{int(difficult)}</difficult><bndbox><xmin>{xmin:g}</xmin><ymin>{ymin:g}</ymin>"
            f"<xmax>{xmax:g}</xmax><ymax>{ymax:g}</ymax></bndbox></object>"
        )
    return "".join(parts) + "</annotation>"


def write_voc(
    root: str, seed: int, n: int, size: tuple[int, int], voc_names: bool, lists: bool, broken: dict[str, int]
) -> tuple[dict[str, list[tuple[list[float], str, bool]]], list[str]]:
    """Scenes as ``root/Annotations/<id>.xml`` (+ ``ImageSets/Main`` lists); returns the expected objects per id
    and every class name written."""
    rng = random.Random(seed)
    name_of = (lambda c: VOC_CLASSES[(3 * c) % 20]) if voc_names else (lambda c: CLASSES[c])
    os.makedirs(os.path.join(root, "Annotations"))
    expected: dict[str, list[tuple[list[float], str, bool]]] = {}
    w, h = size
    names: set[str] = set()
    for i in range(n):
        s = scene(seed, i, size)
        objs: list[tuple[str, list[float], bool, list[float] | None]] = []  # (name, VOC box, difficult, expected box)
        for (x0, y0, x1, y1), c in zip(s.objects.boxes.tolist(), s.objects.labels.tolist()):
            # VOC: 1-based pixel indices, both ends included
            objs.append((name_of(c), [x0 + 1, y0 + 1, x1, y1], rng.random() < 0.25, [x0, y0, x1, y1]))
        for kind, count in broken.items():
            for _ in range(count):
                c = name_of(rng.randrange(1, len(CLASSES)))
                if kind == "degenerate_box":
                    o = (c, [10, 10, rng.choice([8, 9]), 20], False, None)
                elif kind == "outside_image":
                    o = (c, [w + 1, 5, w + 9, 9], False, None)
                elif rng.random() < 0.5:  # starts at 0 (VOC's 1-based rule broken): cut to the image; difficult
                    o = (c, [0, 3, 7, 9], True, [0, 2, 7, 9])
                else:  # ends past the image
                    o = (c, [3, 3, w + 4, 9], True, [2, 2, w, 9])
                objs.insert(rng.randrange(len(objs) + 1), o)
        want = [(box, name, dif) for name, _, dif, box in objs if box is not None]
        ident = f"2012_{i:06d}"
        with open(os.path.join(root, "Annotations", ident + ".xml"), "w") as f:
            f.write(xml_of(ident + ".jpg", size, [o[:3] for o in objs]))
        expected[ident] = want
        names.update(o[0] for o in objs)
    if lists:
        os.makedirs(os.path.join(root, "ImageSets", "Main"))
        ids = sorted(expected)
        with open(os.path.join(root, "ImageSets", "Main", "train.txt"), "w") as f:
            f.write("".join(i + "\n" for i in ids[::2]) + "2012_999999\n")  # listed, no annotation file
        with open(os.path.join(root, "ImageSets", "Main", "val.txt"), "w") as f:
            f.write("".join(i + "\n" for i in ids[1::2]))
    return expected, sorted(names)


@SETTINGS
@example(seed=0, n=2, w=64, h=48, voc_names=False, lists=True, broken=dict.fromkeys(KINDS, 1))
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 4),
    w=st.integers(40, 120),
    h=st.integers(40, 120),
    voc_names=st.booleans(),
    lists=st.booleans(),
    broken=st.fixed_dictionaries({k: st.integers(0, 2) for k in KINDS}),
)
def test_voc_scan_matches_the_scenes(
    seed: int, n: int, w: int, h: int, voc_names: bool, lists: bool, broken: dict[str, int]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = os.path.join(d, "VOCdevkit", "VOC2012")
        expected, names = write_voc(root, seed, n, (w, h), voc_names, lists, broken)
        source = discover("voc:" + os.path.join(d, "VOCdevkit"), ConvertConfig())  # the devkit's only VOC folder
    assert source.classes == ["background", *(VOC_CLASSES if voc_names else names)]
    assert source.fields == ("image", "boxes")
    ids = sorted(expected)
    want_splits = {"train": ids[::2], "val": ids[1::2]} if lists else {"train": ids}
    assert {s.name: [f.meta["voc_id"] for f in s.files] for s in source.splits} == want_splits
    total: dict[str, int] = {}
    for split in source.splits:
        for k, v in split.annotations.items():
            total[k] = total.get(k, 0) + v
        if lists and split.name == "train":
            assert split.skipped == [
                ("JPEGImages/2012_999999.jpg", SkipReason.MISSING_FILE, "no Annotations/2012_999999.xml")
            ]
        for f in split.files:
            want = expected[f.meta["voc_id"]]
            assert f.relpath == f"JPEGImages/{f.meta['voc_id']}.jpg"
            o = f.objects
            assert o is not None and o.keypoints is None and f.mask is None
            assert o.boxes.tolist() == [b for b, _, _ in want]
            assert [source.classes[c] for c in o.labels.tolist()] == [name for _, name, _ in want]
            assert o.iscrowd.tolist() == [dif for _, _, dif in want]  # difficult objects are kept as crowd regions
    scene_objects = sum(len(scene(seed, i, (w, h)).objects) for i in range(n))
    assert total == {"kept": scene_objects, "clipped": n * broken["clipped"]} | {
        k: n * broken[k] for k in ("degenerate_box", "outside_image") if broken[k]
    }


def test_masks_come_from_segmentation_class_pngs_and_an_image_without_one_is_accounted(tmp_path: Any) -> None:
    from PIL import Image

    root = str(tmp_path / "VOC2012")
    expected, _ = write_voc(root, 5, 3, (50, 40), True, False, {})
    os.makedirs(os.path.join(root, "SegmentationClass"))
    os.makedirs(os.path.join(root, "ImageSets", "Segmentation"))
    ids = sorted(expected)
    for i in ids[:2]:
        Image.fromarray(np.zeros((40, 50), np.uint8), mode="L").convert("P").save(
            os.path.join(root, "SegmentationClass", i + ".png")
        )
    with open(os.path.join(root, "ImageSets", "Segmentation", "val.txt"), "w") as f:
        f.write("\n".join(ids) + "\n")
    source = discover(f"voc:{root}", ConvertConfig(source=ScanConfig(masks=True)))
    assert source.fields == ("image", "boxes", "mask") and source.classes == ["background", *VOC_CLASSES]
    (split,) = source.splits
    assert split.name == "val" and [f.mask for f in split.files] == [f"SegmentationClass/{i}.png" for i in ids[:2]]
    assert split.skipped == [
        (f"JPEGImages/{ids[2]}.jpg", SkipReason.MISSING_FILE, f"no SegmentationClass/{ids[2]}.png (--masks)")
    ]
    assert split.annotations.get("no_mask", 0) == len(expected[ids[2]])
    assert sum(split.annotations.values()) == sum(len(v) for v in expected.values())


def test_a_missing_size_is_read_from_the_image_header(tmp_path: Any) -> None:
    root = tmp_path / "VOC2007"
    (root / "Annotations").mkdir(parents=True)
    (root / "Annotations" / "x.xml").write_text(xml_of("x.jpg", None, [("dog", [1, 1, 80, 70], False)]))
    write_scene_images(str(root / "JPEGImages"), 0, 1, (60, 50), ["x.jpg"])
    source = discover(f"voc:{root}", ConvertConfig())
    (f,) = source.splits[0].files
    assert f.objects.boxes.tolist() == [[0, 0, 60, 50]] and source.splits[0].annotations == {"kept": 0, "clipped": 1}


@pytest.mark.parametrize(
    "text, message",
    [
        ('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "y">]><annotation/>', "DOCTYPE or ENTITY"),
        ("<annotation><object>", "not valid XML"),
        (
            "<annotation><size><width>9</width><height>9</height></size><object><name>a</name></object></annotation>",
            "<bndbox> is missing",
        ),
        (
            xml_of("x.jpg", (9, 9), [("a", [1, 1, 2, 2], False)]).replace("<xmax>2</xmax>", "<xmax>two</xmax>"),
            "<xmax> is 'two', not a number",
        ),
        (
            xml_of("x.jpg", (9, 9), [("a", [1, 1, 2, 2], False)]).replace("<name>a</name>", "<name> </name>"),
            "<name> is missing or empty",
        ),
        ("<annotation>" + "x" * (1 << 20) + "</annotation>", "larger than"),
    ],
)
def test_an_unsafe_or_malformed_annotation_file_is_one_line_naming_it(tmp_path: Any, text: str, message: str) -> None:
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "x.xml").write_text(text)
    with pytest.raises(ConvertError, match=message) as err:
        discover(f"voc:{tmp_path}", ConvertConfig())
    assert str(err.value).startswith(str(tmp_path / "Annotations" / "x.xml")) and "\n" not in str(err.value)


def test_masks_refuse_classes_outside_vocs_twenty(tmp_path: Any) -> None:
    write_voc(str(tmp_path), 1, 1, (50, 40), False, False, {})
    with pytest.raises(ConvertError, match="not one of VOC's 20"):
        discover(f"voc:{tmp_path}", ConvertConfig(source=ScanConfig(masks=True)))
    with pytest.raises(ConvertError, match="no Annotations/ folder"):
        discover(f"voc:{tmp_path / 'Annotations'}", ConvertConfig())


def test_voc_convert_end_to_end(tmp_path: Any) -> None:
    from shardkit.convert import convert

    size = (96, 72)
    root = str(tmp_path / "VOC2012")
    expected, _ = write_voc(root, 4, 3, size, True, False, {"clipped": 1})
    write_scene_images(os.path.join(root, "JPEGImages"), 4, 3, size, [f"{i}.jpg" for i in sorted(expected)])
    convert(f"voc:{root}", str(tmp_path / "out"), ConvertConfig(), quiet=True, workers=1)
    got = read_shards(str(tmp_path / "out"), 4, size, False, lambda m: int(m["path"].rsplit("_", 1)[1][:6]))
    assert len(got) == 3
