"""Mutants of the conversion job, its output layout and first contact (``shardkit/convert/job.py``, ``dest.py``,
``encoder.py``, ``options.py``, ``shardkit/format/manifest.py``, ``shardkit/ops/bench.py``, ``shardkit/cli/cmd_sample_data.py``,
``shardkit/demo/sampledata.py``)."""

ROW_LAYOUT = (
    "Conversion output: every split in DEST/<split>/; a root of splits names its splits; older flat datasets still load"
)
ROW_EMPTY = "Conversion input: a split with no sample is reported with its skips and not written; every split empty is one line, nothing written"
ROW_GUARD = (
    "Python API: a script calling convert() with workers outside the __main__ guard gets one line saying what to do"
)
ROW_PROGRESS = "Conversion progress: the bar counts every input, skips too, and ends at 100 %"
ROW_BENCH = "bench: a dataset too small for a steady figure is said to be, never called steady"
ROW_SAMPLE = "sample-data writes the classes, counts and sizes it says, the same bytes for the same seed"

T = "tests/cli/test_first_contact.py::"
E = "tests/convert/test_empty_split.py::"

MUTANTS = [
    # --- layout ------------------------------------------------------------------------------------------------
    {
        "id": "layout-one-split-lands-in-dest",  # the old rule: a one-split source went to DEST itself
        "row": ROW_LAYOUT,
        "file": "shardkit/convert/job.py",
        "old": "                classes,\n                storage.join(dest, s.name),\n",
        "new": "                classes,\n                dest if len(source.splits) == 1 else storage.join(dest, s.name),\n",
        "tests": [
            T + "test_every_source_kind_lands_in_dest_split",
            T + "test_adding_a_val_split_does_not_move_the_train_data",
        ],
    },
    {
        "id": "layout-root-of-splits-not-named",
        "row": ROW_LAYOUT,
        "file": "shardkit/format/manifest.py",
        "old": "splits = [] if murl == url else split_names(url, **storage_options)",
        "new": "splits = []",
        "tests": [T + "test_load_of_a_root_of_splits_names_the_splits"],
    },
    {
        "id": "layout-root-of-splits-lists-every-folder",
        "row": ROW_LAYOUT,
        "file": "shardkit/format/manifest.py",
        "old": "return [d for d in dirs if storage.exists(storage.join(url, d, MANIFEST_NAME), **storage_options)]",
        "new": "return list(dirs)",
        "tests": [T + "test_load_of_a_root_of_splits_names_the_splits"],
    },
    {
        "id": "layout-flat-dest-written-over",
        "row": ROW_LAYOUT,
        "file": "shardkit/convert/dest.py",
        "old": "    if not (has_manifest or has_plan):\n        return",
        "new": "    if True:\n        return",
        "tests": [T + "test_converting_into_an_old_flat_dataset_is_refused_or_replaced_with_overwrite"],
    },
    {
        "id": "layout-flat-overwrite-leaves-old-shards",
        "row": ROW_LAYOUT,
        "file": "shardkit/convert/dest.py",
        "old": 'if name.startswith(f"{split}-") and name.endswith((".tar", INDEX_SUFFIX)):',
        "new": "if name.endswith(INDEX_SUFFIX):",
        "tests": [T + "test_converting_into_an_old_flat_dataset_is_refused_or_replaced_with_overwrite"],
    },
    # --- empty splits (A7) -------------------------------------------------------------------------------------
    {
        "id": "empty-split-planned-like-the-others",  # A7 as it was: "nothing to merge (no _shardkit/plan.json)"
        "row": ROW_EMPTY,
        "file": "shardkit/convert/job.py",
        "old": "    for s in source.splits:\n        if not s.files:\n            continue\n        base = ",
        "new": "    for s in source.splits:\n        base = ",
        "tests": [E + "test_hf_test_split_of_all_minus_one_is_reported_and_the_others_converted"],
    },
    {
        "id": "empty-split-skips-not-counted",
        "row": ROW_EMPTY,
        "file": "shardkit/convert/dest.py",
        "old": "    res.add_skipped(res.skipped_files)\n",
        "new": "",
        "tests": [E + "test_hf_test_split_of_all_minus_one_is_reported_and_the_others_converted"],
    },
    {
        "id": "empty-split-makes-result-incomplete",
        "row": ROW_EMPTY,
        "file": "shardkit/convert/options.py",
        "old": "return all(s.manifest is not None for s in self.splits if s.written)",
        "new": "return all(s.manifest is not None for s in self.splits)",
        "tests": [E + "test_hf_test_split_of_all_minus_one_is_reported_and_the_others_converted"],
    },
    {
        "id": "empty-split-earlier-conversion-left-behind",
        "row": ROW_EMPTY,
        "file": "shardkit/convert/job.py",
        "old": "check_empty_split(e.url, e.split, e.empty, overwrite, so)",
        "new": "pass",
        "tests": [E + "test_an_earlier_conversion_of_a_split_that_is_empty_now_is_not_left_behind_silently"],
    },
    {
        "id": "empty-split-not-in-summary",
        "row": ROW_EMPTY,
        "file": "shardkit/cli/cmd_convert.py",
        "old": "        if not s.written:\n            print(",
        "new": "        if False:\n            print(",
        "tests": [E + "test_cli_summary_names_the_empty_split_and_its_skips"],
    },
    # --- the __main__ guard (A9) -------------------------------------------------------------------------------
    {
        "id": "guard-not-checked",  # A9 as it was: "an encoding worker process died"
        "row": ROW_GUARD,
        "file": "shardkit/convert/job.py",
        "old": "        check_main_guard()\n",
        "new": "        pass\n",
        "tests": [T + "test_script_without_main_guard_gets_one_line_saying_what_to_do"],
    },
    {
        "id": "guard-any-if-counts-as-the-guard",
        "row": ROW_GUARD,
        "file": "shardkit/private_apis.py",
        "old": 'guarded = isinstance(node, ast.If) and any(\n                isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(node.test)\n            )',
        "new": "guarded = isinstance(node, ast.If)",
        "tests": [T + "test_script_without_main_guard_gets_one_line_saying_what_to_do"],
    },
    {
        "id": "guard-refuses-a-guarded-script",
        "row": ROW_GUARD,
        "file": "shardkit/private_apis.py",
        "old": "            return not guarded",
        "new": "            return True",
        "tests": [T + "test_script_with_main_guard_converts_with_a_pool"],
    },
    # --- progress bar --------------------------------------------------------------------------------------------
    {
        "id": "progress-last-item-of-each-shard-uncounted",  # the bar as it was: 199/200
        "row": ROW_PROGRESS,
        "file": "shardkit/convert/splitjob.py",
        "old": "                    bar.update(1)  # before the yield: the consumer (zip) stops after the last item, never resuming us\n                    yield out",
        "new": "                    yield out\n                    bar.update(1)",
        "tests": [T + "test_progress_bar_counts_every_input_and_ends_at_total"],
    },
    {
        "id": "progress-skips-uncounted",
        "row": ROW_PROGRESS,
        "file": "shardkit/convert/splitjob.py",
        "old": "                    bar.update(1)  # before the yield",
        "new": "                    bar.update(int(out.encoded is not None))  # before the yield",
        "tests": [T + "test_progress_bar_counts_every_input_and_ends_at_total"],
    },
    # --- bench ---------------------------------------------------------------------------------------------------
    {
        "id": "bench-tiny-dataset-called-steady",
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "        if per_epoch < need:",
        "new": "        if False:",
        "tests": [T + "test_bench_says_when_the_dataset_is_too_small_for_a_steady_figure"],
    },
    {
        "id": "bench-steady-needs-one-window",
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "per_epoch, need = len(loader), max(1, nw) + 2 * window",
        "new": "per_epoch, need = len(loader), max(1, nw) + window",
        "tests": [T + "test_bench_says_when_the_dataset_is_too_small_for_a_steady_figure"],
    },
    # --- sample-data ---------------------------------------------------------------------------------------------
    {
        "id": "sample-data-fixed-size-turned-portrait",
        "row": ROW_SAMPLE,
        "file": "shardkit/demo/sampledata.py",
        "old": "if rng.random() < spread.portrait:",
        "new": "if rng.random() < 0.25:",
        "tests": [T + "test_sample_data_writes_what_it_says_and_the_quick_start_runs_on_it"],
    },
    {
        "id": "sample-data-writes-into-a-full-folder",
        "row": ROW_SAMPLE,
        "file": "shardkit/cli/cmd_sample_data.py",
        "old": "if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):",
        "new": "if False:",
        "tests": [T + "test_sample_data_splits_and_bad_arguments"],
    },
    {
        "id": "sample-data-seed-ignored",
        "row": ROW_SAMPLE,
        "file": "shardkit/cli/cmd_sample_data.py",
        "old": "        spread=spread,\n        seed=args.seed,",
        "new": "        spread=spread,\n        seed=0,",
        "tests": [T + "test_sample_data_writes_what_it_says_and_the_quick_start_runs_on_it"],
    },
]
