"""Mutants of the detection sources: ``coco:``, ``voc:``, ``yolo:`` scanners
(``shardkit/convert/scan/{coco,voc,yolo,detection}.py``) and the COCO segmentation codec / rasteriser
(``shardkit/convert/segments.py``). Tests: ``tests/convert/test_{coco,voc,yolo,segments}.py``."""

ROW_COCO = (
    "Conversion input: COCO (boxes, classes, crowd flags, keypoints and masks as pycocotools reads them; every "
    "annotation kept, clipped or skipped with its reason)"
)
ROW_VOC = (
    "Conversion input: Pascal VOC (1-based inclusive boxes, difficult kept as crowd; every annotation accounted for)"
)
ROW_YOLO = (
    "Conversion input: YOLO (normalised boxes on the upright image, names from the yaml or classes.txt; every line "
    "accounted for)"
)
ROW_SEG = "Conversion: COCO segmentations (RLE codec as pycocotools; polygons cover the pixels whose centre they hold)"

COCO = "tests/convert/test_coco.py::test_coco_scan_matches_pycocotools"
COCO_GAPS = (
    "tests/convert/test_coco.py::test_category_ids_with_gaps_become_contiguous_classes_and_person_keypoints_pair_up"
)
VOC = "tests/convert/test_voc.py::test_voc_scan_matches_the_scenes"
VOC_MASKS = (
    "tests/convert/test_voc.py::test_masks_come_from_segmentation_class_pngs_and_an_image_without_one_is_accounted"
)
YOLO = "tests/convert/test_yolo.py::test_yolo_scan_matches_the_scenes"
YOLO_BAD = "tests/convert/test_yolo.py::test_an_unreadable_image_and_a_missing_label_file"
T = "tests/convert/test_segments.py::"
RLE = T + "test_rle_codec_matches_pycocotools"
RECT = T + "test_rectangles_cover_exactly_the_pixels_whose_centre_they_hold"
POLY = T + "test_polygon_mask_matches_pycocotools_but_along_the_outline"
PAINT = T + "test_semantic_mask_paints_in_order_crowds_as_ignore"

F_COCO = "shardkit/convert/scan/coco.py"
F_VOC = "shardkit/convert/scan/voc.py"
F_YOLO = "shardkit/convert/scan/yolo.py"
F_DET = "shardkit/convert/scan/detection.py"
F_SEG = "shardkit/convert/segments.py"

