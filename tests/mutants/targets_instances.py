"""Mutants of instance maps: ``shardkit/targets/instances.py`` (rows relabelled after a
drop), ``targets/geometry.py`` (warped nearest), ``loader/targetrows.py`` (the worker's crops, crowd regions),
``augment/target_moves.py`` (GpuAugment's cut runs), ``convert/segments.py`` (painted smaller on top),
``format/masks.py`` (stored as row + 1), ``targets/torchvision.py`` (Mask R-CNN's ``"masks"``).
Tests: ``tests/targets/test_instances.py``, ``tests/loader/test_instances_loader.py``,
``tests/convert/test_instances_coco.py``."""

ROW_FOLLOW = (
    "Instance masks: each pixel of an instance map shows the row of its object in that sample's boxes after every "
    "crop, flip, scale and GpuAugment op (nearest; a dropped box's or a crowd region's pixels -1)"
)
ROW_STORED = (
    "Instance masks: COCO --instances stores each object's segmentation, the smaller object on top, resized "
    "nearest, as a lossless 16-bit PNG of row + 1 (pycocotools' annToMask)"
)
ROW_TV = "Instance masks: to_torchvision gives one binary mask per kept box (instances == k), Mask R-CNN's 'masks'"

T = "tests/targets/test_instances.py::"
MOVE = T + "test_move_sends_each_pixel_to_the_nearest_source_and_its_object_to_its_new_row"
RELABEL = T + "test_kept_rows_and_relabel_equal_a_dict_lookup"
GPU = T + "test_gpu_augment_geometric_ops_keep_each_object_on_its_pixels"
CUT = T + "test_a_cut_run_drops_boxes_and_their_pixels_follow"
TV = T + "test_to_torchvision_masks_are_one_binary_mask_per_kept_box"
L = "tests/loader/test_instances_loader.py::"
LOADER = L + "test_instances_follow_the_crop_and_the_kept_boxes"
CROWD = L + "test_crowd_pixels_become_minus_one_and_the_rows_close_up"
C = "tests/convert/test_instances_coco.py::"
COCO = C + "test_instance_maps_match_pycocotools_painted_smaller_on_top_and_resized_nearest"
E2E = C + "test_instances_end_to_end_member_and_counts"

MUTANTS = [
    {
        "id": "inst-rows-not-remapped-after-a-drop",  # pixels keep their object's old row when earlier boxes drop
        "row": ROW_FOLLOW,
        "file": "shardkit/targets/instances.py",
        "old": "torch.where(keep, keep.long().cumsum(1) - 1,",
        "new": "torch.where(keep, torch.arange(keep.shape[1], device=keep.device).expand_as(keep),",
        "tests": [MOVE, RELABEL, LOADER],
    },
    {
        "id": "inst-crowd-pixels-left",  # crowd regions are not yielded as boxes, but their pixels keep a row
        "row": ROW_FOLLOW,
        "file": "shardkit/loader/targetrows.py",
        "old": "            yielded = yielded & ~as_stored.crowd\n",
        "new": "            pass\n",
        "tests": [CROWD],
    },
    {
        "id": "inst-bilinear-on-the-device",  # the ids interpolated: a pixel between rows 0 and 2 becomes row 1
        "row": ROW_FOLLOW,
        "file": "shardkit/targets/geometry.py",
        "old": 'out = F.grid_sample(src, grid, mode="nearest", padding_mode="zeros", align_corners=False)',
        "new": 'out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False).round()',
        "tests": [MOVE, GPU],
    },
    {
        "id": "inst-blended-in-the-worker",  # the worker's warp averages two neighbouring source pixels
        "row": ROW_FOLLOW,
        "file": "shardkit/loader/targetrows.py",
        "old": "inst[i] = warp_crop_mask(ids, inv[i], (size, size), NO_OBJECT)",
        "new": (
            "inst[i] = ((warp_crop_mask(ids, inv[i], (size, size), NO_OBJECT).int() + warp_crop_mask(ids, inv[i] + "
            "torch.tensor([[0.0, 0, 0.5], [0, 0, 0.5], [0, 0, 0]], dtype=inv.dtype), (size, size), NO_OBJECT).int())"
            " // 2).to(torch.int16)"
        ),
        "tests": [LOADER],
    },
    {
        "id": "inst-cut-runs-not-relabelled",  # GpuAugment with a cut: boxes dropped at a cut, pixels keep old rows
        "row": ROW_FOLLOW,
        "file": "shardkit/augment/target_moves.py",
        "old": "        rows = relabel(rows, kept_rows(keep))\n",
        "new": "",
        "tests": [CUT, GPU],
    },
    {
        "id": "inst-larger-on-top",  # the paint order reversed: a small object in front of a large one vanishes
        "row": ROW_STORED,
        "file": "shardkit/convert/segments.py",
        "old": "key=lambda k: (-len(regions[k]), k))",
        "new": "key=lambda k: (len(regions[k]), k))",
        "tests": [COCO],
    },
    {
        "id": "inst-annotation-order",  # painted in annotation order (the semantic mask's rule), not by size
        "row": ROW_STORED,
        "file": "shardkit/convert/segments.py",
        "old": "key=lambda k: (-len(regions[k]), k))",
        "new": "key=lambda k: k)",
        "tests": [COCO],
    },
    {
        "id": "inst-plus-one-lost-on-read",  # the stored value k + 1 read as row k + 1
        "row": ROW_STORED,
        "file": "shardkit/format/masks.py",
        "old": "    return (arr.astype(np.int32) - 1).astype(np.int16)",
        "new": "    return arr.astype(np.int16)",
        "tests": [COCO, LOADER],
    },
    {
        "id": "inst-plus-one-lost-on-write",  # row k written as k: object 0 is stored as "no object"
        "row": ROW_STORED,
        "file": "shardkit/format/masks.py",
        "old": "stored = np.ascontiguousarray(arr.astype(np.int32) + 1, dtype=np.uint16)",
        "new": "stored = np.ascontiguousarray(np.maximum(arr, 0), dtype=np.uint16)",
        "tests": [COCO, E2E, LOADER],
    },
    {
        "id": "inst-tv-masks-off-by-one",  # mask k built from row k + 1
        "row": ROW_TV,
        "file": "shardkit/targets/instances.py",
        "old": "    rows = torch.arange(count, device=instances.device, dtype=instances.dtype)",
        "new": "    rows = torch.arange(1, count + 1, device=instances.device, dtype=instances.dtype)",
        "tests": [TV],
    },
    {
        "id": "inst-verify-skips-the-map",  # verify says OK for an instance map the loader refuses
        "row": ROW_STORED,
        "file": "shardkit/ops/verify_split.py",
        "old": "            if smp.instances is not None:  # the loader's own rule",
        "new": "            if False:  # the loader's own rule",
        "tests": ["tests/format/test_targets_members.py::test_verify_reports_a_bad_instance_map_the_loader_skips"],
    },
]
