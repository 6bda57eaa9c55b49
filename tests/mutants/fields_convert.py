"""Mutants of the fields beside the label through ``shardkit convert``: the value rules
(``shardkit/convert/scan/values.py``), the sources that use them, the members' writer and rules
(``shardkit/format/fields.py``), the job's class counts, merge's overflow and ``verify``. Tests:
``tests/convert/test_fields_*.py`` and ``tests/format/test_fields_members.py``."""

ROW_LISTING = "Conversion fields: multi-label sets, targets and text from listings are exactly what the reference reads"
ROW_SOURCES = (
    "Conversion fields: multi-label sets and text from tars, and sets, targets and text from Hugging Face datasets, "
    "are exactly what the reference reads"
)
ROW_PIPELINE = (
    "Conversion fields: tasks, overflow shards and merge keep every field; the manifest declares and counts them"
)
ROW_MEMBERS = "Stored fields: one rule per member, the writer's bytes read back by tarfile and webdataset; verify checks every declared field"

L = "tests/convert/test_fields_listing.py::test_listing_fields_round_trip"
TAR = "tests/convert/test_fields_tars_hf.py::test_tar_fields_round_trip"
HF = "tests/convert/test_fields_tars_hf.py::test_hf_fields_round_trip"
P = "tests/convert/test_fields_pipeline.py::"
F = "tests/format/test_fields_members.py::"
VALUES = "shardkit/convert/scan/values.py"

