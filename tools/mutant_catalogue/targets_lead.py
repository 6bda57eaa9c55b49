"""Mutants of the seams the lead joined at merge (issue 24): ``DevicePrefetcher`` hands a dict batch with targets
whole to a ``GpuAugment`` (``shardkit/loader/prefetch.py``), and ``GpuAugment`` refuses keypoints without
``flip_pairs`` (``shardkit/augment/target_moves.py``). Tests: ``tests/loader/test_prefetch_targets.py``,
``tests/augment/test_targets_api.py``."""

ROW_PREFETCH = "GPU augmentation with targets: min_visible and flip_pairs apply, drops are counted, dict batches follow"

P = "tests/loader/test_prefetch_targets.py::"
MOVES = P + "test_the_prefetchers_augmentation_moves_every_target_with_the_pixels"
REFUSED = P + "test_a_transform_that_cannot_move_targets_is_refused"
NOPAIRS = P + "test_keypoints_without_flip_pairs_are_refused"
API = "tests/augment/test_targets_api.py::test_refusals_are_one_line"

ROW_CROWD = "Targets: crowd regions (COCO iscrowd) are stored but never yielded as boxes to detect"

MUTANTS = [
    {
        "id": "crowd-regions-yielded-as-boxes",
        "row": ROW_CROWD,
        "file": "shardkit/loader/targetrows.py",
        "old": "    objects = [o.take(~o.iscrowd) if o.iscrowd.any() else o for o in objects]\n",
        "new": "",
        "tests": ["tests/loader/test_targets_crowd.py::test_crowd_regions_are_not_yielded_as_boxes"],
    },
    {
        "id": "prefetch-transform-sees-only-the-image",  # the old behaviour: boxes and masks silently stay put
        "row": ROW_PREFETCH,
        "file": "shardkit/loader/prefetch.py",
        "old": "        if any(k in batch for k in TARGET_FIELDS):\n",
        "new": "        if False:\n",
        "tests": [MOVES, REFUSED],
    },
    {
        "id": "keypoints-without-flip-pairs-accepted",
        "row": ROW_PREFETCH,
        "file": "shardkit/augment/target_moves.py",
        "old": "    if targets.keypoints is not None and targets.keypoints.shape[2] and flip_pairs is None:\n",
        "new": "    if False:\n",
        "tests": [NOPAIRS, API],
    },
]
