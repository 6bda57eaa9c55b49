"""Mutants of the target fields in the loader (issue 24): boxes, box labels and counts, keypoints and masks moved
with each sample's crop (``shardkit/targets/crops.py``, ``shardkit/loader/targetrows.py``, ``batching.decode_batch``,
``decode/worker.py``). Tests: ``tests/loader/test_targets_oracle.py``."""

ROW_MOVE = (
    "Targets: every box, keypoint and mask pixel moves with its sample's crop, resize and flip (boxes clipped, "
    "keypoint flip pairs swapped, masks nearest)"
)
ROW_ALIGN = "Targets: every sample's targets are its own, whatever is skipped (bad image, bad mask)"
ROW_COUNT = "Targets: boxes dropped below min_visible are counted (stats.boxes_dropped); M is the most kept"

T = "tests/loader/test_targets_oracle.py::"
FOLLOW = T + "test_targets_follow_the_crop"
WORKERS = T + "test_targets_with_workers"
BAD = T + "test_a_bad_mask_or_image_skips_its_sample_and_rows_stay_aligned"

MUTANTS = [
    {
        "id": "targets-flip-forgets-boxes",  # the pixels (and masks) are mirrored, the boxes and keypoints not
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "pad_objects(objects, k), inv,",
        "new": "pad_objects(objects, k), crop_maps(boxes, np.zeros_like(flips), size),",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-flip-forgets-everything",  # the crop's map has no flip at all
        "row": ROW_MOVE,
        "file": "shardkit/targets/crops.py",
        "old": "    a = np.where(f, -sx, sx)\n    c = np.where(f, tx + (ow - 1) * sx, tx)\n",
        "new": "    a, c = sx, tx\n",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-boxes-not-clipped",  # clipped to (and dropped against) the wrong output size
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "(size, size), min_visible=spec.min_visible",
        "new": "(4 * size, 4 * size), min_visible=spec.min_visible",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-keypoint-pairs-not-swapped",
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "flip_pairs=spec.flip_pairs",
        "new": "flip_pairs=()",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-mask-bilinear",  # neighbouring labels blended (class indices averaged at edges)
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "mask[i] = warp_masks(src[None], inv[i : i + 1], (size, size))[0]",
        "new": (
            "mask[i] = ((warp_masks(src[None], inv[i : i + 1], (size, size)).int() + warp_masks(src[None], "
            "inv[i : i + 1] + torch.tensor([[0.0, 0, 0.5], [0, 0, 0.5], [0, 0, 0]], dtype=inv.dtype), (size, size))"
            ".int()) // 2)[0].to(torch.uint8)"
        ),
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-mask-moved-with-another-samples-crop",
        "row": ROW_ALIGN,
        "file": "shardkit/loader/targetrows.py",
        "old": "inv[i : i + 1], (size, size))[0]",
        "new": "inv[(i + 1) % n : (i + 1) % n + 1], (size, size))[0]",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-used-box-by-input-position",  # after a failed decode the crops shift by one row
        "row": ROW_ALIGN,
        "file": "shardkit/loader/decode/worker.py",
        "old": "used[len(kept)] = box",
        "new": "used[i] = box",
        "tests": [BAD],
    },
    {
        "id": "targets-rows-of-the-first-samples-after-a-failed-decode",
        "row": ROW_ALIGN,
        "file": "shardkit/loader/batching.py",
        "old": "            [ok[i] for i in kept],\n",
        "new": "            ok[:n],\n",
        "tests": [BAD],
    },
    {
        "id": "targets-dropped-boxes-not-counted",
        "row": ROW_COUNT,
        "file": "shardkit/loader/batching.py",
        "old": 'counters.add("boxes_dropped", dropped)',
        "new": 'counters.add("boxes_dropped", 0)',
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-object-axis-not-trimmed",  # M stays the most objects given, not the most kept
        "row": ROW_COUNT,
        "file": "shardkit/loader/targetrows.py",
        "old": "m_kept = int(moved.count.max()) if n else 0",
        "new": "m_kept = moved.boxes.shape[1]",
        "tests": [FOLLOW],
    },
]
