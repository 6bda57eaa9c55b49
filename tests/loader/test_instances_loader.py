"""``fields=(..., "instances")`` through the loader's crops (instance masks): the pixel oracle.

Demo scenes with instance maps (:func:`shardkit.demo.scenes.write_scenes` ``instances=True``) under every worker
preset (``train``: RandomResizedCrop, ``eval``, ``detect``, ``letterbox``) and ``min_visible`` drops:

* every pixel of row ``k`` lies in box ``k`` and sits on its class's colour, agrees with the semantic mask, and no
  pixel names a row ``>= box_count`` (:func:`tests.support.target_geometry.check_instances`);
* against an independent reference (each output pixel's centre mapped back into the scene's rectangles by plain
  numpy, ``tests.support.scene_crops.reference_mask``): away from rectangle edges, a pixel of stored
  object ``j`` shows the row whose box is ``j``'s reference box, or -1 only when ``j`` may have been dropped;
* crowd regions: their pixels become -1 and the other objects' rows close up (``target_rows`` on hand-made samples);
* a mixture of a source with instance maps and one without is refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.demo.scenes import scene, write_scenes
from shardkit.format import RawSample
from shardkit.format.fields import Objects
from shardkit.format.masks import instances_bytes, mask_bytes
from shardkit.loader.fields import RowSpec
from shardkit.loader.targetrows import decode_masks, target_rows
from tests.support.scene_crops import MARGIN, SCENE, crops_of, reference_boxes, reference_mask
from tests.support.target_geometry import check_instances

FIELDS = ("image", "boxes", "box_labels", "box_count", "mask", "instances", "key")
N = 12


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> str:
    return write_scenes(str(tmp_path_factory.mktemp("inst") / "train"), N, size=SCENE, shard_size=6, instances=True)


@settings(derandomize=True, deadline=None, max_examples=10, phases=[Phase.explicit, Phase.generate])
@given(
    seed=st.integers(0, 10_000),
    size=st.sampled_from([24, 40, 64]),
    preset=st.sampled_from(["train", "eval", "detect", "letterbox"]),
    min_visible=st.sampled_from([0.0, 0.3, 0.6]),
)
def test_instances_follow_the_crop_and_the_kept_boxes(scenes, seed, size, preset, min_visible):
    loader = shardkit.load(
        scenes, batch_size=5, size=size, preset=preset, seed=seed, num_workers=0, fields=FIELDS, min_visible=min_visible
    )
    seen = 0
    for b in loader:
        inst = b["instances"]
        assert inst.dtype == torch.int16 and tuple(inst.shape) == (len(b["key"]), size, size)
        idx = [int(k.rsplit("/", 1)[-1][1:]) for k in b["key"]]
        crops, flips = crops_of(None, size, preset, seed, idx)
        for row, i in enumerate(idx):
            count = int(b["box_count"][row])
            fails = check_instances(
                b["image"][row].float() / 255, b["boxes"][row], b["box_labels"][row], count, inst[row], b["mask"][row]
            )
            assert not fails, (i, fails[:3])
            objs = scene(0, i, SCENE).objects
            ref = reference_boxes(objs, tuple(crops[row]), bool(flips[row]), size, min_visible)
            _, unsure, ids = reference_mask(objs, tuple(crops[row]), bool(flips[row]), size)
            got = inst[row].numpy().astype(np.int64)
            for j, (c, rb, share) in enumerate(ref):
                sure = (ids == j + 1) & ~unsure
                rows_there = set(np.unique(got[sure]).tolist())
                for r in rows_there - {-1}:  # the row shown is object j's: its class and its box
                    gb = b["boxes"][row, r].tolist()
                    assert int(b["box_labels"][row, r]) == c, (i, j, r)
                    assert max(abs(u - v) for u, v in zip(gb, rb)) <= MARGIN, (i, j, r, gb, rb)
                if sure.any() and share >= min_visible + 0.05 and share > 0.02:  # surely kept: no -1 on it
                    assert -1 not in rows_there, (i, j, share)
            seen += 1
    assert seen == N


def _sample(key: str, objects: Objects, rows: np.ndarray) -> RawSample:
    s = RawSample(key, 0, "s", 0, objects=objects)
    s.instances = instances_bytes(rows)
    s.mask = mask_bytes(np.zeros(rows.shape, np.uint8))
    return s


def test_crowd_pixels_become_minus_one_and_the_rows_close_up():
    h, w = 20, 30
    rows = np.full((h, w), -1, np.int16)
    boxes = np.array([[0, 0, 10, 10], [10, 0, 20, 10], [20, 0, 30, 10], [0, 10, 30, 20]], np.float32)
    for k, (x0, y0, x1, y1) in enumerate(boxes.astype(int)):
        rows[y0:y1, x0:x1] = k
    crowd = np.array([False, True, False, True])
    objs = Objects(boxes, np.array([1, 2, 3, 4]), crowd)
    samples = [_sample("a", objs, rows)]
    pixels, errors = decode_masks(samples, [(w, h)], ("instances",))
    assert not errors
    spec = RowSpec(targets=("boxes", "box_labels", "box_count", "instances"), min_visible=0.0)
    # the whole image, resized to 30 x 30, not flipped: rows keep their places (nearest, no crop)
    out, dropped = target_rows(samples, pixels, np.array([[0, 0, w, h]], np.float64), np.array([False]), 30, spec)
    assert dropped == 2  # the two crowd regions are not yielded
    assert out.box_labels.tolist() == [[1, 3]]  # type: ignore[union-attr]
    got = out.instances[0].numpy()  # type: ignore[index]
    ys = (np.arange(30) + 0.5) * h / 30  # the source row each output row samples
    xs = (np.arange(30) + 0.5) * w / 30
    want = np.array([[{0: 0, 2: 1}.get(int(rows[int(y), int(x)]), -1) for x in xs] for y in ys])
    assert np.array_equal(got, want)


def test_an_instance_map_naming_a_missing_object_fails_its_sample():
    objs = Objects(np.array([[0, 0, 4, 4]], np.float32), np.array([1]), np.array([False]))
    bad = _sample("b", objs, np.full((6, 6), 3, np.int16))  # object 3 of a sample with one
    _, errors = decode_masks([bad], [(6, 6)], ("instances",))
    assert len(errors) == 1 and "names object 3" in errors[0][1]


def test_a_mixture_with_and_without_instances_is_refused_in_one_line(scenes, tmp_path):
    plain = write_scenes(str(tmp_path / "plain"), 4, size=SCENE, shard_size=4)
    with pytest.raises(ValueError, match="has no 'instances' field") as e:
        shardkit.load(
            [shardkit.Source(scenes, repeat=1), shardkit.Source(plain, repeat=1)], fields=FIELDS, num_workers=0
        )
    assert "\n" not in str(e.value)


def test_decode_on_device_and_two_workers_give_the_worker_paths_instances(scenes, preset="train"):
    """``decode_on="device"`` (here on the CPU, no DCT scaling on either side) and two worker processes: the same
    instance maps as the plain worker path, sample by sample."""
    kw = dict(batch_size=5, size=40, seed=4, preset=preset, fields=FIELDS, min_visible=0.3, decoder="torchvision")

    def maps(loader) -> dict[str, torch.Tensor]:
        return {k: b["instances"][r] for b in loader for r, k in enumerate(b["key"])}

    worker = maps(shardkit.load(scenes, num_workers=0, **kw))
    device = maps(shardkit.load(scenes, num_workers=0, decode_on="device", **kw))
    two = maps(shardkit.load(scenes, num_workers=2, **kw))
    assert sorted(worker) == sorted(device) == sorted(two) and len(worker) == N
    for k in worker:
        assert torch.equal(worker[k], device[k]) and torch.equal(worker[k], two[k]), k
