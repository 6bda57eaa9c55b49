"""Mutants of the tar and Hugging Face sources (``shardkit/convert/scan/tars.py``, ``shardkit/convert/scan/hf.py``).

Each re-introduces a bug these sources once had (labels, member rule, splits, class spaces) or a near relative. The unit tests of
``tests/convert/scan/test_tars.py`` / ``tests/convert/scan/test_hf.py`` are named first (fast); the ``-oracle`` mutants
name only the differential oracle (``tests/convert/scan/test_tar_hf_oracle.py``), proving it catches that class of bug alone.
"""

ROW_TARS = (
    "Conversion input: tars (the one member rule; every image one sample with its label, or skipped with its reason)"
)
ROW_HF = "Conversion input: Hugging Face datasets (every row one sample with its label or skipped with its reason, in its own split)"
ROW_LABELS = "Conversion labels: one rule for every source"
ROW_RESHARD = "Re-converting shardkit's own shards keeps the class names, their order, the labels and the pixels"

TARS = "shardkit/convert/scan/tars.py"
TAR_CLASSES = "shardkit/convert/scan/tar_classes.py"
MEMBERS = "shardkit/format/members.py"  # group_members: the member rule over a tar's names
SOURCE_PY = "shardkit/convert/scan/source.py"
HF = "shardkit/convert/scan/hf.py"
HF_LABELS = "shardkit/convert/scan/hf_labels.py"
T = "tests/convert/scan/test_tars.py::"
H = "tests/convert/scan/test_hf.py::"
TAR_ORACLE = "tests/convert/scan/test_tar_hf_oracle.py::test_tar_source_matches_the_reference"
HF_ORACLE = "tests/convert/scan/test_tar_hf_oracle.py::test_hf_source_matches_the_reference"

_REPEAT_OLD = (
    "if not groups or groups[-1].key != key or ext in groups[-1].fields:  # a repeated field starts a new sample"
)
_REPEAT_NEW = "if not groups or groups[-1].key != key:"
_FLOAT_OLD = "if text.lower() in _BOOLS or _FLOAT.match(text):"
_SKIP_SPLIT_OLD = 'by_name[r[0]].skipped.append((ident[k], bad, f"split {r[0]} row {r[1]}: {detail}"))'
_SKIP_SPLIT_NEW = 'splits[0].skipped.append((ident[k], bad, f"split {r[0]} row {r[1]}: {detail}"))'
_HF_STR_OLD = 'if isinstance(feat, datasets.Value) and feat.dtype in ("string", "large_string"):'
_HF_STR_NEW = (
    'if isinstance(feat, datasets.Value) and feat.dtype in ("string", "large_string", "float32", "float64", "bool"):'
)