MUTANTS = [
    {
        "id": "fields-split-on-the-wrong-separator",  # --label-sep ignored: the cell split at commas
        "row": ROW_LISTING,
        "file": VALUES,
        "old": "parts = raw.split(sep) if sep else [raw]",
        "new": 'parts = raw.split(",") if sep else [raw]',
        "tests": [L],
    },
    {
        "id": "fields-classes-from-the-first-row",
        "row": ROW_LISTING,
        "file": VALUES,
        "old": "flat = [(w, item) for w, items in values for item in items]",
        "new": "flat = [(w, item) for w, items in values[:1] for item in items]",
        "tests": [L],
    },
    {
        "id": "fields-target-columns-in-sorted-order",  # --target-col b,a stored as a,b
        "row": ROW_LISTING,
        "file": VALUES,
        "old": "    for c in columns:\n        raw = get(c)",
        "new": "    for c in sorted(columns):\n        raw = get(c)",
        "tests": [L],
    },
    {
        "id": "fields-text-from-the-label-column",
        "row": ROW_LISTING,
        "file": "shardkit/convert/scan/listing.py",
        "old": "text, reason, why = text_value(row.get(opts.text_col))",
        "new": "text, reason, why = text_value(row.get(opts.label_col))",
        "tests": [L],
    },
    {
        "id": "fields-empty-label-cell-skipped",  # an empty cell must be a sample with no class, not no_label
        "row": ROW_LISTING,
        "file": VALUES,
        "old": "    if raw is None:\n        return [], None",
        "new": "    if not raw:\n        return None, SkipReason.NO_LABEL",
        "tests": [L],
    },
    {
        "id": "fields-non-finite-target-accepted",
        "row": ROW_LISTING,
        "file": VALUES,
        "old": "return value if math.isfinite(value) else None",
        "new": "return value",
        "tests": [L],
    },
    {
        "id": "fields-text-stripped",  # text must be kept exactly (captions with leading spaces, trailing newlines)
        "row": ROW_SOURCES,
        "file": VALUES,
        "old": '    return raw, None, ""',
        "new": '    return raw.strip(), None, ""',
        "tests": [TAR, L],
    },
    {
        "id": "fields-labels-not-declared",  # a multi-label dataset whose manifest says 'label'
        "row": ROW_PIPELINE,
        "file": VALUES,
        "old": '+ (("labels",) if multi else ("label",) if label else ())',
        "new": '+ (("label",) if label else ())',
        "tests": [L, P + "test_tasks_overflow_and_merge_keep_every_field_byte_for_byte"],
    },
    {
        "id": "fields-tar-json-list-still-refused",
        "row": ROW_SOURCES,
        "file": "shardkit/convert/scan/tars.py",
        "old": "label, bad = label_items(raw, None, spelled=True) if present else (None, SkipReason.NO_LABEL)",
        "new": "label, bad = label_value(raw)",
        "tests": [TAR],
    },
    {
        "id": "fields-tar-null-item-dropped",  # [null, 1] must be bad_label, as in a listing
        "row": ROW_SOURCES,
        "file": VALUES,
        "old": "    if not isinstance(value, str):\n        return _item(value)\n",
        "new": "    if value is not None and not isinstance(value, str):\n        return _item(value)\n",
        "tests": [TAR],
    },
    {
        "id": "fields-hf-sequence-classlabel-refused",
        "row": ROW_SOURCES,
        "file": "shardkit/convert/scan/hf_labels.py",
        "old": 'if isinstance(feat, lists) and isinstance(getattr(feat, "feature", None), datasets.ClassLabel):',
        "new": "if False:",
        "tests": [HF],
    },
    {
        "id": "fields-hf-minus-one-in-a-set-dropped",  # [2, -1] read as {2}
        "row": ROW_SOURCES,
        "file": "shardkit/convert/scan/hf_labels.py",
        "old": "if all(0 <= x < n for x in r[2])",
        "new": "if all(x < n for x in r[2])",
        "tests": [HF],
    },
    {
        "id": "fields-class-counts-first-class-only",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/targets.py",
        "old": "        return tuple(item.labels)\n",
        "new": "        return tuple(item.labels)[:1]\n",
        "tests": [L, HF],
    },
    {
        "id": "fields-merge-drops-the-overflow-fields",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/merge.py",
        "old": "            s.labels,\n            s.target,\n            s.text,\n            s.objects,\n            s.mask,\n",
        "new": "",
        "tests": [P + "test_tasks_overflow_and_merge_keep_every_field_byte_for_byte"],
    },
    {
        "id": "fields-merge-ignores-other-fields",
        "row": ROW_PIPELINE,
        "file": "shardkit/convert/merge.py",
        "old": "other = next((r for r in records if r is not None and (r.fields, r.targets) != (p.fields, p.targets)), None)",
        "new": "other = None",
        "tests": [P + "test_merge_refuses_a_task_that_stored_other_fields"],
    },
    {
        "id": "fields-labels-member-unsorted",
        "row": ROW_MEMBERS,
        "file": "shardkit/format/fields.py",
        "old": 'return b"[" + b",".join(b"%d" % x for x in sorted(labels)) + b"]"',
        "new": 'return b"[" + b",".join(b"%d" % x for x in labels) + b"]"',
        "tests": [
            F + "test_labels_member_round_trips_sorted_and_compact",
            F + "test_writer_members_read_back_with_tarfile_and_webdataset",
        ],
    },
    {
        "id": "fields-target-member-rounded",  # floats written with 6 digits instead of repr
        "row": ROW_MEMBERS,
        "file": "shardkit/format/fields.py",
        "old": 'return ("[" + ",".join(map(repr, values)) + "]").encode("ascii")',
        "new": 'return ("[" + ",".join("%g" % v for v in values) + "]").encode("ascii")',
        "tests": [F + "test_target_member_is_repr_exact_and_round_trips", L],
    },
    {
        "id": "fields-verify-reads-with-the-single-label-rule",
        "row": ROW_MEMBERS,
        "file": "shardkit/ops/verify_split.py",
        "old": "ShardReader(r, url, rule=SampleRule.of(m))",
        "new": "ShardReader(r, url, num_classes=len(m.classes) or None)",
        "tests": [
            F + "test_verify_reports_a_bad_member_of_a_declared_field",
            F + "test_writer_members_read_back_with_tarfile_and_webdataset",
        ],
    },
    {
        "id": "fields-verify-counts-no-labels",
        "row": ROW_MEMBERS,
        "file": "shardkit/ops/verify_split.py",
        "old": "for c in (label,) if single else smp.labels or ():",
        "new": "for c in (label,) if single else ():",
        "tests": [
            F + "test_verify_counts_labels_per_class_and_a_missing_member",
            F + "test_writer_members_read_back_with_tarfile_and_webdataset",
        ],
    },
    {
        "id": "fields-writer-text-member-missing",
        "row": ROW_MEMBERS,
        "file": "shardkit/format/writer.py",
        "old": "        if self.text is not None:\n            out[TEXT_EXT] = text_bytes(self.text)\n",
        "new": "",
        "tests": [F + "test_writer_members_read_back_with_tarfile_and_webdataset", L],
    },
]
