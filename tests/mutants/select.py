"""Mutants of selections: the ``--where`` grammar (``shardkit/selecting/where.py``), the rows select reads
(``rows.py``) and ``shardkit.select`` (``take.py``)."""

ROW_WHERE = (
    "Selections: --where parses by a fixed grammar (never Python) and keeps exactly the rows its reference keeps"
)
ROW_SELECT = "Selections: a selection holds exactly the samples a plain filter over the per-sample table keeps"

ROW_SHOW = "show: every view of a multi-crop sample is drawn, one sample per row"

TW = "tests/select/test_where.py"
TV = "tests/viz/test_show_views.py"
TS = "tests/select/test_select.py"
W = "shardkit/selecting/where.py"

MUTANTS = [
    {
        "id": "where-not-binds-looser-than-and",
        "row": ROW_WHERE,
        "file": W,
        "old": "return Not(self.not_())",
        "new": "return Not(self.and_())",
        "tests": [f"{TW}::test_precedence_and_types", f"{TW}::test_the_grammar_agrees_with_the_reference"],
    },
    {
        "id": "where-or-binds-as-tight-as-and",
        "row": ROW_WHERE,
        "file": W,
        "old": 'while self.is_("and"):',
        "new": 'while self.is_("and", "or"):',
        "tests": [f"{TW}::test_precedence_and_types", f"{TW}::test_the_grammar_agrees_with_the_reference"],
    },
    {
        "id": "where-equality-across-types",
        "row": ROW_WHERE,
        "file": W,
        "old": 'return ka == _kind(b) and ka != "other" and a == b',
        "new": "return a == b",
        "tests": [f"{TW}::test_precedence_and_types"],
    },
    {
        "id": "where-missing-meta-field-is-zero",
        "row": ROW_WHERE,
        "file": W,
        "old": "value, rest = meta.get(path[0]), path[1:]",
        "new": "value, rest = meta.get(path[0], 0), path[1:]",
        "tests": [f"{TW}::test_precedence_and_types"],
    },
    {
        "id": "where-not-in-loses-its-not",
        "row": ROW_WHERE,
        "file": W,
        "old": "return Not(node) if negate else node",
        "new": "return node",
        "tests": [f"{TW}::test_precedence_and_types"],
    },
    {
        "id": "where-startswith-on-a-number",
        "row": ROW_WHERE,
        "file": W,
        "old": """        if not isinstance(a, str):
            return False
        return fnmatch""",
        "new": """        a = str(a)
        return fnmatch""",
        "tests": [f"{TW}::test_precedence_and_types"],
    },
    {
        "id": "where-ge-is-gt",
        "row": ROW_WHERE,
        "file": W,
        "old": "return bool(a >= b)",
        "new": "return bool(a > b)",
        "tests": [f"{TW}::test_precedence_and_types"],
    },
    {
        "id": "where-column-off-by-one",
        "row": ROW_WHERE,
        "file": W,
        "old": "        col = pos + 1\n        pos = m.end()",
        "new": "        col = pos\n        pos = m.end()",
        "tests": [f"{TW}::test_malformed_expressions_fail_in_one_line_naming_the_column"],
    },
    {
        "id": "where-unknown-field-accepted",
        "row": ROW_WHERE,
        "file": W,
        "old": "if f.path[0] not in COLUMNS and head not in known:",
        "new": "if False:",
        "tests": [f"{TW}::test_an_unknown_field_is_refused_at_its_column_and_nothing_is_run_as_python"],
    },
    {
        "id": "select-removed-samples-selected",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": "keep = table.kept.copy()",
        "new": "keep = np.ones(len(rows), bool)",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-relabels-ignored",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/rows.py",
        "old": 'rows[int(offsets[shard]) + int(pos)]["class"] = m.classes[c]',
        "new": "pass",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-exclude-acts-as-include",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": 'keep &= named if what == "include" else ~named',
        "new": "keep &= named",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-list-paths-not-normalised",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/rows.py",
        "old": "hits = by_path.get(_norm_path(entry))",
        "new": "hits = by_path.get(entry)",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-unknown-entries-skipped-silently",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/rows.py",
        "old": 'if unknown == "refuse":',
        "new": "if False:",
        "tests": [f"{TS}::test_lists_unknown_entries_refused_naming_the_line_or_counted"],
    },
    {
        "id": "select-generation-ignored",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": "snap = resolve(url, generation=generation, **so)",
        "new": "snap = resolve(url, **so)",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-within-names-the-selection-as-parent",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": "parent = snap.selection.parent if snap.selection is not None else snap.url",
        "new": "parent = snap.url",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
    {
        "id": "select-overwrites-a-split",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": "    if not isinstance(found, Selection):\n        raise SelectError",
        "new": "    if False:\n        raise SelectError",
        "tests": [f"{TS}::test_the_command_line_prints_one_summary_and_refuses_mistakes_in_one_line"],
    },
    {
        "id": "show-draws-only-the-first-view",
        "row": ROW_SHOW,
        "file": "shardkit/viz/grid.py",
        "old": 'out += [{**row, "image": v[b], "view": (j, len(views))} for j, v in enumerate(views)]',
        "new": 'out += [{**row, "image": v[b], "view": (j, len(views))} for j, v in enumerate(views[:1])]',
        "tests": [f"{TV}::test_every_view_of_every_sample_is_a_cell_of_its_row"],
    },
    {
        "id": "show-views-not-one-sample-per-row",
        "row": ROW_SHOW,
        "file": "shardkit/viz/grid.py",
        "old": 'ncol = items[0]["view"][1] if "view" in items[0] else 4',
        "new": "ncol = 4",
        "tests": [f"{TV}::test_every_view_of_every_sample_is_a_cell_of_its_row"],
    },
    {
        "id": "select-writes-an-empty-selection",
        "row": ROW_SELECT,
        "file": "shardkit/selecting/take.py",
        "old": "    if not keep.any():",
        "new": "    if False:",
        "tests": [f"{TS}::test_select_keeps_what_a_plain_filter_keeps"],
    },
]
