"""Mutants of the seams the lead join: ``DevicePrefetcher`` hands a dict batch with targets
whole to a ``GpuAugment`` (``shardkit/loader/prefetch.py``), and ``GpuAugment`` refuses keypoints without
``flip_pairs`` (``shardkit/augment/target_moves.py``). Tests: ``tests/loader/test_prefetch_targets.py``,
``tests/augment/test_targets_api.py``."""

ROW_PREFETCH = "GPU augmentation with targets: min_visible and flip_pairs apply, drops are counted, dict batches follow"

P = "tests/loader/test_prefetch_targets.py::"
MOVES = P + "test_the_prefetchers_augmentation_moves_every_target_with_the_pixels"
REFUSED = P + "test_a_transform_that_cannot_move_targets_is_refused"
NOPAIRS = P + "test_keypoints_without_flip_pairs_are_refused"
API = "tests/augment/test_targets_api.py::test_refusals_are_one_line"


ROW_CROWD = "Targets: crowd regions (COCO iscrowd, VOC difficult) are stored, never yielded as boxes unless box_crowd is asked for, and counted"
ROW_VERIFY = "Stored targets: verify counts the classes of boxes and mask pixels (as conversion does)"
ROW_SIZE = "Conversion targets: every input and every annotation is accounted for (written, clipped or skipped)"

ROW_BG = "Conversion input: a category named 'background' (class 0's name) is refused in one line"

ROW_REVIEW = "Targets: misuse that would silently lose targets is refused in one line"
R = "tests/loader/test_targets_refusals.py::"

ROW_DETECT = (
    "Presets detect/letterbox: aspect kept, longer side s * size (s in scale; letterbox: size), crop or pad at whole "
    "pixels, letterbox centred, padding 0 (mask 255); a pure function of (seed, epoch, gid)"
)

MUTANTS = [
    {
        "id": "detect-geometry-ignores-the-epoch",  # every epoch repeats epoch 0's scale, crop and flip
        "row": ROW_DETECT,
        "file": "shardkit/loader/decode/worker.py",
        "old": "            u = sample_uniforms(self.seed, epoch, gids, DETECT_UNIFORMS)",
        "new": "            u = sample_uniforms(self.seed, 0, gids, DETECT_UNIFORMS)",
        "tests": ["tests/loader/test_targets_presets.py::test_detect_scales_then_crops_or_pads"],
    },
    {
        "id": "coco-keypoints-read-as-edges",  # COCO keypoints are pixel indices: half a pixel off, a pixel after a flip
        "row": "Conversion input: COCO (boxes, classes, crowd flags, keypoints and masks as pycocotools reads them; "
        "every annotation kept, clipped or skipped with its reason)",
        "file": "shardkit/convert/scan/coco.py",
        "old": "            x, y = x + KEYPOINT_SHIFT, y + KEYPOINT_SHIFT",
        "new": "            x, y = x, y",
        "tests": ["tests/convert/test_coco.py::test_coco_scan_matches_pycocotools"],
    },
    {
        "id": "loader-flip-pairs-may-repeat-a-keypoint",
        "row": ROW_REVIEW,
        "file": "shardkit/loader/fields.py",
        "old": "        if twice:\n",
        "new": "        if False:\n",
        "tests": [R + "test_flip_pairs_naming_a_keypoint_twice_are_refused"],
    },
    {
        "id": "targets-without-boxes-emptied",
        "row": ROW_REVIEW,
        "file": "shardkit/targets/batchdict.py",
        "old": "    if orphans:\n",
        "new": "    if False:\n",
        "tests": [R + "test_target_fields_without_boxes_are_refused_not_emptied"],
    },
    {
        "id": "background-category-accepted",
        "row": ROW_BG,
        "file": "shardkit/convert/scan/detection.py",
        "old": "    if BACKGROUND in source.classes[1:]:",
        "new": "    if False:",
        "tests": ["tests/convert/test_targets_background.py::test_a_category_named_background_is_refused"],
    },
    {
        "id": "verify-ignores-box-and-mask-classes",
        "row": ROW_VERIFY,
        "file": "shardkit/ops/verify_split.py",
        "old": "        elif classes:  # a detection / segmentation dataset",
        "new": "        elif False:  # a detection / segmentation dataset",
        "tests": ["tests/format/test_targets_members.py::test_verify_counts_the_classes_of_boxes_and_mask_pixels"],
    },
    {
        "id": "crowd-regions-not-counted",
        "row": ROW_CROWD,
        "file": "shardkit/loader/targetrows.py",
        "old": "    dropped = dropped + torch.from_numpy(crowds)",
        "new": "    dropped = dropped",
        "tests": ["tests/loader/test_targets_crowd.py::test_crowd_regions_are_not_yielded_as_boxes"],
    },
    {
        "id": "declared-size-ignored",  # boxes drawn on another image size stored as if they fit this one
        "row": ROW_SIZE,
        "file": "shardkit/convert/targets.py",
        "old": "    if declared is not None and tuple(declared) != tuple(in_size):",
        "new": "    if False:",
        "tests": [
            "tests/convert/test_targets_declared_size.py::"
            "test_a_declared_size_other_than_the_images_skips_it_with_its_annotations"
        ],
    },
    {
        "id": "crowd-regions-yielded-as-boxes",
        "row": ROW_CROWD,
        "file": "shardkit/loader/targetrows.py",
        "old": "        objects = [o.take(~o.iscrowd) if o.iscrowd.any() else o for o in objects]\n",
        "new": "        pass\n",
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
