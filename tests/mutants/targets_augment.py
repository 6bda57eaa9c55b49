"""Mutants of GpuAugment's target path: ``shardkit/augment/target_moves.py`` (a fused run moves its
targets once, by the run's own map; cuts inside a run), ``shardkit/augment/pipeline.py`` (every geometric stage
moves the targets, with the pipeline's ``min_visible`` and ``flip_pairs``; drops counted on the device). Tests:
``tests/augment/test_targets_scenes.py`` (the scenes oracle), ``tests/augment/test_targets_api.py``,
``tests/augment/test_targets_torchvision.py``."""

ROW_FOLLOW = (
    "GPU augmentation with targets: every geometric op moves boxes, masks and keypoints with the pixels (the scenes "
    "oracle; torchvision's tv_tensors within 1 px)"
)
ROW_OPTIONS = "GPU augmentation with targets: min_visible and flip_pairs apply, drops are counted, dict batches follow"
ROW_NOSYNC = "GPU augmentation: a GpuAugment call never reads a value back to the host"

S = "tests/augment/test_targets_scenes.py::"
SCENES = S + "test_every_geometric_op_moves_boxes_masks_and_keypoints_with_the_pixels"
MINVIS = S + "test_min_visible_drops_and_counts_partly_cropped_boxes"
A = "tests/augment/test_targets_api.py::"
RUNS = A + "test_each_run_moves_targets_by_its_own_map"
DICT = A + "test_a_dict_batch_is_the_images_and_targets_call"
NOSYNC = A + "test_a_whole_call_with_targets_reads_nothing_back_to_the_host"
TV = "tests/augment/test_targets_torchvision.py::test_each_geometric_op_agrees_with_torchvision_on_tv_tensors"

F = "shardkit/augment/target_moves.py"
P = "shardkit/augment/pipeline.py"

MUTANTS = [
    {
        "id": "targets-moved-twice-for-a-fused-run",
        "row": ROW_FOLLOW,
        "file": F,
        "old": "        return move(targets, chain(matrices, device)[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)",
        "new": (
            "        once = move(targets, chain(matrices, device)[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)[0]\n"
            "        return move(once, chain(matrices, device)[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)"
        ),
        "tests": [SCENES, RUNS, TV],
    },
    {
        "id": "targets-moved-by-the-runs-first-op-only",
        "row": ROW_FOLLOW,
        "file": F,
        "old": "        return move(targets, chain(matrices, device)[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)",
        "new": "        return move(targets, matrices[0], sizes[-1], min_visible=min_visible, flip_pairs=flip_pairs)",
        "tests": [SCENES, RUNS],
    },
    {
        "id": "targets-moved-with-another-runs-map",  # the first run's maps reused by every later run
        "row": ROW_FOLLOW,
        "file": P,
        "old": "targets, lost = move_run(targets, mats, stage.sizes, stage.cuts, **moves)",
        "new": "targets, lost = move_run(targets, self.__dict__.setdefault('_first_mats', mats), stage.sizes, stage.cuts, **moves)",
        "tests": [SCENES, RUNS],
    },
    {
        "id": "targets-fixed-crop-forgets-targets",  # the slicing fast path moves the pixels only
        "row": ROW_FOLLOW,
        "file": P,
        "old": "targets, lost = move_crop(targets, stage.crop, **moves)",
        "new": "lost = torch.zeros_like(targets.count)",
        "tests": [SCENES, TV],
    },
    {
        "id": "targets-cut-inside-a-run-ignored",  # a rotation after a crop: objects outside the crop come back
        "row": ROW_FOLLOW,
        "file": F,
        "old": "    if not cuts:\n",
        "new": "    if True:\n",
        "tests": [SCENES],
    },
    {
        "id": "targets-mask-ignores-the-cut",
        "row": ROW_FOLLOW,
        "file": F,
        "old": "    for k in cuts:\n",
        "new": "    for k in []:\n",
        "tests": [SCENES],
    },
    {
        "id": "targets-mask-with-the-first-ops-map",
        "row": ROW_FOLLOW,
        "file": F,
        "old": "    mask = warp_masks(targets.mask, to_canvas[0], sizes[-1])",
        "new": "    mask = warp_masks(targets.mask, matrices[0], sizes[-1])",
        "tests": [SCENES],
    },
    {
        "id": "targets-segment-clipped-to-the-output",  # each segment clipped to the final size, not its canvas
        "row": ROW_FOLLOW,
        "file": F,
        "old": "stepped, keep = moved_rows(moved, segment, sizes[b],",
        "new": "stepped, keep = moved_rows(moved, segment, sizes[-1],",
        "tests": [SCENES],
    },
    {
        "id": "targets-flip-pairs-not-passed",
        "row": ROW_OPTIONS,
        "file": P,
        "old": '"flip_pairs": self.flip_pairs or ()}',
        "new": '"flip_pairs": ()}',
        "tests": [SCENES],
    },
    {
        "id": "targets-min-visible-not-passed",
        "row": ROW_OPTIONS,
        "file": P,
        "old": 'moves = {"min_visible": self.min_visible,',
        "new": 'moves = {"min_visible": 0.0,',
        "tests": [MINVIS],
    },
    {
        "id": "targets-drops-not-counted",
        "row": ROW_OPTIONS,
        "file": P,
        "old": "            self._count(self._dropped, dropped.sum())",
        "new": "            pass",
        "tests": [DICT],
    },
    {
        "id": "targets-dict-fields-not-replaced",
        "row": ROW_OPTIONS,
        "file": F,
        "old": "    out = with_targets(batch, moved)",
        "new": "    out = dict(batch)",
        "tests": [DICT],
    },
    {
        "id": "targets-drops-counted-on-the-host",
        "row": ROW_NOSYNC,
        "file": P,
        "old": "            self._count(self._dropped, dropped.sum())",
        "new": "            self._count(self._dropped, torch.tensor(int(dropped.sum())))",
        "tests": [NOSYNC],
    },
]
