"""Mutants of the batch field table (``shardkit/format/fieldtable.py``) and of ``box_crowd``, the field added
through it: a second description of the fields that a new entry does not reach, a default selection that asks for
an opt-in field, crowd flags that do not follow their boxes' rows (the worker's compaction, the augmentation's
conversion), crowds dropped although asked for or yielded although not. Tests: ``tests/loader/test_fieldtable.py``,
``tests/loader/test_box_crowd.py``, ``tests/loader/test_targets_crowd.py``."""

ROW_TABLE = "Fields: one table describes every batch field; a new entry flows to the delivered dict"
ROW_CROWD = "Targets: box_crowd, asked for by name, marks each yielded crowd row; not asked for, crowds are dropped"

T = "tests/loader/test_fieldtable.py::"
C = "tests/loader/test_box_crowd.py::"
LINES_UP = C + "test_box_crowd_lines_up_with_boxes"
IN_WORKERS = C + "test_box_crowd_lines_up_with_boxes_in_workers"
AUGMENT = C + "test_box_crowd_moves_with_its_rows_through_gpu_augment"
UNCHANGED = "tests/loader/test_targets_crowd.py::test_crowd_regions_are_not_yielded_as_boxes"

MUTANTS = [
    {
        "id": "table-row-fields-from-a-snapshot",  # a second list of row fields: a new entry is never built
        "row": ROW_TABLE,
        "file": "shardkit/loader/fields.py",
        "old": "        tuple(f for f in fieldtable.row_fields() if f in names),",
        "new": "        tuple(f for f in ('labels', 'target', 'text', 'meta') if f in names),",
        "tests": [T + "test_a_new_table_entry_flows_through_to_the_delivered_dict"],
    },
    {
        "id": "table-delivery-by-a-hand-list",  # the delivered dict's own if/elif: a new row field is not found
        "row": ROW_TABLE,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "            if home is Home.ROWS:  # a row field the worker built",
        "new": "            if name in ('labels', 'target', 'text', 'meta') or table[name].is_target:",
        "tests": [T + "test_a_new_table_entry_flows_through_to_the_delivered_dict"],
    },
    {
        "id": "table-fields-refused-by-a-snapshot",  # fields= checked against a list made before the entry
        "row": ROW_TABLE,
        "file": "shardkit/loader/fields.py",
        "old": "    known = fieldtable.by_name()\n",
        "new": "    known = dict.fromkeys(FIELD_KINDS)\n",
        "tests": [T + "test_a_new_table_entry_flows_through_to_the_delivered_dict"],
    },
    {
        "id": "table-bench-asks-for-opt-in-fields",  # bench's default selection turns crowd boxes into rows
        "row": ROW_TABLE,
        "file": "shardkit/ops/bench.py",
        "old": " and f not in OPT_IN)",
        "new": ")",
        "tests": [T + "test_box_crowd_is_asked_for_by_name_only"],
    },
    {
        "id": "crowd-flags-not-compacted",  # a dropped box leaves the flags at their old positions
        "row": ROW_CROWD,
        "file": "shardkit/targets/geometry.py",
        "old": "    crowd = torch.gather(targets.crowd, 1, order) & live\n",
        "new": "    crowd = targets.crowd & live\n",
        "tests": [LINES_UP, IN_WORKERS, AUGMENT],
    },
    {
        "id": "crowd-dropped-although-asked",  # box_crowd asked for, but the crowds are still taken out
        "row": ROW_CROWD,
        "file": "shardkit/loader/targetrows.py",
        "old": "    if not keep_crowds:\n        objects = [",
        "new": "    if True:\n        objects = [",
        "tests": [LINES_UP, IN_WORKERS],
    },
    {
        "id": "crowd-yielded-unasked",  # every dataset's crowds become boxes: what boxes holds changes silently
        "row": ROW_CROWD,
        "file": "shardkit/loader/targetrows.py",
        "old": '    keep_crowds = "box_crowd" in want\n',
        "new": "    keep_crowds = True\n",
        "tests": [LINES_UP, UNCHANGED],
    },
    {
        "id": "crowd-not-read-by-the-augmentation",  # GpuAugment's targets forget the flags: zeros come back
        "row": ROW_CROWD,
        "file": "shardkit/targets/batchdict.py",
        "old": '    crowd = batch.get("box_crowd")\n',
        "new": "    crowd = None\n",
        "tests": [AUGMENT, T + "test_box_crowd_round_trips_through_targets"],
    },
    {
        "id": "crowd-padding-rows-untrimmed",  # box_crowd keeps the stored object axis: rows no longer line up
        "row": ROW_CROWD,
        "file": "shardkit/format/fieldtable.py",
        "old": 'Field("box_crowd", "boxes", "objects.json", "bool", "[B, M]", _ROW, Geometry.ROWS, Batching.PADDED,',
        "new": 'Field("box_crowd", "boxes", "objects.json", "bool", "[B, M]", _ROW, Geometry.ROWS, Batching.STACKED,',
        "tests": [LINES_UP],
    },
]
