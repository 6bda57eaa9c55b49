"""Mutants of request budgets and backpressure: ``shardkit/storage/budget.py`` (the rules),
``shardkit/storage/retry.py`` (the limiter before every request, "slow down" -> ``slow_down``),
``shardkit/loader/stages.py`` (each worker's share). Tests: ``tests/storage/test_budget.py`` (pure, virtual
clock) and ``tests/system/test_budget_s3.py`` (moto behind the fault proxy, counted at the proxy)."""

ROW_LIMIT = (
    "Request budget: the requests of all reading processes stay within request_budget GET/s per prefix in every "
    "1 s window, measured at the proxy, and every sample arrives once"
)
ROW_SLOW = (
    "Backpressure: 503 SlowDown / 429 halve the process's request rate, which then recovers; retries do not "
    "multiply the rate"
)
ROW_AUTO = "block_size='auto': the smallest power of two in [1, 64] MiB that fits the expected byte rate in the budget"
ROW_PHASE = "Request budget: the processes of a world start evenly spread over one request interval"

T = "tests/storage/test_budget.py::"
RULE = T + "test_limiter_grants_match_the_rule"
AUTO = T + "test_auto_block_size_is_the_smallest_fitting_power_of_two"
COMPOSED = T + "test_read_budget_is_the_rules_composed"
PHASES = T + "test_phases_spread_evenly_over_the_world"
SLOW_KINDS = T + "test_what_says_slow_down"
WAITS = T + "test_retrying_file_waits_before_each_request_it_sends"
S = "tests/system/test_budget_s3.py::"
AT_PROXY = S + "test_budget_holds_at_the_proxy_across_workers"
BURST = S + "test_slowdown_burst_lowers_the_rate_and_every_sample_arrives_once"
EVERY = S + "test_every_request_an_opener_sends_waits_for_its_limiter"

BUDGET = "shardkit/storage/budget.py"
RETRY = "shardkit/storage/retry.py"

