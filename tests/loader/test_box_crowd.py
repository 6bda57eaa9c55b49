"""``box_crowd``: asked for by name, crowd regions (COCO ``iscrowd``, VOC ``difficult``) are yielded as rows of
``boxes``, each marked; not asked for, nothing changes (crowds dropped and counted).

The datasets are generated demo scenes whose objects are labelled by their index in the sample (object ``j`` has
box label ``j``), with crowd flags drawn per object, so a returned row names its stored object. Oracles, through
the crops and flips of the ``train`` and ``detect`` presets, with 0 and 2 workers:

* row ``j``'s ``box_crowd`` is the stored flag of the object ``box_labels[j]`` names, and ``boxes[j]`` is that
  object's box moved by the sample's crop (a plain per-box reference, within one output pixel); rows keep the
  stored order; padding rows are not crowd;
* the batch without ``box_crowd`` (same seed) is exactly the non-crowd rows of the batch with it, and its
  ``boxes_dropped`` is the other's plus the crowd rows the other yielded;
* a :class:`~shardkit.augment.GpuAugment` crop of a dict batch moves ``box_crowd`` with its rows.
"""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import torch
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.augment import GpuAugment, HorizontalFlip, RandomResizedCrop
from shardkit.demo.scenes import CLASSES, scene, scene_jpeg
from shardkit.format import EncodedSample
from shardkit.format.fields import Objects
from shardkit.loader.config import ImageConfig
from shardkit.loader.decode.worker import CropDecoder
from tests.support.data import write_samples

SCENE = (120, 90)  #: stored (width, height)
N = 10
MARGIN = 1.0  #: output pixels a returned box may differ from the reference (the worker's crop is rounded)
BOXES = ("key", "boxes", "box_labels", "box_count")


def write_crowd_scenes(root: str, crowd_seed: int, share: float) -> dict[int, Objects]:
    """Scenes ``k000000 ..`` (two shards) whose object ``j`` has box label ``j``, each a crowd region with
    probability ``share``; returns each sample's stored objects."""
    rng = np.random.default_rng(crowd_seed)
    stored, shards = {}, []
    for first in range(0, N, 6):
        samples: list[EncodedSample] = []
        for i in range(first, min(N, first + 6)):
            s = scene(3, i, SCENE, max_objects=6)
            objs = Objects(
                s.objects.boxes, np.arange(len(s.objects), dtype=np.int64), rng.random(len(s.objects)) < share
            )
            stored[i] = objs
            samples.append(EncodedSample(f"k{i:06d}", scene_jpeg(s), None, {"i": i}, objects=objs))
        shards.append(samples)
    write_samples(root, shards, CLASSES, fields=["image", "boxes"])
    return stored


def by_key(root: str, fields: tuple[str, ...], **options) -> tuple[dict[str, dict], int]:
    """Every sample's row of every field, by key, and the loader's ``boxes_dropped``."""
    loader = shardkit.load(root, fields=fields, **options)
    rows: dict[str, dict] = {}
    try:
        for b in loader:
            for r, key in enumerate(b["key"]):
                rows[key] = {f: b[f][r] for f in fields if f != "key"}
                if "box_crowd" in fields:
                    assert b["box_crowd"].dtype == torch.bool and b["box_crowd"].shape == b["box_labels"].shape
        return rows, loader.stats.boxes_dropped
    finally:
        loader.close()


def reference_box(box: np.ndarray, crop: np.ndarray, flip: bool, size: int) -> np.ndarray:
    """A stored box in output pixels after the crop ``crop`` (stored pixels) resized to ``size`` and ``flip``,
    clipped: plain arithmetic, one box."""
    bx0, by0, bx1, by1 = crop.tolist()
    x0, y0, x1, y1 = box.tolist()
    sx, sy = size / (bx1 - bx0), size / (by1 - by0)
    X0, X1, Y0, Y1 = (x0 - bx0) * sx, (x1 - bx0) * sx, (y0 - by0) * sy, (y1 - by0) * sy
    if flip:
        X0, X1 = size - X1, size - X0
    return np.clip(np.array([X0, Y0, X1, Y1]), 0, size)


