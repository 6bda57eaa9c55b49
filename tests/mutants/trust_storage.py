"""Mutants of the read path's checks against the manifest (``shardkit/storage/cache.py``,
``opener.py``, ``retry.py``, ``trust.py``): content-addressed cache, sizes on every open, changed
objects never retried or spliced, evictions that race an open, dead downloads swept."""

ROW_CONTENT = (
    "Object storage: the cache is keyed by the manifest's sha256 and size; a download is kept only when its "
    "sha256 is the manifest's, fsynced, and a hit of the wrong size is dropped and fetched again"
)
ROW_SIZES = (
    "Object storage: every open checks the manifest's size (remote as local, cache hits too): "
    "one StorageError naming URL and both sizes; check_sizes=False serves what is readable"
)
ROW_CHANGED = (
    "Object storage: an object that changed during a read (FileExpired, or a reopen that finds another size "
    "or ETag) is one StorageError, never retried nor spliced"
)
ROW_SHARED = (
    "Object storage: processes sharing a cache never open an evicted entry; a full disk streams without the "
    "cache; temporary files of dead downloaders are removed"
)
ROW_REQUESTS = "Object storage: cached shards read by ranges send no GET; the index fetch keeps to retry_budget_s"

CACHE = "shardkit/storage/cache.py"
OPENER = "shardkit/storage/opener.py"
RETRY = "shardkit/storage/retry.py"
TC = "tests/storage/test_cache.py::"
TS = "tests/system/test_trust_storage.py::"
ORACLE = TS + "test_what_an_open_delivers_is_the_manifests_or_a_clear_error"

MUTANTS = [
    {
        "id": "trust-cache-keyed-by-url",  # a dataset converted again at the same URL: the stale shard served
        "row": ROW_CONTENT,
        "file": CACHE,
        "old": "        path = self.path_for(sha256, nbytes)\n        hit, tf = self._claim(",
        "new": "        path = self.path_for(hashlib.sha256(url.encode()).hexdigest(), nbytes)\n"
        "        hit, tf = self._claim(",
        "tests": [TC + "test_entries_are_keyed_by_content_not_url"],
    },
    {
        "id": "trust-cache-digest-not-compared",
        "row": ROW_CONTENT,
        "file": CACHE,
        "old": "if digest != sha256.lower():",
        "new": "if False:",
        "tests": [TC + "test_the_cache_keeps_only_the_manifests_bytes", ORACLE],
    },
    {
        "id": "trust-cache-hit-size-unchecked",
        "row": ROW_CONTENT,
        "file": CACHE,
        "old": "        if size != nbytes:\n            f.close()\n            os.unlink(path)",
        "new": "        if False:\n            f.close()\n            os.unlink(path)",
        "tests": [
            TC + "test_an_entry_cut_short_is_dropped_and_fetched_again",
            TS + "test_a_cache_hit_is_checked_against_the_size",
        ],
    },
    {
        "id": "trust-cache-not-fsynced",
        "row": ROW_CONTENT,
        "file": CACHE,
        "old": "                os.fsync(tf.fileno())\n            except OSError as exc:\n                if not (sink.full",
        "new": "                pass\n            except OSError as exc:\n                if not (sink.full",
        "tests": [TC + "test_a_download_is_fsynced_before_it_is_published"],
    },
    {
        "id": "trust-cache-opened-after-the-lock",  # evicted between the lock and the open: FileNotFoundError
        "row": ROW_SHARED,
        "file": CACHE,
        "old": "                hit = open_hit(path)\n                if hit is not None:\n                    return hit, None\n",
        "new": "                hit = open_hit(path)\n            if hit is not None:\n                hit.close()\n"
        "                return open(path, 'rb'), None\n            with self._locked():\n",
        "tests": [TC + "test_a_shard_evicted_after_the_lock_is_released_is_still_read"],
    },
    {
        "id": "trust-cache-download-opened-after-the-lock",
        "row": ROW_SHARED,
        "file": CACHE,
        "old": '                os.replace(tmp, path)\n                out = open(path, "rb", buffering=1 << 20)\n'
        "                os.utime(path)\n",
        "new": "                os.replace(tmp, path)\n                os.utime(path)\n"
        '            out = open(path, "rb", buffering=1 << 20)\n',
        "tests": [TC + "test_a_shard_evicted_after_the_lock_is_released_is_still_read"],
    },
    {
        "id": "trust-cache-dead-downloads-swept-only-with-a-limit",
        "row": ROW_SHARED,
        "file": CACHE,
        "old": "        entries = self._entries()  # also sweeps dead downloads when there is no limit\n"
        "        if self.limit is None:\n            return True\n",
        "new": "        if self.limit is None:\n            return True\n        entries = self._entries()\n",
        "tests": [TC + "test_temporary_files_of_dead_downloaders_are_removed_without_a_limit"],
    },
    {
        "id": "trust-cache-live-download-swept",
        "row": ROW_SHARED,
        "file": CACHE,
        "old": "    except BlockingIOError:\n        return True\n",
        "new": "    except BlockingIOError:\n        return False\n",
        "tests": [TC + "test_temporary_files_of_dead_downloaders_are_removed_without_a_limit"],
    },
    {
        "id": "trust-cache-full-disk-fails-training",
        "row": ROW_SHARED,
        "file": CACHE,
        "old": "                if not (sink.full or exc.errno in _FULL):",
        "new": "                if True:",
        "tests": [TC + "test_a_full_disk_streams_without_the_cache"],
    },
    {
        "id": "trust-remote-size-unchecked",
        "row": ROW_SIZES,
        "file": RETRY,
        "old": "            check_size(self.url, ident[0], self._expected_size)\n",
        "new": "            pass\n",
        "tests": [ORACLE],
    },
    {
        "id": "trust-local-size-unchecked",
        "row": ROW_SIZES,
        "file": OPENER,
        "old": "        if size != nbytes:\n            f.close()\n            raise size_mismatch(url, size, nbytes)",
        "new": "        if False:\n            f.close()\n            raise size_mismatch(url, size, nbytes)",
        "tests": [ORACLE],
    },
    {
        "id": "trust-check-sizes-off-ignored",
        "row": ROW_SIZES,
        "file": OPENER,
        "old": '        want = nbytes if self.cfg.check_sizes else None\n        if storage.scheme(url) == "pipe":',
        "new": '        want = nbytes\n        if storage.scheme(url) == "pipe":',
        "tests": [TS + "test_check_sizes_off_serves_what_is_readable"],
    },
    {
        "id": "trust-file-expired-retried",
        "row": ROW_CHANGED,
        "file": RETRY,
        "old": "                if is_changed_object(exc):\n                    self._drop()\n",
        "new": "                if False:\n                    self._drop()\n",
        "tests": [
            TS + "test_an_object_replaced_mid_read_is_an_error_not_a_splice",
            TS + "test_file_expired_is_not_transient",
            TS + "test_an_object_that_expired_during_a_read_is_one_error_never_retried",
        ],
    },
    {
        "id": "trust-file-expired-transient",
        "row": ROW_CHANGED,
        "file": RETRY,
        "old": " or is_changed_object(exc):\n        return False",
        "new": ":\n        return False",
        "tests": [TS + "test_file_expired_is_not_transient"],
    },
    {
        "id": "trust-reopen-identity-unchecked",
        "row": ROW_CHANGED,
        "file": RETRY,
        "old": "        elif any(a is not None and b is not None and a != b for a, b in zip(ident, self._identity)):",
        "new": "        elif False:",
        "tests": [
            TS + "test_a_reopen_after_a_transient_error_must_find_the_same_object",
            TS + "test_a_retry_after_the_object_was_replaced_is_an_error_not_a_splice",
        ],
    },
    {
        "id": "trust-ranges-bypass-the-cache",
        "row": ROW_REQUESTS,
        "file": OPENER,
        "old": "        cached = self._open_cached(url, nbytes, sha256)\n        if cached is not None:\n"
        "            return cached\n        return self._retrying(url, want)",
        "new": "        return self._retrying(url, want)",
        "tests": [TS + "test_a_second_pass_over_cached_ranges_sends_no_shard_get"],
    },
    {
        "id": "trust-index-fetch-ignores-the-budget",
        "row": ROW_REQUESTS,
        "file": OPENER,
        "old": "if failures > self.cfg.max_retries or spent > self.cfg.retry_budget_s:",
        "new": "if failures > self.cfg.max_retries:",
        "tests": [TS + "test_the_index_fetch_keeps_to_the_retry_budget"],
    },
]