MUTANTS = [
    {
        "id": "budget-limiter-spaces-from-the-ask",  # the next slot counted from the ask, not the grant: bursts
        "row": ROW_LIMIT,
        "file": BUDGET,
        "old": "            self._k += 1\n            wait = at - now\n",
        "new": "            self._rebase(now + self._period)\n            wait = at - now\n",
        "tests": [RULE],
    },
    {
        "id": "budget-share-per-rank-not-per-worker",  # each DataLoader worker takes the whole rank's share
        "row": ROW_LIMIT,
        "file": "shardkit/loader/stages.py",
        "old": "        num_workers=world.num_workers,\n        rank=world.rank,",
        "new": "        num_workers=1,\n        rank=world.rank,",
        "tests": [AT_PROXY],
    },
    {
        "id": "budget-fills-not-limited",  # the read-ahead fills (the header walk's GETs) skip the limiter
        "row": ROW_LIMIT,
        "file": RETRY,
        "old": "if sends and self._limiter is not None and not self._at_end(self._f):",
        "new": "if False and sends and self._limiter is not None and not self._at_end(self._f):",
        "tests": [WAITS, EVERY, AT_PROXY],
    },
    {
        "id": "budget-size-probe-not-limited",  # the HEAD of every open skips the limiter
        "row": ROW_LIMIT,
        "file": RETRY,
        "old": "                    if self._limiter is not None and self._open_sends:\n",
        "new": "                    if False:\n",
        "tests": [WAITS, EVERY],
    },
    {
        "id": "budget-fetch-not-limited",  # sample-index fetches skip the limiter
        "row": ROW_LIMIT,
        "file": "shardkit/storage/opener.py",
        "old": "            if self.limiter is not None:\n                self.limiter.acquire()\n            try:\n",
        "new": "            try:\n",
        "tests": [EVERY],
    },
    {
        "id": "budget-waits-at-end-of-file",  # a token spent on a read fsspec answers without a request
        "row": ROW_LIMIT,
        "file": RETRY,
        "old": "        return isinstance(size, int) and self._pos >= size\n",
        "new": "        return False\n",
        "tests": [WAITS],
    },
    {
        "id": "budget-slowdown-ignored",  # SlowDown only retried, as before the issue: the rate comes straight back
        "row": ROW_SLOW,
        "file": RETRY,
        "old": "                    self._limiter.slow_down()  # lower the rate first: the retry below waits for it\n",
        "new": "                    pass\n",
        "tests": [WAITS, EVERY, BURST],
    },
    {
        "id": "budget-429-not-a-slowdown",
        "row": ROW_SLOW,
        "file": BUDGET,
        "old": "_SLOWDOWN_STATUS = (429, 503)",
        "new": "_SLOWDOWN_STATUS = (503,)",
        "tests": [SLOW_KINDS],
    },
    {
        "id": "budget-slowdown-forgets-the-calm",  # halving the stale rate: calm seconds without requests not counted
        "row": ROW_SLOW,
        "file": BUDGET,
        "old": "            self._recover(now)  # the calm seconds since the last signal count even when nothing was sent\n",
        "new": "",
        "tests": [RULE],
    },
    {
        "id": "budget-never-recovers",
        "row": ROW_SLOW,
        "file": BUDGET,
        "old": "            self.current = min(self.rate, self.current + steps * self.rate / RECOVER_STEPS)",
        "new": "            self.current = min(self.rate, self.current)",
        "tests": [RULE],
    },
    {
        "id": "budget-auto-one-size-too-small",  # stops one doubling early: twice the budget's requests
        "row": ROW_AUTO,
        "file": BUDGET,
        "old": "    while size < need and size < hi:",
        "new": "    while size * 2 < need and size < hi:",
        "tests": [AUTO],
    },
    {
        "id": "budget-auto-rate-of-a-rank-per-worker",  # each worker sized for the whole rank's bytes
        "row": ROW_AUTO,
        "file": BUDGET,
        "old": "        per_process = expected_img_per_s * max(0.0, bytes_per_sample) / workers",
        "new": "        per_process = expected_img_per_s * max(0.0, bytes_per_sample)",
        "tests": [COMPOSED],
    },
    {
        "id": "budget-phases-clump",  # rank and worker added, not laid out: processes share phases
        "row": ROW_PHASE,
        "file": BUDGET,
        "old": "    index = rank * workers + max(0, worker)",
        "new": "    index = rank + max(0, worker)",
        "tests": [PHASES],
    },
    {
        "id": "budget-idle-workers-share-the-budget",  # every worker counted, also those without a batch to read
        "row": ROW_LIMIT,
        "file": BUDGET,
        "old": "        workers = max(1, min(workers, batches_per_rank))",
        "new": "        workers = workers",
        "tests": [COMPOSED],
    },
    {
        "id": "budget-loader-forgets-the-batches-per-rank",  # the rule is right, the worker does not tell it
        "row": ROW_LIMIT,
        "file": "shardkit/loader/stages.py",
        "old": "openers = [_opener(ds, k, world, work.split.num_batches) for k in rows.tolist()]",
        "new": "openers = [_opener(ds, k, world) for k in rows.tolist()]",
        "tests": [S + "test_the_budget_is_shared_by_the_workers_that_read"],
    },
    {
        "id": "budget-idle-grant-off-the-lattice",  # after an idle spell granted at once, off the lattice: one more per window
        "row": ROW_LIMIT,
        "file": BUDGET,
        "old": "            if self._slot() < now:  # idle: the first point after now\n",
        "new": "            if self._slot() < now:  # idle: the first point after now\n                self._rebase(now)\n",
        "tests": [RULE, T + "test_the_world_never_exceeds_the_budget_in_any_second"],
    },
    {
        "id": "budget-index-slowdown-falls-back-to-the-walk",  # the index given up at once: the walk multiplies GETs
        "row": ROW_SLOW,
        "file": "shardkit/storage/opener.py",
        "old": "                if final() or not is_transient(exc):\n                    raise\n",
        "new": "                if True:\n                    raise\n",
        "tests": [S + "test_a_slowdown_on_a_sample_index_is_retried_not_walked"],
    },
]