MUTANTS = [
    # --- A1: the one member rule
    {
        "id": "tars-repeated-field-merges",
        "row": ROW_TARS,
        "file": MEMBERS,
        "old": _REPEAT_OLD,
        "new": _REPEAT_NEW,
        "tests": [T + "test_adjacent_repeated_field_starts_a_new_sample_and_is_accounted"],
    },
    {
        "id": "tars-repeated-field-merges-oracle",
        "row": ROW_TARS,
        "file": MEMBERS,
        "old": _REPEAT_OLD,
        "new": _REPEAT_NEW,
        "tests": [TAR_ORACLE],
    },
    {
        "id": "tars-later-key-converted-again",
        "row": ROW_TARS,
        "file": TARS,
        "old": "            if g.again:\n                out.skipped.append",
        "new": "            if False:\n                out.skipped.append",
        "tests": [T + "test_non_adjacent_repeat_and_case_repeat_are_accounted"],
    },
    {
        "id": "tars-extension-case-sensitive",
        "row": ROW_TARS,
        "file": TARS,
        "old": "group_members([m.name for m in members], fold_case=True)",
        "new": "group_members([m.name for m in members])",
        "tests": [T + "test_non_adjacent_repeat_and_case_repeat_are_accounted"],
    },
    {
        "id": "tars-unsafe-name-converted",
        "row": ROW_TARS,
        "file": TARS,
        "old": "            if g.unsafe:\n                out.skipped.append((ident, SkipReason.BAD_NAME, g.unsafe))",
        "new": "            if False:\n                out.skipped.append((ident, SkipReason.BAD_NAME, g.unsafe))",
        "tests": [T + "test_members_outside_the_member_rule"],
    },
    {
        "id": "tars-repeat-identity-not-unique",
        "row": ROW_TARS,
        "file": TARS,
        "old": '" (again)" if g.again == 1 else f" (again {g.again})"',
        "new": '" (again)"',
        "tests": [T + "test_adjacent_repeated_field_starts_a_new_sample_and_is_accounted"],
    },
    {
        "id": "tars-bad-index-vanishes",
        "row": ROW_TARS,
        "file": TARS,
        "old": "        if index is None and opts.labelled:\n            out.skipped.append(\n                (ident, SkipReason.BAD_LABEL,",
        "new": "        if index is None and opts.labelled:\n            continue\n            out.skipped.append(\n                (ident, SkipReason.BAD_LABEL,",
        "tests": [T + "test_shardkit_manifest_with_an_index_beyond_its_classes_is_bad_label"],
    },
    # --- A4: the label-value rule (tars, and HF string columns through the same function)
    {
        "id": "label-float-or-bool-text-becomes-name",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": _FLOAT_OLD,
        "new": "if False:",
        "tests": [T + "test_cls_holding_a_list_float_or_bool_is_bad_label"],
    },
    {
        "id": "label-float-or-bool-text-becomes-name-oracle",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": _FLOAT_OLD,
        "new": "if False:",
        "tests": [TAR_ORACLE],
    },
    {
        "id": "label-list-text-becomes-name",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": "return (None, SkipReason.BAD_LABEL) if isinstance(value, dict) else label_value(value)",
        "new": "return label_value(text)",
        "tests": [
            T + "test_cls_holding_a_list_float_or_bool_is_bad_label",
            H + "test_empty_list_labels_are_no_label_and_odd_string_labels_bad_label",
        ],
    },
    {
        "id": "label-json-bool-becomes-index",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": "    if isinstance(raw, int) and not isinstance(raw, bool):\n",
        "new": "    if isinstance(raw, int):\n",
        "tests": [T + "test_label_json_field_holding_a_list_float_or_bool_is_bad_label"],
    },
    {
        "id": "label-negative-index-mixes-with-names",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": 'return label_value(int(text)) if text.startswith("-") else label_value(text)',
        "new": "return label_value(text)",
        "tests": [T + "test_minus_one_among_class_names_is_one_bad_label_not_a_mix_of_names_and_indices"],
    },
    {
        "id": "label-negative-index-mixes-with-names-oracle",
        "row": ROW_LABELS,
        "file": SOURCE_PY,
        "old": 'return label_value(int(text)) if text.startswith("-") else label_value(text)',
        "new": "return label_value(text)",
        "tests": [TAR_ORACLE],
    },
    {
        "id": "hf-float-or-bool-column-accepted",
        "row": ROW_LABELS,
        "file": HF_LABELS,
        "old": _HF_STR_OLD,
        "new": _HF_STR_NEW,
        "tests": [H + "test_label_column_of_floats_bools_or_lists_is_refused_in_one_line"],
    },
    {
        "id": "hf-float-or-bool-column-accepted-oracle",
        "row": ROW_LABELS,
        "file": HF_LABELS,
        "old": _HF_STR_OLD,
        "new": _HF_STR_NEW,
        "tests": [HF_ORACLE],
    },
    {
        "id": "hf-list-column-accepted",
        "row": ROW_LABELS,
        "file": HF,
        "old": "        if full is not None:",
        "new": "        if False:",
        "tests": [H + "test_label_column_of_floats_bools_or_lists_is_refused_in_one_line"],
    },
    {
        "id": "hf-empty-list-refused",
        "row": ROW_LABELS,
        "file": HF,
        "old": "full = next((i for i, v in enumerate(labels) if v), None)",
        "new": "full = next((i for i, v in enumerate(labels) if v is not None), None)",
        "tests": [H + "test_empty_list_labels_are_no_label_and_odd_string_labels_bad_label"],
    },
    # --- A7: empty splits
    {
        "id": "hf-empty-split-dropped",
        "row": ROW_HF,
        "file": HF,
        "old": "        root=what,\n        classes=classes,\n        splits=splits,\n",
        "new": "        root=what,\n        classes=classes,\n        splits=[s for s in splits if s.files],\n",
        "tests": [H + "test_a_split_whose_every_label_is_minus_one_is_returned_with_no_files_and_its_skips"],
    },
    {
        "id": "hf-nothing-usable-not-refused",
        "row": ROW_HF,
        "file": HF,
        "old": "    if not any(s.files for s in splits):",
        "new": "    if False:",
        "tests": [H + "test_a_split_whose_every_label_is_minus_one_is_returned_with_no_files_and_its_skips"],
    },
    {
        "id": "hf-classlabel-minus-one-is-bad-label",
        "row": ROW_HF,
        "file": HF_LABELS,
        "old": 'if kind == "classlabel" and r[2] in (None, -1)',
        "new": 'if kind == "classlabel" and r[2] is None',
        "tests": [H + "test_a_split_whose_every_label_is_minus_one_is_returned_with_no_files_and_its_skips"],
    },
    # --- A8: one class space
    {
        "id": "hf-string-split-sorted-own-class-space",
        "row": ROW_HF,
        "file": HF_LABELS,
        "old": "        pos = {c: i for i, c in enumerate(classes)}\n        n_cl",
        "new": "        pos = {c: i for i, c in enumerate(sorted(classes))}\n        n_cl",
        "tests": [H + "test_classlabel_and_string_splits_share_one_class_space"],
    },
    {
        "id": "hf-string-split-sorted-own-class-space-oracle",
        "row": ROW_HF,
        "file": HF_LABELS,
        "old": "        pos = {c: i for i, c in enumerate(classes)}\n        n_cl",
        "new": "        pos = {c: i for i, c in enumerate(sorted(classes))}\n        n_cl",
        "tests": [HF_ORACLE],
    },
    {
        "id": "hf-int-split-next-to-classlabel-accepted",
        "row": ROW_HF,
        "file": HF_LABELS,
        "old": '        if k == "int":',
        "new": "        if False:",
        "tests": [H + "test_classlabel_split_with_an_incompatible_split_is_refused_naming_both"],
    },
    {
        "id": "hf-different-classlabels-accepted",
        "row": ROW_HF,
        "file": HF_LABELS,
        "old": "        if list(f.names) != list(feat.names):",
        "new": "        if False:",
        "tests": [H + "test_classlabel_split_with_an_incompatible_split_is_refused_naming_both"],
    },
    # --- B: per-split skips
    {
        "id": "hf-skips-land-in-another-split",
        "row": ROW_HF,
        "file": HF,
        "old": _SKIP_SPLIT_OLD,
        "new": _SKIP_SPLIT_NEW,
        "tests": [H + "test_each_split_of_a_datasetdict_keeps_its_own_skips"],
    },
    {
        "id": "hf-skips-land-in-another-split-oracle",
        "row": ROW_HF,
        "file": HF,
        "old": _SKIP_SPLIT_OLD,
        "new": _SKIP_SPLIT_NEW,
        "tests": [HF_ORACLE],
    },
    # --- A10: --label-json-field class; shardkit's own shards
    {
        "id": "tars-reserved-field-dropped-before-lookup",
        "row": ROW_RESHARD,
        "file": TARS,
        "old": "raw = meta.get(opts.label_json_field)",
        "new": "raw = extra.get(opts.label_json_field)",
        "tests": [T + "test_label_json_field_may_be_a_reserved_field"],
    },
    {
        "id": "tars-reserved-field-dropped-before-lookup-oracle",
        "row": ROW_RESHARD,
        "file": TARS,
        "old": "raw = meta.get(opts.label_json_field)",
        "new": "raw = extra.get(opts.label_json_field)",
        "tests": [TAR_ORACLE],
    },
    {
        "id": "tars-manifest-classes-ignored",
        "row": ROW_RESHARD,
        "file": TAR_CLASSES,
        "old": 'return list(m.classes), f"class names and order from {url}"',
        "new": "return None, None",
        "tests": [T + "test_shardkit_manifest_with_an_index_beyond_its_classes_is_bad_label"],
    },
    {
        "id": "tars-class-field-ignored",
        "row": ROW_RESHARD,
        "file": TAR_CLASSES,
        "old": "        else _class_field_names(found)\n",
        "new": "        else None\n",
        "tests": [T + "test_reconverting_shardkit_shards_keeps_class_names_order_labels_and_pixels"],
    },
    {
        "id": "tars-class-field-sorted-by-name",
        "row": ROW_RESHARD,
        "file": TAR_CLASSES,
        "old": "classes = [by_field[i] for i in sorted(by_field, key=int)]",
        "new": "classes = sorted(by_field.values())",
        "tests": [T + "test_class_field_names_keep_their_cls_order_without_a_manifest"],
    },
    {
        "id": "tars-class-field-not-one-to-one",
        "row": ROW_RESHARD,
        "file": TAR_CLASSES,
        "old": "if not found or len(pairs) != len({p[0] for p in pairs}) or len(pairs) != len({p[1] for p in pairs}):",
        "new": "if not found:",
        "tests": [T + "test_class_field_names_keep_their_cls_order_without_a_manifest"],
    },
]
