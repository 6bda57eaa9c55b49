"""A category named ``background`` would share class 0's name (no object, torchvision's convention): its objects
would silently train as background, and a mixture would merge them into class 0. Refused in one line."""

from __future__ import annotations

import json
import os

import pytest

from shardkit.convert import convert
from shardkit.convert.options import ConvertConfig
from shardkit.errors import ConvertError
from tests.support.detection_sources import write_scene_images


def test_a_category_named_background_is_refused(tmp_path):
    src = str(tmp_path / "src")
    write_scene_images(src, 0, 1, (64, 48), ["a.jpg"])
    ann = os.path.join(src, "ann.json")
    with open(ann, "w") as f:
        json.dump(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
                "annotations": [{"id": 1, "image_id": 1, "category_id": 10, "bbox": [1, 1, 5, 5]}],
                "categories": [{"id": 10, "name": "background"}, {"id": 11, "name": "cat"}],
            },
            f,
        )
    with pytest.raises(ConvertError, match="a category is named 'background'"):
        convert("coco:" + ann, str(tmp_path / "out"), ConvertConfig(), quiet=True, workers=1)
