"""Boxes, keypoints and masks through the loader's crops: oracles that cannot be fooled.

The data are demo scenes (:mod:`shardkit.demo.scenes`); every batch goes through
:func:`tests.support.scene_crops.check_batch` (every returned target checked against the returned pixels and
against a per-box reference of the scene's exact objects), and ``boxes_dropped`` is the boxes given minus the
boxes returned.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.demo.scenes import write_scenes
from tests.support.scene_crops import SCENE, TARGETS, check_batch, spoil, truncated_scan

N = 20


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> str:
    return write_scenes(str(tmp_path_factory.mktemp("scenes") / "train"), N, size=SCENE, shard_size=8)


@settings(derandomize=True, deadline=None, max_examples=12, phases=[Phase.explicit, Phase.generate])  # no shrinking
@given(
    seed=st.integers(0, 10_000),
    size=st.sampled_from([16, 24, 40, 64]),
    batch=st.integers(1, 7),
    preset=st.sampled_from(["train", "eval", "detect", "letterbox"]),
    min_visible=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_targets_follow_the_crop(scenes, seed, size, batch, preset, min_visible):
    loader = shardkit.load(
        scenes,
        batch_size=batch,
        size=size,
        preset=preset,
        seed=seed,
        num_workers=0,
        fields=TARGETS,
        min_visible=min_visible,
    )
    given_n = returned = seen = 0
    for b in loader:
        g, r = check_batch(b, size, preset, seed, min_visible)
        given_n, returned, seen = given_n + g, returned + r, seen + len(b["key"])
        m = b["boxes"].shape[1]
        assert m == int(b["box_count"].numpy().max(initial=0)), "M is the most objects a sample keeps"
    assert seen == N
    assert loader.stats.boxes_dropped == given_n - returned


def test_targets_with_workers(scenes):
    """Two worker processes: the same batches, the same counts."""
    kw = dict(batch_size=6, size=40, seed=3, fields=TARGETS, min_visible=0.3)
    one = list(shardkit.load(scenes, num_workers=0, **kw))
    two_loader = shardkit.load(scenes, num_workers=2, **kw)
    two = list(two_loader)

    def rows(batches: list[dict]) -> dict[str, list]:
        out = {}
        for b in batches:
            for r, k in enumerate(b["key"]):
                n = int(b["box_count"][r])
                out[k] = [b["boxes"][r, :n], b["box_labels"][r, :n], b["keypoints"][r, :n], b["mask"][r]]
        return out

    a, b = rows(one), rows(two)
    assert sorted(a) == sorted(b) and len(a) == N
    for k in a:
        assert all(torch.equal(u, v) for u, v in zip(a[k], b[k])), k
    given_n = returned = 0
    for b in two:
        g, r = check_batch(b, 40, "train", 3, 0.3)
        given_n, returned = given_n + g, returned + r
    assert two_loader.stats.boxes_dropped == given_n - returned > 0
    assert f"{given_n - returned} boxes dropped" in two_loader.report()


def test_default_batches_unchanged(scenes, tmp_path):
    """Asking for targets changes nothing in the image bytes, and a plain dataset's tuples stay tuples."""
    plain = shardkit.load(scenes, batch_size=5, size=32, seed=1, num_workers=0, fields=("image", "key"))
    with_t = shardkit.load(scenes, batch_size=5, size=32, seed=1, num_workers=0, fields=TARGETS)
    for a, b in zip(plain, with_t):
        assert torch.equal(a["image"], b["image"]) and a["key"] == b["key"]


@pytest.mark.parametrize(
    "member, bad", [("k000002.mask.png", lambda d: b"X" * len(d)), ("k000002.jpg", truncated_scan)]
)
def test_a_bad_mask_or_image_skips_its_sample_and_rows_stay_aligned(tmp_path, member, bad):
    """A mask that is not a PNG, or an image whose scan breaks, fails its sample: skipped and counted, and every
    other sample's targets stay its own (the oracle holds on every batch)."""
    root = write_scenes(str(tmp_path / "s"), 8, size=SCENE, shard_size=8)
    spoil(root, member, bad)
    loader = shardkit.load(root, batch_size=4, size=32, seed=5, num_workers=0, fields=TARGETS, min_visible=0.0)
    keys = []
    for b in loader:
        check_batch(b, 32, "train", 5, 0.0)
        keys += b["key"]
    assert sorted(keys) == [f"k{i:06d}" for i in range(8) if i != 2]
    assert loader.stats.skipped == 1


def test_refusals(scenes, tmp_path):
    with pytest.raises(ValueError, match="views="):
        shardkit.load(scenes, views=[shardkit.View(size=32)], fields=("image", "boxes"), num_workers=0)
    with pytest.raises(ValueError, match="min_visible"):
        shardkit.load(scenes, fields=("image", "boxes"), min_visible=1.5, num_workers=0)
    with pytest.raises(ValueError, match="has no 'mask' field"):
        shardkit.load(write_scenes(str(tmp_path / "nm"), 4, mask=False), fields=("image", "mask"), num_workers=0)
    with pytest.raises(ValueError, match="has no 'boxes' field"):
        from tests.support.data import write_fields_dataset

        shardkit.load(
            write_fields_dataset(str(tmp_path / "f"), ["image", "label"]), fields=("image", "boxes"), num_workers=0
        )
