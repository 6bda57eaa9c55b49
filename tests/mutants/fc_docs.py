"""Mutants of a new user's first hour: ``shardkit sample-data --format coco|voc|yolo|masks``
(``shardkit/demo/sources.py``, ``shardkit/cli/cmd_sample_data.py``), the demo's closing lines
(``shardkit/cli/cmd_demo.py``) and the catdog example's work folder. Tests: ``tests/cli/test_first_hour.py``."""

ROW_SAMPLE = (
    "Sample data: sample-data --format coco|voc|yolo|masks writes scenes whose converted boxes and masks equal the "
    "scene generator's, and prints the command that converts them"
)
ROW_FIRST = (
    "First hour: the Quick start runs as written and ends with a bench result; the demo says where its files are"
)

T = "tests/cli/test_first_hour.py::"
SOURCE = T + "test_sample_data_source_converts_to_the_scenes"
F_SRC = "shardkit/demo/sources.py"
F_CLI = "shardkit/cli/cmd_sample_data.py"

MUTANTS = [
    {
        "id": "fc-coco-bbox-as-corners",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": '"bbox": [x0, y0, x1 - x0, y1 - y0],',
        "new": '"bbox": [x0, y0, x1, y1],',
        "tests": [SOURCE],
    },
    {
        "id": "fc-coco-category-ids-from-zero",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": '"category_id": c,',
        "new": '"category_id": c - 1 if c > 1 else c,',
        "tests": [SOURCE],
    },
    {
        "id": "fc-voc-boxes-zero-based",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": "<bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>",
        "new": "<bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>",
        "tests": [SOURCE],
    },
    {
        "id": "fc-yolo-class-not-shifted",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": 'f"{c - 1} {(x0 + x1) / 2 / w:.8f}',
        "new": 'f"{c % (len(CLASSES) - 1)} {(x0 + x1) / 2 / w:.8f}',
        "tests": [SOURCE],
    },
    {
        "id": "fc-yolo-centre-rounded",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": "{(x0 + x1) / 2 / w:.8f} {(y0 + y1) / 2 / h:.8f}",
        "new": "{(x0 + x1) // 2 / w:.8f} {(y0 + y1) // 2 / h:.8f}",
        "tests": [SOURCE],
    },
    {
        "id": "fc-yolo-width-by-height",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": "{(x1 - x0) / w:.8f} {(y1 - y0) / h:.8f}",
        "new": "{(x1 - x0) / h:.8f} {(y1 - y0) / w:.8f}",
        "tests": [SOURCE],
    },
    {
        "id": "fc-masks-classes-without-background",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": 'f.write("".join(name + "\\n" for name in CLASSES))',
        "new": 'f.write("".join(name + "\\n" for name in CLASSES[1:]))',
        "tests": [SOURCE],
    },
    {
        "id": "fc-scene-size-swapped",
        "row": ROW_SAMPLE,
        "file": F_CLI,
        "old": "size=args.size or (160, 120)",
        "new": "size=(args.size or (160, 120))[::-1]",
        "tests": [SOURCE],
    },
    {
        "id": "fc-printed-command-misses-masks",
        "row": ROW_SAMPLE,
        "file": F_SRC,
        "old": 'return ["convert", f"coco:{os.path.join(root, \'annotations.json\')}", dest, "--masks"]',
        "new": 'return ["convert", f"coco:{os.path.join(root, \'annotations.json\')}", dest]',
        "tests": [SOURCE],
    },
    {
        "id": "fc-scenes-seed-ignored",
        "row": ROW_SAMPLE,
        "file": F_CLI,
        "old": "size=args.size or (160, 120), seed=args.seed,",
        "new": "size=args.size or (160, 120), seed=0,",
        "tests": [SOURCE],
    },
    {
        "id": "fc-imagefolder-options-accepted-for-scenes",
        "row": ROW_SAMPLE,
        "file": F_CLI,
        "old": "    if given:\n",
        "new": "    if False:\n",
        "tests": [T + "test_sample_data_options_of_another_format_are_one_line_errors"],
    },
    {
        "id": "fc-demo-names-the-wrong-shards",
        "row": ROW_FIRST,
        "file": "shardkit/cli/cmd_demo.py",
        "old": 'os.path.join(workdir, "images"), os.path.join(workdir, "shards")',
        "new": 'os.path.join(workdir, "images"), os.path.join(workdir, "catdog-shards")',
        "tests": [T + "test_demo_ends_with_where_its_files_are_and_what_to_run_next"],
    },
    {
        "id": "fc-catdog-shards-in-the-quick-starts-folder",
        "row": ROW_FIRST,
        "file": "examples/train_catdog.py",
        "old": 'args.shards = args.shards or os.path.join(args.workdir, "shards")',
        "new": 'args.shards = args.shards or "catdog-shards"',
        "tests": [T + "test_catdog_example_defaults_to_its_own_folder_apart_from_the_quick_start"],
    },
    {
        "id": "fc-quick-start-data-too-small-to-bench",
        "row": ROW_FIRST,
        "file": "README.md",
        "old": "--classes 2 --per-class 800 --val-per-class 100",
        "new": "--classes 2 --per-class 100 --val-per-class 100",
        "tests": [T + "test_quick_start_as_written_ends_with_a_bench_result"],
    },
    {
        "id": "fc-detection-guide-convert-line-drifts",
        "row": ROW_SAMPLE,
        "file": "docs/guides/detection.md",
        "old": "shardkit convert coco:scenes/annotations.json scenes-shards --masks",
        "new": "shardkit convert coco:scenes/annotations.json scenes-shards",
        "tests": [T + "test_detection_guide_starts_from_sample_data_and_the_command_it_prints"],
    },
]