MUTANTS = [
    {
        "id": "coco-xywh-read-as-xyxy",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": "place_box(x, y, x + w, y + h, im[",
        "new": "place_box(x, y, w, h, im[",
        "tests": [COCO],
    },
    {
        "id": "coco-category-id-used-as-class-index",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": 'im["objs"].append((box, index[cat], bool(crowd), kp, seg))',
        "new": 'im["objs"].append((box, cat, bool(crowd), kp, seg))',
        "tests": [COCO, COCO_GAPS],
    },
    {
        "id": "coco-categories-in-listed-order",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": 'order = sorted(cats, key=lambda c: (isinstance(c["id"], str), c["id"]))',
        "new": "order = list(cats)",
        "tests": [COCO, COCO_GAPS],
    },
    {
        "id": "coco-degenerate-box-dropped-uncounted",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": "            tally.add(DEGENERATE_BOX)\n",
        "new": "",
        "tests": [COCO],
    },
    {
        "id": "coco-unknown-image-dropped-uncounted",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": "            tally.add(NO_IMAGE)\n",
        "new": "",
        "tests": [COCO],
    },
    {
        "id": "coco-crowd-painted-as-its-class",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": 'a.get("segmentation"), index[cat], bool(crowd),',
        "new": 'a.get("segmentation"), index[cat], False,',
        "tests": [COCO],
    },
    {
        "id": "coco-keypoint-outside-the-image-stays-visible",
        "row": ROW_COCO,
        "file": F_COCO,
        "old": "            v = 0.0\n",
        "new": "            pass\n",
        "tests": [COCO],
    },
    {
        "id": "boxes-reaching-outside-not-clipped",
        "row": ROW_COCO,
        "file": F_DET,
        "old": "c = [max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), min(y1, float(height))]",
        "new": "c = [x0, y0, x1, y1]",
        "tests": [COCO, VOC, YOLO],
    },
    {
        "id": "clipped-boxes-counted-as-kept",
        "row": ROW_COCO,
        "file": F_DET,
        "old": "return (CLIPPED if c != [x0, y0, x1, y1] else KEPT), c",
        "new": "return KEPT, c",
        "tests": [COCO, VOC, YOLO],
    },
    {
        "id": "voc-boxes-read-as-zero-based",
        "row": ROW_VOC,
        "file": F_VOC,
        "old": "[edges[0] - 1, edges[1] - 1, edges[2], edges[3]]",
        "new": "[edges[0], edges[1], edges[2], edges[3]]",
        "tests": [VOC],
    },
    {
        "id": "voc-difficult-objects-not-crowd",
        "row": ROW_VOC,
        "file": F_VOC,
        "old": "crowd.append(difficult)",
        "new": "crowd.append(False)",
        "tests": [VOC],
    },
    {
        "id": "voc-standard-names-renumbered-by-what-is-present",
        "row": ROW_VOC,
        "file": F_VOC,
        "old": 'classes = ["background", *(VOC_CLASSES if standard else names)]',
        "new": 'classes = ["background", *names]',
        "tests": [VOC, VOC_MASKS],
    },
    {
        "id": "voc-image-without-mask-uncounted",
        "row": ROW_VOC,
        "file": F_VOC,
        "old": "                tally.add(NO_MASK, len(objs))\n",
        "new": "",
        "tests": [VOC_MASKS],
    },
    {
        "id": "yolo-normalised-by-the-wrong-side",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "place_box(x0 * width, y0 * height, x1 * width, y1 * height, width, height)",
        "new": "place_box(x0 * height, y0 * width, x1 * height, y1 * width, width, height)",
        "tests": [YOLO],
    },
    {
        "id": "yolo-w-and-h-swapped",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "        cx, cy, w, h = nums[1:]\n",
        "new": "        cx, cy, h, w = nums[1:]\n",
        "tests": [YOLO],
    },
    {
        "id": "yolo-exif-orientation-ignored",
        "row": ROW_YOLO,
        "file": F_DET,
        "old": "return (h, w) if turned else (w, h)",
        "new": "return (w, h)",
        "tests": [YOLO],
    },
    {
        "id": "yolo-class-not-shifted-past-background",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "labels.append(cls + 1)",
        "new": "labels.append(cls)",
        "tests": [YOLO],
    },
    {
        "id": "yolo-class-index-equal-to-count-accepted",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "if not 0 <= cls < k:",
        "new": "if not 0 <= cls <= k:",
        "tests": [YOLO],
    },
    {
        "id": "yolo-bad-line-dropped-uncounted",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "            tally.add(reason)\n",
        "new": "",
        "tests": [YOLO],
    },
    {
        "id": "yolo-orphan-label-files-uncounted",
        "row": ROW_YOLO,
        "file": F_YOLO,
        "old": "tally.add(NO_IMAGE, _count_lines(lab))",
        "new": "pass",
        "tests": [YOLO],
    },
    {
        "id": "rle-delta-from-the-second-run",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "        if len(out) > 2:\n",
        "new": "        if len(out) > 1:\n",
        "tests": [RLE],
    },
    {
        "id": "rle-decoded-row-major",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "return flat.reshape(w, h).T",
        "new": "return flat.reshape(h, w)",
        "tests": [RLE],
    },
    {
        "id": "rle-string-written-without-deltas",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "x = int(r) - (int(runs[i - 2]) if i > 2 else 0)",
        "new": "x = int(r)",
        "tests": [RLE],
    },
    {
        "id": "polygon-columns-at-pixel-corners",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "np.ceil(x[rows, cols] - 0.5)",
        "new": "np.ceil(x[rows, cols])",
        "tests": [RECT],
    },
    {
        "id": "polygon-rows-at-pixel-corners",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "yc = np.arange(height, dtype=np.float64)[:, None] + 0.5",
        "new": "yc = np.arange(height, dtype=np.float64)[:, None]",
        "tests": [RECT],
    },
    {
        "id": "polygons-of-an-object-intersected",
        "row": ROW_SEG,
        "file": F_SEG,
        "old": "out |= (np.cumsum(",
        "new": "out &= (np.cumsum(",
        "tests": [RECT, POLY, PAINT, COCO],
    },
]