def check(root, stored, *, preset, size, seed, batch, workers, min_visible):
    """Every oracle of the module docstring on one loader configuration."""
    options = dict(batch_size=batch, size=size, preset=preset, seed=seed, num_workers=workers, min_visible=min_visible)
    with_crowd, dropped_with = by_key(root, (*BOXES, "box_crowd"), **options)
    plain, dropped_plain = by_key(root, BOXES, **options)
    assert sorted(with_crowd) == sorted(plain) == [f"k{i:06d}" for i in range(N)]
    idx = list(range(N))
    crops = CropDecoder(ImageConfig(preset=preset, size=size), seed).geometry(
        np.array([SCENE] * N, np.int64), 0, np.array(idx, np.int64)
    )
    crowd_rows = 0
    for i in idx:
        w, p, objs = with_crowd[f"k{i:06d}"], plain[f"k{i:06d}"], stored[i]
        c = int(w["box_count"])
        labels, crowd = w["box_labels"].tolist(), w["box_crowd"].tolist()
        assert labels[:c] == sorted(set(labels[:c])) and all(v == -1 for v in labels[c:]), f"k{i}: rows out of order"
        assert crowd[:c] == [bool(objs.iscrowd[j]) for j in labels[:c]], f"k{i}: box_crowd is not its row's flag"
        assert not any(crowd[c:]), f"k{i}: a padding row marked crowd"
        for r, j in enumerate(labels[:c]):
            want = reference_box(objs.boxes[j], crops.boxes[i], bool(crops.flips[i]), size)
            got = w["boxes"][r].numpy()
            assert np.abs(got - want).max() <= MARGIN, f"k{i}: row {r} box {got} is not object {j}'s {want}"
        crowd_rows += sum(crowd[:c])
        # without box_crowd: exactly the non-crowd rows
        keep = ~w["box_crowd"][:c]
        pc = int(p["box_count"])
        assert pc == int(keep.sum()), f"k{i}: {pc} boxes without box_crowd, {int(keep.sum())} non-crowd rows with it"
        assert torch.equal(p["boxes"][:pc], w["boxes"][:c][keep]), f"k{i}: boxes differ"
        assert torch.equal(p["box_labels"][:pc], w["box_labels"][:c][keep]), f"k{i}: box labels differ"
        assert not any(objs.iscrowd[j] for j in p["box_labels"][:pc].tolist()), f"k{i}: a crowd yielded unasked"
    assert dropped_plain == dropped_with + crowd_rows


@pytest.fixture(scope="module")
def crowds(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("crowds"))
    return root, write_crowd_scenes(root, 11, 0.4)


@settings(deadline=None, max_examples=8, phases=[Phase.explicit, Phase.generate])
@given(
    crowd_seed=st.integers(0, 1000),
    share=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    seed=st.integers(0, 10_000),
    size=st.sampled_from([24, 40, 64]),
    batch=st.integers(1, 6),
    preset=st.sampled_from(["train", "detect"]),
    min_visible=st.sampled_from([0.0, 0.1, 0.5]),
)
@example(crowd_seed=11, share=0.4, seed=3, size=40, batch=4, preset="train", min_visible=0.1)
@example(crowd_seed=5, share=0.7, seed=8, size=64, batch=3, preset="detect", min_visible=0.5)
def test_box_crowd_lines_up_with_boxes(crowd_seed, share, seed, size, batch, preset, min_visible):
    with tempfile.TemporaryDirectory() as root:
        stored = write_crowd_scenes(root, crowd_seed, share)
        check(root, stored, preset=preset, size=size, seed=seed, batch=batch, workers=0, min_visible=min_visible)


@pytest.mark.parametrize("preset", ["train", "detect"])
def test_box_crowd_lines_up_with_boxes_in_workers(crowds, preset):
    root, stored = crowds
    check(root, stored, preset=preset, size=48, seed=7, batch=3, workers=2, min_visible=0.3)


def test_box_crowd_moves_with_its_rows_through_gpu_augment(crowds):
    root, stored = crowds
    loader = shardkit.load(
        root, fields=("image", *BOXES, "box_crowd"), batch_size=N, size=64, preset="letterbox", num_workers=0
    )
    batch = next(iter(loader))
    loader.close()
    assert bool(batch["box_crowd"].any())
    aug = GpuAugment([RandomResizedCrop(40, scale=(0.2, 0.5)), HorizontalFlip()], seed=4, min_visible=0.5)
    out = aug(batch)
    moved = 0
    for r, key in enumerate(out["key"]):
        objs, c = stored[int(key[1:])], int(out["box_count"][r])
        labels = out["box_labels"][r].tolist()
        assert out["box_crowd"][r].tolist()[:c] == [bool(objs.iscrowd[j]) for j in labels[:c]], key
        assert not out["box_crowd"][r, c:].any(), key
        moved += c < int(batch["box_count"][r])
    assert moved > 0  # the crop dropped rows: the flags followed their boxes, not their positions
