"""Mutants of reading object storage (``shardkit/storage/retry.py``, ``shardkit/storage/cache.py``)."""

ROW_RETRY = "Object storage that fails: retried with capped, jittered backoff, resumed at the byte offset"
ROW_NOT_RETRIED = "Object storage: missing objects, denied access and bugs are not retried; botocore's retries off"
ROW_BUDGET = (
    "Object storage: down longer than the budget (or max_retries): one bounded StorageError naming URL and offset"
)
ROW_CACHE = "Object storage: the shard cache holds exactly the manifest's bytes, least recently used evicted first"

T = "tests/storage/test_storage_oracle.py"
T_S3 = "tests/system/test_faults_s3.py"

MUTANTS = [
    {
        "id": "retry-backoff-constant",
        "row": ROW_RETRY,
        "file": "shardkit/storage/retry.py",
        "old": "base = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))",
        "new": "base = _BACKOFF_S",
        "tests": ["tests/system/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
    {
        "id": "retry-backoff-uncapped",
        "row": ROW_RETRY,
        "file": "shardkit/storage/retry.py",
        "old": "base = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))",
        "new": "base = _BACKOFF_S * 2 ** (attempt - 1)",
        "tests": ["tests/system/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
    {
        "id": "retry-backoff-no-jitter",
        "row": ROW_RETRY,
        "file": "shardkit/storage/retry.py",
        "old": 'return base * (0.5 + int.from_bytes(h, "big") / 65535 / 2)',
        "new": "return base",
        "tests": ["tests/system/test_faults_s3.py::test_retries_back_off_exponentially_capped_with_jitter"],
    },
    {
        "id": "retry-reopen-reads-from-the-start",
        "row": ROW_RETRY,
        "file": "shardkit/storage/retry.py",
        "old": "if self._f.tell() != self._pos:\n                    self._f.seek(self._pos)",
        "new": "if False:\n                    self._f.seek(self._pos)",
        "tests": [f"{T}::test_flaky_reads_deliver_every_byte_once_resumed_at_the_failed_offset"],
    },
    {
        "id": "retry-denied-access-retried",
        "row": ROW_NOT_RETRIED,
        "file": "shardkit/storage/retry.py",
        "old": "_FATAL = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)",
        "new": "_FATAL = (FileNotFoundError, IsADirectoryError, NotADirectoryError)",
        "tests": [f"{T}::test_denied_access_and_bugs_are_not_retried"],
    },
    {
        "id": "retry-bugs-look-like-a-flaky-network",
        "row": ROW_NOT_RETRIED,
        "file": "shardkit/storage/retry.py",
        "old": "                if not is_transient(exc):\n",
        "new": "                if False:\n",
        "tests": [f"{T}::test_denied_access_and_bugs_are_not_retried"],
    },
    {
        "id": "retry-botocore-retries-left-on",
        "row": ROW_NOT_RETRIED,
        "file": "shardkit/storage/retry.py",
        "old": '    ck["retries"] = {"total_max_attempts": 1}\n    return {**storage_options, "config_kwargs": ck}',
        "new": "    return storage_options",
        "tests": [f"{T_S3}::test_botocore_retries_off_only_where_we_own_them"],
    },
    {
        "id": "retry-callers-own-retries-overridden",
        "row": ROW_NOT_RETRIED,
        "file": "shardkit/storage/retry.py",
        "old": '    if "retries" in ck:\n        return storage_options',
        "new": "    if False:\n        return storage_options",
        "tests": [f"{T_S3}::test_botocore_retries_off_only_where_we_own_them"],
    },
    {
        "id": "retry-one-retry-fewer-than-max",
        "row": ROW_BUDGET,
        "file": "shardkit/storage/retry.py",
        "old": "if failures > self.max_retries or spent >= self.retry_budget_s:",
        "new": "if failures >= self.max_retries or spent >= self.retry_budget_s:",
        "tests": [f"{T}::test_exactly_max_retries_retries_then_success"],
    },
    {
        "id": "retry-wait-not-capped-at-the-budget-left",
        "row": ROW_BUDGET,
        "file": "shardkit/storage/retry.py",
        "old": "self._sleep(min(backoff_s(self.url, failures), max(0.0, self.retry_budget_s - spent)))",
        "new": "self._sleep(backoff_s(self.url, failures))",
        "tests": [f"{T}::test_waits_never_pass_the_budget"],
    },
    {
        "id": "cache-hit-not-stamped",
        "row": ROW_CACHE,
        "file": "shardkit/storage/cache.py",
        "old": "os.utime(path)  # LRU stamp",
        "new": "pass  # LRU stamp",
        "tests": [f"{T}::test_a_cache_hit_refreshes_the_lru_stamp"],
    },
    {
        "id": "cache-evicts-the-most-recent-first",
        "row": ROW_CACHE,
        "file": "shardkit/storage/cache.py",
        "old": "for _, size, path in sorted(e for e in entries if not os.path.basename(e[2]).startswith(_TMP)):",
        "new": "for _, size, path in sorted((e for e in entries if not os.path.basename(e[2]).startswith(_TMP)), reverse=True):",
        "tests": ["tests/storage/test_cache.py::test_lru_eviction_and_limit"],
    },
    {
        "id": "cache-short-download-published",
        "row": ROW_CACHE,
        "file": "shardkit/storage/cache.py",
        "old": "if sink.written != nbytes:",
        "new": "if False:",
        "tests": ["tests/storage/test_cache.py::test_download_size_mismatch_leaves_nothing"],
    },
    {
        "id": "cache-oversized-shard-empties-the-cache",
        "row": ROW_CACHE,
        "file": "shardkit/storage/cache.py",
        "old": "        if nbytes > self.limit:\n            return False",
        "new": "        if False:\n            return False",
        "tests": [f"{T}::test_a_shard_too_large_for_the_cache_evicts_nothing"],
    },
]
