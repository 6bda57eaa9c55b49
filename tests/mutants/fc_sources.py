"""Mutants of what a new user meets converting sources: a split whose files are all missing when read, YOLO labels
rounded at their printed precision, YOLO polygon boxes, one overlap rule for COCO masks and instance maps (and its
place in the fingerprint), duplicate paths, ``--no-label`` on class folders, two conversions racing into one DEST.
Tests: ``tests/convert/test_first_contact_sources.py``."""

T = "tests/convert/test_first_contact_sources.py::"
ROW_EMPTY = (
    "Conversion input: a split with no sample is reported with its skips and not written; every split empty is one "
    "line, nothing written"
)
ROW_YOLO = (
    "Conversion input: YOLO (normalised boxes on the upright image, names from the yaml or classes.txt; every line "
    "accounted for)"
)
ROW_SEG = "Conversion: COCO segmentations (RLE codec as pycocotools; polygons cover the pixels whose centre they hold)"
ROW_LISTING = "Conversion input: listings (every row one sample with its label, or skipped with its reason)"
ROW_DEST = "Conversion: DEST holds one conversion; a task or merge that meets another names it"

MUTANTS = [
    {
        "id": "fc-split-empty-at-read-written",
        "row": ROW_EMPTY,
        "file": "shardkit/convert/job.py",
        "old": "if num_tasks == 1 and not job.samples and job.base is None:",
        "new": "if False:",
        "tests": [T + "test_listing_files_missing_at_read_time_write_no_empty_split"],
    },
    {
        "id": "fc-every-split-empty-at-read-exits-zero",
        "row": ROW_EMPTY,
        "file": "shardkit/convert/job.py",
        "old": "    if num_tasks == 1 and not any(r.written for r in results):",
        "new": "    if False:",
        "tests": [T + "test_coco_with_a_wrong_root_exits_non_zero_writes_nothing_and_names_the_root"],
    },
    {
        "id": "fc-yolo-rounding-counted-clipped",
        "row": ROW_YOLO,
        "file": "shardkit/convert/scan/yolo.py",
        "old": "        tol = 0.75 * u * (1 + 1e-9)",
        "new": "        tol = 0.0",
        "tests": [T + "test_yolo_boxes_inside_the_image_printed_at_any_precision_are_never_clipped"],
    },
    {
        "id": "fc-yolo-tolerance-without-bound",
        "row": ROW_YOLO,
        "file": "shardkit/convert/scan/yolo.py",
        "old": "    return (0.0 if -tol <= lo < 0.0 else lo), (1.0 if 1.0 < hi <= 1.0 + tol else hi)",
        "new": "    return max(lo, 0.0), min(hi, 1.0)",
        "tests": [T + "test_yolo_boxes_outside_by_more_than_the_precision_are_clipped"],
    },
    {
        "id": "fc-yolo-polygon-centre-from-the-centroid",
        "row": ROW_YOLO,
        "file": "shardkit/convert/scan/yolo.py",
        "old": "        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)  # the box around the points: their extent",
        "new": (
            "        cx, cy, bw, bh = sum(xs) / len(xs), sum(ys) / len(ys), max(xs) - min(xs), max(ys) - min(ys)\n"
            "        x0, x1, y0, y1 = cx - bw / 2, cx + bw / 2, cy - bh / 2, cy + bh / 2"
        ),
        "tests": [T + "test_yolo_polygon_line_box_is_the_extent_of_its_points"],
    },
    {
        "id": "fc-mask-painted-in-annotation-order",
        "row": ROW_SEG,
        "file": "shardkit/convert/segments.py",
        "old": "    rows = instance_map(segments, width, height)\n    return values[rows]",
        "new": (
            "    out = np.zeros((height, width), np.uint8)\n"
            "    for seg in segments:\n"
            "        out[segment_region(seg, width, height)] = IGNORE if seg.crowd else seg.label\n"
            "    return out"
        ),
        "tests": [
            T + "test_coco_mask_and_instances_name_the_same_object_on_every_pixel",
            T + "test_coco_a_small_object_listed_first_stays_on_top_in_the_mask",
        ],
    },
    {
        "id": "fc-overlap-rule-not-in-the-fingerprint",
        "row": ROW_SEG,
        "file": "shardkit/convert/journal.py",
        "old": '        more += [{"overlap": self.overlap}] if self.overlap else []',
        "new": "        more += []",
        "tests": [T + "test_a_half_done_conversion_painted_in_annotation_order_is_not_resumed_into"],
    },
    {
        "id": "fc-same-path-written-twice-called-a-symlink",
        "row": ROW_LISTING,
        "file": "shardkit/convert/scan/listing.py",
        "old": "            same_path = plain == other_plain",
        "new": "            same_path = False",
        "tests": [T + "test_a_path_listed_relative_and_absolute_is_a_duplicate_path_not_a_symlink"],
    },
    {
        "id": "fc-no-label-ignored-on-class-folders",
        "row": ROW_LISTING,
        "file": "shardkit/convert/scan/__init__.py",
        "old": "            _drop_labels(source)\n",
        "new": "            pass\n",
        "tests": [T + "test_no_label_on_an_imagefolder_stores_no_label"],
    },
    {
        "id": "fc-losing-task-reports-done",
        "row": ROW_DEST,
        "file": "shardkit/convert/job.py",
        "old": "        job.check_owner(res.shards_written)\n",
        "new": "",
        "tests": [T + "test_two_conversions_racing_into_one_dest_name_the_owner_in_the_losing_task_and_in_merge"],
    },
    {
        "id": "fc-merge-calls-foreign-shards-not-converted",
        "row": ROW_DEST,
        "file": "shardkit/convert/merge.py",
        "old": "    if foreign:",
        "new": "    if False:",
        "tests": [T + "test_two_conversions_racing_into_one_dest_name_the_owner_in_the_losing_task_and_in_merge"],
    },
]
