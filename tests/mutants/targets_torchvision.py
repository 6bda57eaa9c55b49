"""Mutants of the torchvision bridge: ``shardkit/targets/torchvision.py`` (``to_torchvision``,
``as_tv_tensors``, ``from_tv_tensors``);
and of the benchmark's baseline (``tools/bench_detection.py``: the two sides must deliver the same batches).
Tests: ``tests/targets/test_torchvision.py``, ``tests/integrations/test_detection_examples.py``."""

ROW_MODELS = (
    "torchvision: to_torchvision gives each sample's boxes, labels, keypoints and semantic mask without padding "
    "rows, and its images as floats in [0, 1] (against a per-sample reference)"
)
ROW_TV = (
    "torchvision: as_tv_tensors / from_tv_tensors round-trip a batch exactly (BoundingBoxes XYXY with the image's "
    "canvas_size, Mask, KeyPoints + visibility), and torchvision.transforms.v2's kernels move its boxes and masks "
    "like shardkit's one geometry rule"
)

T = "tests/targets/test_torchvision.py::"
PER_SAMPLE = T + "test_to_torchvision_is_each_samples_objects_without_padding"
ROUND_TRIP = T + "test_tv_tensors_round_trip_exactly"
KERNELS = T + "test_v2_kernels_move_boxes_and_masks_like_shardkits_rule"

F = "shardkit/targets/torchvision.py"
ROW_BENCH = (
    "Benchmarks: tools/bench_detection.py's torchvision and shardkit pipelines deliver the same batches (fields, "
    "shapes, dtypes, box counts, boxes inside the image and not empty), checked on each run's first batch"
)
BENCH = "tests/integrations/test_detection_examples.py::test_bench_detection_quick"

MUTANTS = [
    {
        "id": "tv-padding-rows-sent-to-the-model",  # boxes [0, 0, 0, 0] with label -1: a degenerate-box error, or worse
        "row": ROW_MODELS,
        "file": F,
        "old": 'd = {"boxes": t.boxes[i, :n], "labels": t.labels[i, :n]}',
        "new": 'd = {"boxes": t.boxes[i], "labels": t.labels[i]}',
        "tests": [PER_SAMPLE],
    },
    {
        "id": "tv-images-not-scaled-to-unit-range",  # 0..255 floats: the model normalises them once more
        "row": ROW_MODELS,
        "file": F,
        "old": "floats = images.to(dtype).div_(255) if",
        "new": "floats = images.to(dtype) if",
        "tests": [PER_SAMPLE],
    },
    {
        "id": "tv-every-sample-gets-the-first-mask",
        "row": ROW_MODELS,
        "file": F,
        "old": '            d["mask"] = t.mask[i]\n        targets.append(d)',
        "new": '            d["mask"] = t.mask[0]\n        targets.append(d)',
        "tests": [PER_SAMPLE],
    },
    {
        "id": "tv-canvas-size-as-width-height",  # torchvision's canvas_size is (H, W): flips of non-square images break
        "row": ROW_TV,
        "file": F,
        "old": 'd["boxes"] = tv_tensors.BoundingBoxes(t.boxes[i, :n], format="XYXY", canvas_size=(h, w))',
        "new": 'd["boxes"] = tv_tensors.BoundingBoxes(t.boxes[i, :n], format="XYXY", canvas_size=(w, h))',
        "tests": [ROUND_TRIP, KERNELS],
    },
    {
        "id": "tv-padding-label-zero-not-minus-one",  # padding rows read as background objects
        "row": ROW_TV,
        "file": F,
        "old": "labels = torch.full((n, m), -1, dtype=torch.int64)",
        "new": "labels = torch.zeros((n, m), dtype=torch.int64)",
        "tests": [ROUND_TRIP],
    },
    {
        "id": "tv-keypoint-visibility-lost",  # hidden and unlabelled keypoints come back as visible
        "row": ROW_TV,
        "file": F,
        "old": "kp[i, :c, :, 2] = 2.0 if vis is None else vis",
        "new": "kp[i, :c, :, 2] = 2.0",
        "tests": [ROUND_TRIP],
    },
    {
        "id": "tv-count-off-by-one",  # one padding row leaks into every sample that has room for it
        "row": ROW_TV,
        "file": F,
        "old": "counts = [int(c) for c in t.count.tolist()]",
        "new": "counts = [int(c) + 1 for c in t.count.tolist()]",
        "tests": [ROUND_TRIP, PER_SAMPLE],
    },
    {
        "id": "bench-collate-pads-labels-with-zero",  # padding rows read as background objects
        "row": ROW_BENCH,
        "file": "tools/bench_detection.py",
        "old": "labels = torch.full((len(samples), m), -1, dtype=torch.int64)",
        "new": "labels = torch.zeros((len(samples), m), dtype=torch.int64)",
        "tests": [BENCH],
    },
]
