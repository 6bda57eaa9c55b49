"""Mutants of the read schedule (``shardkit/loader/read/ranges.py``) and ``shardkit simulate``
(``shardkit/simulate/``). Area "scale_simulate". Tests: ``tests/simulate/``."""

ROW_READPLAN = (
    "Read plan: the index's range reads and the buffered header walk's GETs are exactly what BlockReader and "
    "io.BufferedReader send (any block size, member size, start sample, continued blocks)"
)
ROW_SCHEDULE = (
    "Simulator: the schedule is the loader's: the same requests (HEAD, index GET, ranged GETs) in the same order "
    "per reader, for the real plan of every rank and worker, index or walk, flat or spread over prefixes"
)
ROW_REPORT = "Simulator report: peak GET/s is the most requests in any 1 s window (sliding, half-open)"
ROW_TIMING = (
    "Simulator timing: a reader's requests go one after another (latency plus bytes, spaced by its limiter) and "
    "a rank's first batch is ready when the reads of its samples are done"
)
ROW_BUDGET = (
    "Simulator with a request budget: the world stays within budget x prefixes GET/s in every second "
    "(one prefix: within the budget), and the node cache serves later epochs"
)

R = "tests/simulate/test_ranges.py::"
INDEX = R + "test_index_ranges_match_a_loop_over_samples"
WALK = R + "test_walk_gets_match_the_real_reader_through_a_real_buffered_reader"
BUFFERED = R + "test_buffered_read_matches_io_bufferedreader_for_any_seek_and_read"
S = "tests/simulate/test_simulate.py::"
READER = S + "test_schedule_is_what_the_real_reader_sends_for_the_real_plan"
PEAK = S + "test_peak_is_the_most_requests_in_any_one_second_window"
BUDGET = S + "test_with_a_budget_the_world_keeps_it"
CACHE = S + "test_the_node_cache_serves_later_epochs"
TIMING = S + "test_one_reader_timing_by_hand"

RP = "shardkit/loader/read/ranges.py"
SCHED = "shardkit/simulate/schedule.py"

MUTANTS = [
    {
        "id": "sim-joined-read-grows-past-the-limit",  # only the joined piece is checked against max_range
        "row": ROW_READPLAN,
        "file": RP,
        "old": "st[span[1]] - st[group[0][0]] <= max_range",
        "new": "st[span[1]] - st[group[-1][0]] <= max_range",
        "tests": [INDEX],
    },
    {
        "id": "sim-buffered-large-read-not-direct",  # a read past a whole buffer is not sent straight to the raw file
        "row": ROW_READPLAN,
        "file": RP,
        "old": "direct = rest // block_size * block_size",
        "new": "direct = 0",
        "tests": [BUFFERED, WALK],
    },
    {
        "id": "sim-walk-skipped-samples-read-their-data",
        "row": ROW_READPLAN,
        "file": RP,
        "old": "if wanted and loaded and data > 0:",
        "new": "if loaded and data > 0:",
        "tests": [WALK],
    },
    {
        "id": "sim-walk-forgets-the-peek-at-the-next-header",
        "row": ROW_READPLAN,
        "file": RP,
        "old": "            if o >= done and o + HEADER > buf.hi:\n                hit = (o, HEADER)",
        "new": "            pass",
        "tests": [WALK],
    },
    {
        "id": "sim-schedule-walk-state-kept-across-shards",
        "row": ROW_SCHEDULE,
        "file": SCHED,
        "old": "            self.walk = None\n        if not self.cached:",
        "new": "        if not self.cached:",
        "tests": [READER],
    },
    {
        "id": "sim-schedule-unshuffled-chunk-read-at-once",  # the read stage takes an unshuffled block a batch at a time
        "row": ROW_SCHEDULE,
        "file": SCHED,
        "old": "else np.arange(0, n, cfg.batch_size, dtype=np.int64)",
        "new": "else np.zeros(min(n, 1), np.int64)",
        "tests": [READER],
    },
    {
        "id": "sim-peak-in-fixed-one-second-bins",
        "row": ROW_REPORT,
        "file": "shardkit/simulate/report.py",
        "old": 'return int((np.searchsorted(t, t + window, side="left") - np.arange(len(t))).max())',
        "new": "return int(np.bincount((np.floor(t / window) - np.floor(t[0] / window)).astype(np.int64)).max())",
        "tests": [PEAK],
    },
    {
        "id": "sim-peak-window-closed",  # a request exactly one second later counted in the window
        "row": ROW_REPORT,
        "file": "shardkit/simulate/report.py",
        "old": 'np.searchsorted(t, t + window, side="left")',
        "new": 'np.searchsorted(t, t + window, side="right")',
        "tests": [PEAK],
    },
    {
        "id": "sim-limiter-without-phase",  # every process's first request at the epoch's start
        "row": ROW_BUDGET,
        "file": "shardkit/simulate/clock.py",
        "old": "phase = process_phase(p // W, p % W, self.world_size, self.phase_workers)",
        "new": "phase = 0.0",
        "tests": [BUDGET],
    },
    {
        "id": "sim-limiter-shared-per-rank-not-per-process",
        "row": ROW_BUDGET,
        "file": "shardkit/simulate/__init__.py",
        "old": "num_workers=s.workers,  # the reading processes of the world",
        "new": "num_workers=0,  # the reading processes of the world",
        "tests": [BUDGET],
    },
    {
        "id": "sim-cache-never-filled",
        "row": ROW_BUDGET,
        "file": SCHED,
        "old": "            cache[node].add(s)\n",
        "new": "                pass\n",
        "tests": [CACHE],
    },
    {
        "id": "sim-clock-requests-of-a-read-overlap",  # the next request sent when the previous one is sent, not done
        "row": ROW_TIMING,
        "file": "shardkit/simulate/clock.py",
        "old": "                ready = finish[i - 1]",
        "new": "                ready = send[i - 1]",
        "tests": [TIMING],
    },
    {
        "id": "sim-budget-shared-by-idle-workers",  # the simulator's processes are not the loader's readers
        "row": ROW_BUDGET,
        "file": "shardkit/simulate/__init__.py",
        "old": "        batches_per_rank=batches_per_rank(data, s),\n",
        "new": "",
        "tests": [S + "test_the_budget_each_process_gets_is_the_loaders"],
    },
    {
        "id": "sim-mean-over-a-run-shorter-than-a-second",  # a mean GET/s above the peak (the probe)
        "row": ROW_REPORT,
        "file": "shardkit/simulate/__init__.py",
        "old": "    duration = max(run.end, 1.0)\n",
        "new": "    duration = max(run.end, 1e-9)\n",
        "tests": [S + "test_command_json_and_errors"],
    },
]
