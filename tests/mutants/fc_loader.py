"""Mutants of what a new user meets in the loader, bench and targets: ``shardkit bench`` on datasets without a class
label and on an empty split (``shardkit/ops/bench.py``), the ``__main__`` guard of spawned workers
(``shardkit/loader/pool.py``), the tv_tensors round trip (``shardkit/targets/``), a source that takes no samples and
reordered sources on resume (``shardkit/plan/member.py``, ``shardkit/loader/state.py``), the ``detect`` preset's
offsets, and the simulator's prefix table and read-ahead. Tests: ``tests/loader/test_first_contact_loader.py``,
``tests/targets/test_first_contact_targets.py``, ``tests/simulate/test_first_contact_simulate.py``."""

ROW_BENCH = (
    "shardkit bench: any dataset benches with the fields training loads (every stored field, or --fields), its "
    "targets moved by the preset's crops; an empty split is one line"
)
ROW_GUARD = (
    "Loader: iterating a loader with spawn or forkserver workers outside if __name__ == '__main__' is one line "
    "naming the script and line"
)
ROW_TV = "torchvision: as_tv_tensors / from_tv_tensors round-trip a whole batch (keys, captions, class rows, instances)"
ROW_TARGETS = "Targets: targets_of counts every row whose label is not -1 when box_count is not asked"
ROW_DETECT = "Detection presets: detect draws scale, left and top from their own uniforms per sample"
ROW_MIX = (
    "Mixtures: weight=0 or repeat=0 among several sources is refused in one line; sources given in another "
    "order are named with the checkpoint's order"
)
ROW_SIM = "Simulator: the prefix table lists the hottest prefixes first; read-ahead 2 x workers batches ahead"
ROW_DEFAULT = "GPU augmentation: min_visible has one default (MIN_VISIBLE), the one the guides quote"

L = "tests/loader/test_first_contact_loader.py::"
T = "tests/targets/test_first_contact_targets.py::"
S = "tests/simulate/test_first_contact_simulate.py::"

