"""Mutants of the one ending of a scanned split (``SplitSource.close`` in ``shardkit/convert/scan/source.py``) as
the class folder, Pascal VOC and Hugging Face objects scanners reach it, and of the annotation tally they share
(``Tally`` in ``shardkit/convert/scan/detection.py``). Tests: ``tests/convert/scan/test_close.py``."""

ROW = (
    "Conversion input: every kind of SRC ends each split by one rule (files in relpath order, skips sorted) and "
    "counts every annotation once, listing only the outcomes that happened"
)

T = "tests/convert/scan/test_close.py::"
FOLDERS = T + "test_class_folder_splits_skips_are_sorted_with_the_files_beside_the_split_folders"
VOC = T + "test_voc_split_lists_files_and_skips_are_in_path_order"
HF = T + "test_hf_objects_split_counts_every_box_once"

MUTANTS = [
    {
        "id": "close-skips-unsorted",
        "row": ROW,
        "file": "shardkit/convert/scan/source.py",
        "old": "        self.skipped.sort()\n",
        "new": "",
        "tests": [FOLDERS, VOC],
    },
    {
        "id": "voc-split-ended-by-hand-skips-in-id-order",
        "row": ROW,
        "file": "shardkit/convert/scan/voc.py",
        "old": "        out.annotations = tally.as_dict()\n        out.close(classes)\n",
        "new": "        out.annotations = tally.as_dict()\n        out.files.sort(key=lambda f: f.relpath)\n",
        "tests": [VOC],
    },
    {
        "id": "folders-files-beside-the-splits-added-after-closing",
        "row": ROW,
        "file": "shardkit/convert/scan/folders.py",
        "old": "        splits[0].skipped += outside_splits(src)\n    for s in splits:\n        s.close(classes)\n",
        "new": (
            "        pass\n    for s in splits:\n        s.close(classes)\n    if resolved == Layout.SPLITS:\n"
            "        splits[0].skipped[:0] = outside_splits(src)\n"
        ),
        "tests": [FOLDERS],
    },
    {
        "id": "tally-lists-outcomes-that-never-happened",
        "row": ROW,
        "file": "shardkit/convert/scan/detection.py",
        "old": "if k not in out and v})",
        "new": "if k not in out})",
        "tests": [HF],
    },
    {
        "id": "hf-objects-tally-lists-clipped",
        "row": ROW,
        "file": "shardkit/convert/scan/hf_targets.py",
        "old": "as_dict(always=(KEPT,))",
        "new": "as_dict()",
        "tests": [HF],
    },
]