ROW_SILENT = (
    "Object storage: a server that accepts and never answers: every request has a read timeout; the read ends "
    "within retry_budget_s (or one attempt) saying the server did not answer"
)
SILENT = TS + "test_a_server_that_never_answers_is_bounded_and_named"
MUTANTS += [
    {
        "id": "trust-no-read-timeout",
        "row": ROW_SILENT,
        "file": "shardkit/storage/timeouts.py",
        "old": "    if timeout_s is None:\n        return storage_options\n",
        "new": "    if True:\n        return storage_options\n",
        # the http case: it hangs to the test's timeout (s3 passes, slowly, on botocore's own read timeout)
        "tests": [SILENT + "[http]"],
    },
    {
        "id": "trust-silent-attempts-past-the-budget",
        "row": ROW_SILENT,
        "file": RETRY,
        "old": "        return elapsed + backoff_s(self.url, failures) + t.attempt_s > self.retry_budget_s\n",
        "new": "        return False\n",
        "tests": [SILENT],
    },
]

ROW_NO_RANGE = (
    "Object storage: an HTTP server without Range requests: one line says so and names cache_dir=; the cache "
    "downloads whole shards (restarted after a failure)"
)
NO_RANGE = TS + "test_a_server_without_range_requests_is_named_and_the_cache_works"
MUTANTS += [
    {
        "id": "trust-no-range-not-detected",
        "row": ROW_NO_RANGE,
        "file": RETRY,
        "old": "                if is_no_range(exc):\n",
        "new": "                if False:\n",
        "tests": [NO_RANGE, TS + "test_a_server_without_range_requests_is_named_through_fsspecs_file"],
    },
    {
        "id": "trust-no-range-stream-not-restarted",
        "row": ROW_NO_RANGE,
        "file": OPENER,
        "old": "            sink.restart()\n",
        "new": "            pass\n",
        "tests": [NO_RANGE],
    },
]
