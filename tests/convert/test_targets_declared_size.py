"""A COCO file whose ``images[].width/height`` is not the image's (EXIF-oriented) size: the boxes were drawn on
another image, so the sample is skipped as ``size_mismatch`` (one line naming the file and both sizes) and its
annotations accounted for, never stored clipped against the wrong size."""

from __future__ import annotations

import json
import os

from shardkit.convert import convert
from shardkit.convert.options import ConvertConfig
from shardkit.demo.scenes import scene
from shardkit.format.manifest import load_manifest
from tests.support.detection_sources import write_scene_images


def test_a_declared_size_other_than_the_images_skips_it_with_its_annotations(tmp_path):
    src = str(tmp_path / "src")
    write_scene_images(src, 0, 2, (160, 120), ["a.jpg", "b.jpg"])
    images, annotations = [], []
    for i, (name, size) in enumerate([("a.jpg", (160, 120)), ("b.jpg", (80, 60))]):  # b.jpg declared at half size
        images.append({"id": i + 1, "file_name": name, "width": size[0], "height": size[1]})
        for b, c in zip(
            scene(0, i, (160, 120)).objects.boxes.tolist(), scene(0, i, (160, 120)).objects.labels.tolist()
        ):
            x0, y0, x1, y1 = b
            annotations.append(
                {"id": len(annotations) + 1, "image_id": i + 1, "category_id": c, "bbox": [x0, y0, x1 - x0, y1 - y0]}
            )
    cats = [{"id": c, "name": f"c{c}"} for c in range(1, 7)]
    ann = os.path.join(src, "ann.json")
    with open(ann, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": cats}, f)
    convert("coco:" + ann, str(tmp_path / "out"), ConvertConfig(), quiet=True, workers=1)
    m = load_manifest(str(tmp_path / "out" / "train"))
    assert m.num_samples == 1
    assert [(s.path, s.reason) for s in m.skipped] == [("b.jpg", "size_mismatch")]
    assert "80x60" in m.skipped[0].detail and "160x120" in m.skipped[0].detail
    assert sum(m.annotations.values()) == len(annotations)  # every annotation accounted for