MUTANTS = [
    {
        "id": "fc-bench-asks-for-no-fields",  # a dataset without 'label' dies with a traceback again
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "names = bench_fields(manifest) if fields is None else parse_fields(fields)",
        "new": "names = parse_fields(fields)",
        "tests": [L + "test_bench_measures_the_fields_each_dataset_stores"],
    },
    {
        "id": "fc-bench-fields-drop-the-targets",  # detection benches without its targets: a rosier figure
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "    stored = tuple(f for f in available(manifest) if f not in ALWAYS and f not in OPT_IN)\n",
        "new": "    stored = tuple(f for f in available(manifest) if f not in ALWAYS and f in ('label', 'text'))\n",
        "tests": [L + "test_bench_measures_the_fields_each_dataset_stores"],
    },
    {
        "id": "fc-bench-empty-split-not-checked",
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "    if snap.num_samples == 0:\n",
        "new": "    if False:\n",
        "tests": [L + "test_bench_of_an_empty_split_is_one_line"],
    },
    {
        "id": "fc-decode-ceiling-indexes-no-batch",  # IndexError: batches[0]
        "row": ROW_BENCH,
        "file": "shardkit/ops/bench.py",
        "old": "    if not batches:\n",
        "new": "    if False:\n",
        "tests": [L + "test_bench_of_an_empty_split_is_one_line"],
    },
    {
        "id": "fc-main-guard-never-checked",  # 200 lines ending in "worker died mid-epoch"
        "row": ROW_GUARD,
        "file": "shardkit/loader/pool.py",
        "old": "    where = unguarded_main_line()\n    if where is not None:\n        path, line = where\n        raise ShardkitError(",
        "new": "    where = unguarded_main_line()\n    if False:\n        path, line = where\n        raise ShardkitError(",
        "tests": [L + "test_script_without_main_guard_gets_one_line_saying_what_to_do"],
    },
    {
        "id": "fc-main-guard-only-for-spawn",  # forkserver (Linux's default from Python 3.14) forgotten
        "row": ROW_GUARD,
        "file": "shardkit/loader/pool.py",
        "old": '    if method == "fork":\n',
        "new": '    if method != "spawn":\n',
        "tests": [L + "test_script_without_main_guard_gets_one_line_saying_what_to_do"],
    },
    {
        "id": "fc-tv-key-not-batched-back",
        "row": ROW_TV,
        "file": "shardkit/targets/torchvision.py",
        "old": "        if name in first:\n",
        "new": '        if name in first and field != "key":\n',
        "tests": [T + "test_tv_tensors_round_trip_is_the_whole_batch"],
    },
    {
        "id": "fc-instance-map-of-no-boxes-is-row-0",  # every pixel of an empty sample read as object 0
        "row": ROW_TV,
        "file": "shardkit/targets/instances.py",
        "old": "        return torch.full(masks.shape[1:], NO_OBJECT, dtype=torch.int16, device=masks.device)",
        "new": "        return torch.zeros(masks.shape[1:], dtype=torch.int16, device=masks.device)",
        "tests": [T + "test_tv_tensors_round_trip_is_the_whole_batch"],
    },
    {
        "id": "fc-targets-of-counts-positive-labels",  # class 0 objects vanish from the count
        "row": ROW_TARGETS,
        "file": "shardkit/targets/batchdict.py",
        "old": "count = (labels >= 0).sum(1)",
        "new": "count = (labels > 0).sum(1)",
        "tests": [T + "test_targets_of_counts_every_labelled_row_when_box_count_is_not_asked"],
    },
    {
        "id": "fc-detect-top-reuses-left-uniform",  # crops on a diagonal; the targets follow, no oracle sees it
        "row": ROW_DETECT,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "top = np.where(sh >= size, np.floor(u[:, 2] * (sh - size + 1)), -np.floor(u[:, 2] * (size - sh + 1)))",
        "new": "top = np.where(sh >= size, np.floor(u[:, 1] * (sh - size + 1)), -np.floor(u[:, 1] * (size - sh + 1)))",
        "tests": [
            T + "test_detect_offsets_are_drawn_per_sample_and_per_axis",
            T + "test_detect_offsets_fill_the_square_not_a_diagonal",
        ],
    },
    {
        "id": "fc-min-visible-default-drifts",
        "row": ROW_DEFAULT,
        "file": "shardkit/targets/geometry.py",
        "old": "MIN_VISIBLE = 0.1",
        "new": "MIN_VISIBLE = 0.0",
        "tests": [T + "test_min_visible_default_is_one_value_that_the_guides_quote"],
    },
    {
        "id": "fc-weight-zero-accepted",  # counts toward the epoch size: 40 repeats of another source
        "row": ROW_MIX,
        "file": "shardkit/plan/member.py",
        "old": "        if zero is not None and len(sources) > 1:\n",
        "new": "        if False:\n",
        "tests": [
            L + "test_a_source_of_several_that_takes_no_samples_is_refused_in_one_line",
            L + "test_weight_zero_leaves_nothing_to_the_epoch_in_the_real_loader",
        ],
    },
    {
        "id": "fc-reordered-sources-read-as-other-data",
        "row": ROW_MIX,
        "file": "shardkit/loader/state.py",
        "old": "        _check_order(saved, current)\n",
        "new": "        pass\n",
        "tests": [L + "test_resume_with_the_sources_reordered_names_the_checkpoints_order"],
    },
    {
        "id": "fc-sim-prefix-table-coldest-first",
        "row": ROW_SIM,
        "file": "shardkit/simulate/report.py",
        "old": "ordered = sorted(self.prefixes, key=lambda r: -r.peak_get_per_s)",
        "new": "ordered = sorted(self.prefixes, key=lambda r: r.peak_get_per_s)",
        "tests": [S + "test_prefix_table_lists_the_hottest_prefixes_first"],
    },
    {
        "id": "fc-sim-prefetch-lead-one-batch-per-worker",
        "row": ROW_SIM,
        "file": "shardkit/simulate/clock.py",
        "old": "lead = 2 * W if num_workers > 0 else 0",
        "new": "lead = W if num_workers > 0 else 0",
        "tests": [S + "test_read_ahead_starts_two_batches_per_worker_ahead_of_the_consumer"],
    },
]
