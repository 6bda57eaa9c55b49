"""Mutants of the conversion of detection and segmentation targets (the convert side): the encode path
(``shardkit/convert/targets.py``: boxes, keypoints and masks moved by the resize's inverse map), the accounting
of inputs and annotations (job, merge, sources), the segmentation folder pairs (``scan/maskdir.py``), Hugging
Face objects/masks (``scan/hf_targets.py``), resume and merge. Tests: ``tests/convert/test_targets_*.py``."""

ROW_GEOMETRY = (
    "Conversion targets: the resize moves boxes and keypoints exactly (scaled per axis) and masks nearest, "
    "masks stored losslessly"
)
ROW_ACCOUNT = "Conversion targets: every input and every annotation is accounted for (written, clipped or skipped)"
ROW_SOURCES = "Conversion targets: mask folders and Hugging Face objects/masks are read as their reference reads them"
ROW_PIPELINE = "Conversion targets: tasks, merge, overflow, --val-fraction and resume keep every target"

E = "tests/convert/test_targets_encode.py::"
S = "tests/convert/test_targets_sources.py::"
ENCODE = E + "test_encode_moves_boxes_keypoints_and_mask_exactly"
PIPE = E + "test_tasks_merge_overflow_and_resume_keep_every_target"
PAIRS = S + "test_mask_dir_pairs_round_trip"
HF = S + "test_hf_objects_and_masks_round_trip"
T = "shardkit/convert/targets.py"

MUTANTS = [
    {
        "id": "targets-scale-x-by-sy",
        "row": ROW_GEOMETRY,
        "file": T,
        "old": "ax, ay = iw / ow, ih / oh",
        "new": "ax, ay = ih / oh, ih / oh",
        "tests": [ENCODE, HF],
    },
    {
        "id": "targets-mask-resized-bilinear",
        "row": ROW_GEOMETRY,
        "file": T,
        "old": 'warped = warp_masks(torch.from_numpy(np.require(mask, np.uint8, ["C", "W"]))[None], inv, size)[0].numpy()',
        "new": (
            "warped = torch.nn.functional.interpolate(torch.from_numpy(mask.astype(np.float32))[None, None], "
            'size=size, mode="bilinear", align_corners=False)[0, 0].round().to(torch.uint8).numpy()'
        ),
        "tests": [ENCODE, PAIRS],
    },
    {
        "id": "targets-keypoints-not-scaled",
        "row": ROW_GEOMETRY,
        "file": T,
        "old": "kp = None if out.keypoints is None else out.keypoints[0, :n].numpy()",
        "new": "kp = None if out.keypoints is None else t.keypoints[0, :n].numpy()",
        "tests": [ENCODE, PIPE],
    },
    {
        "id": "targets-outside-box-not-counted",
        "row": ROW_ACCOUNT,
        "file": T,
        "old": "            moved[OUTSIDE_IMAGE] = dropped\n",
        "new": "            pass\n",
        "tests": [ENCODE, HF],
    },
    {
        "id": "targets-mask-value-bound-off-by-one",  # value == number of classes let through
        "row": ROW_ACCOUNT,
        "file": T,
        "old": "bad = (mask >= spec.num_classes) & (mask != IGNORE)",
        "new": "bad = (mask > spec.num_classes) & (mask != IGNORE)",
        "tests": [S + "test_mask_classes_file_and_bad_values"],
    },
    {
        "id": "targets-missing-mask-skip-not-recorded",
        "row": ROW_ACCOUNT,
        "file": "shardkit/convert/scan/maskdir.py",
        "old": 's.skipped.append((rel, SkipReason.MISSING_MASK, f"no mask {mpath} for this image"))',
        "new": "pass",
        "tests": [PAIRS],
    },
    {
        "id": "targets-skipped-sample-loses-its-annotations",
        "row": ROW_ACCOUNT,
        "file": "shardkit/convert/splitjob.py",
        "old": "moved[IMAGE_SKIPPED] = moved.get(IMAGE_SKIPPED, 0) + len(it.objects)",
        "new": "pass",
        "tests": [PIPE, HF],
    },
    {
        "id": "targets-resume-ignores-a-replaced-mask",  # a swapped mask file resumed over: stale masks
        "row": ROW_PIPELINE,
        "file": T,
        "old": 'out["mask"] = [item.mask, getattr(item, "mask_size", 0)]',
        "new": 'out["mask"] = [item.mask]',
        "tests": [S + "test_resume_notices_a_replaced_mask"],
    },
    {
        "id": "targets-merge-reads-overflow-without-keypoints",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/merge.py",
        "old": "rule = SampleRule(tuple(p.fields), len(p.classes) or None, len(p.targets) or None, len(p.keypoint_names))",
        "new": "rule = SampleRule(tuple(p.fields), len(p.classes) or None, len(p.targets) or None)",
        "tests": [PIPE],
    },
    {
        "id": "targets-merge-ignores-other-keypoints",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/merge.py",
        "old": "other = next((r for r in records if r is not None and r.keypoint_names != p.keypoint_names), None)",
        "new": "other = None",
        "tests": [E + "test_merge_refuses_parts_with_other_keypoints"],
    },
    {
        "id": "targets-val-fraction-ignores-boxes",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/scan/valsplit.py",
        "old": "        return (int(f.objects.labels[0]),)\n",
        "new": "        return classes\n",
        "tests": [E + "test_val_fraction_stratifies_by_first_box_and_splits_the_counts"],
    },
    {
        "id": "targets-val-split-without-annotations",
        "row": ROW_ACCOUNT,
        "file": "shardkit/convert/scan/valsplit.py",
        "old": 'v.annotations = {"kept": moved}',
        "new": "v.annotations = {}",
        "tests": [E + "test_val_fraction_stratifies_by_first_box_and_splits_the_counts"],
    },
    {
        "id": "targets-hf-bbox-read-as-xyxy",
        "row": ROW_SOURCES,
        "file": "shardkit/convert/scan/hf_targets.py",
        "old": 'return [x, y, x + w, y + h], ""',
        "new": 'return [x, y, max(w, x + 1), max(h, y + 1)], ""',
        "tests": [HF],
    },
    {
        "id": "targets-hf-category-not-shifted-past-background",
        "row": ROW_SOURCES,
        "file": "shardkit/convert/scan/hf_targets.py",
        "old": "labels.append(label + 1)",
        "new": "labels.append(label)",
        "tests": [HF],
    },
]
