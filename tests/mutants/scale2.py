"""Mutants of fewer requests per byte and one download per node: ranged reads without a size probe
(``shardkit/storage/ranged.py``, ``opener.py``), the node cache's claims and sidecars (``cache.py``), and the
simulator's counting of both (``shardkit/simulate/``). Area "scale2"."""

ROW_PROBE = (
    "Object storage: a remote shard is opened without a size probe (the manifest's size); a different size "
    "(a Content-Range total, a range past the end, a short answer) is one error naming the URL and both sizes "
    "at the first read, never retried, never served; an object replaced mid-read is an error, never spliced"
)
ROW_CLAIM = (
    "Node cache: processes sharing a cache folder that miss one shard (or sample index) download it once, the "
    "others wait for the downloader's flock claim (counted in cache_waits); a dead downloader's claim is taken "
    "over; a cached sample index is checked (its CRC-32, the shard digest it names) on every hit"
)
ROW_SIM = (
    "Simulator: requests are counted as the loader sends them (no HEAD, an index once per node with a cache, "
    "one download per node, one manifest GET per rank); store_bytes_per_epoch and requests_per_gib (start-up "
    "included) are exact"
)

TS = "tests/system/test_trust_storage.py::"
PROBE = TS + "test_an_open_sends_no_size_probe_and_a_changed_size_is_caught_at_the_first_read"
RANGED = "tests/storage/test_ranged.py::test_a_range_file_delivers_the_manifests_bytes_or_names_both_sizes"
CC = "tests/system/test_cache_claims.py::"
FOUR = CC + "test_four_processes_missing_one_shard_download_it_once"
KILLED = CC + "test_a_downloader_killed_mid_download_is_taken_over"
SIDECAR = CC + "test_a_sample_index_is_fetched_once_per_node_and_checked_on_every_hit"
SHARING = "tests/simulate/test_schedule_vs_loader.py::test_ranks_sharing_a_cache_send_the_simulated_requests"
SB = "tests/simulate/test_store_bytes.py::"
BYTES = SB + "test_store_bytes_and_requests_per_gib"
WAITS = SB + "test_cache_waits_are_the_opens_of_a_shard_another_process_of_the_node_downloaded"

MUTANTS = [
    {
        "id": "scale2-size-probe-back",  # every open of a remote shard sends a HEAD again
        "row": ROW_PROBE,
        "file": "shardkit/storage/opener.py",
        "old": "        ranged = ranged_backend(url)\n",
        "new": "        ranged = False\n",
        "tests": [PROBE],
    },
    {
        "id": "scale2-content-range-total-unchecked",  # a longer object served as its first bytes
        "row": ROW_PROBE,
        "file": "shardkit/storage/ranged.py",
        "old": "            if self._expected is not None and ans.total != self._expected:",
        "new": "            if False:",
        "tests": [PROBE, RANGED],
    },
    {
        "id": "scale2-short-answer-served",  # an object cut short read as a short shard, no error
        "row": ROW_PROBE,
        "file": "shardkit/storage/ranged.py",
        "old": "            if self._expected is not None:\n                raise self._short(ans.total, lo + len(ans.data))",
        "new": "            if False:\n                raise self._short(ans.total, lo + len(ans.data))",
        "tests": [RANGED],
    },
    {
        "id": "scale2-past-end-served-empty",  # a 416 read as the end of the shard
        "row": ROW_PROBE,
        "file": "shardkit/storage/ranged.py",
        "old": "            if self._expected is None:\n                self.size = lo if past.total is None else past.total",
        "new": "            if True:\n                self.size = lo if past.total is None else past.total",
        "tests": [PROBE, RANGED],
    },
    {
        "id": "scale2-etag-not-pinned",  # a replaced object read at the old offsets: two versions spliced
        "row": ROW_PROBE,
        "file": "shardkit/storage/ranged.py",
        "old": "            if self.pin.etag is None:\n                self.pin.etag = ans.etag",
        "new": "            if self.pin.etag is None:\n                pass",
        "tests": [TS + "test_an_object_replaced_mid_read_is_an_error_not_a_splice"],
    },
    {
        "id": "scale2-claim-ignored",  # every process of a node downloads the shard itself
        "row": ROW_CLAIM,
        "file": "shardkit/storage/cache.py",
        "old": "                claim = _open_claim(tmp)\n",
        "new": "                claim = None\n",
        "tests": [FOUR],
    },
    {
        "id": "scale2-dead-claim-kept",  # a dead downloader's file counts as claimed: nobody takes it over
        "row": ROW_CLAIM,
        "file": "shardkit/storage/cache.py",
        "old": "    os.close(fd)  # closing also releases the lock just taken\n    return None\n",
        "new": "    return fd\n",
        "tests": [KILLED],
    },
    {
        "id": "scale2-cache-waits-uncounted",
        "row": ROW_CLAIM,
        "file": "shardkit/storage/cache.py",
        "old": "                self.waits += 1\n",
        "new": "                pass\n",
        "tests": [FOUR],
    },
    {
        "id": "scale2-sidecar-hit-unchecked",  # a damaged cached index served without its CRC-32 check
        "row": ROW_CLAIM,
        "file": "shardkit/storage/cache.py",
        "old": "            try:\n                checked.append(check(data))\n            except Exception as exc:",
        "new": "            try:\n                checked.append(check(data) if len(data) < 0 else None)\n"
        "            except Exception as exc:",
        "tests": [SIDECAR],
    },
    {
        "id": "scale2-index-not-through-cache",  # every process fetches every index from the store
        "row": ROW_CLAIM,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                idx = self.opener.fetch_sidecar(url, sha, check)",
        "new": "                idx = check(self.opener.fetch(url))",
        "tests": [SHARING],
    },
    {
        "id": "scale2-sim-index-per-process",
        "row": ROW_SIM,
        "file": "shardkit/simulate/schedule.py",
        "old": "            if index_cache is None or s not in index_cache[node]:",
        "new": "            if True:",
        "tests": [SHARING, BYTES],
    },
    {
        "id": "scale2-sim-waits-of-earlier-epochs",  # a hit of a shard cached in an earlier epoch counted a wait
        "row": ROW_SIM,
        "file": "shardkit/simulate/schedule.py",
        "old": "            if self.fetched.get((node, s), p) != p:",
        "new": "            if True:",
        "tests": [WAITS],
    },
    {
        "id": "scale2-sim-startup-head",  # the manifest's size probe still counted
        "row": ROW_SIM,
        "file": "shardkit/simulate/__init__.py",
        "old": "    startup = s.world_size  #",
        "new": "    startup = 2 * s.world_size  #",
        "tests": [BYTES],
    },
    {
        "id": "scale2-sim-store-bytes-cumulative",
        "row": ROW_SIM,
        "file": "shardkit/simulate/__init__.py",
        "old": "        per_epoch.append(int(nbytes[-1].sum()))",
        "new": "        per_epoch.append(int(np.concatenate(nbytes).sum()))",
        "tests": [BYTES],
    },
    {
        "id": "scale2-sim-requests-per-gib-without-startup",
        "row": ROW_SIM,
        "file": "shardkit/simulate/__init__.py",
        "old": "        requests_per_gib=(len(t) + startup) / max(",
        "new": "        requests_per_gib=(len(t) + 0) / max(",
        "tests": [BYTES],
    },
    {
        "id": "scale2-missing-shard-not-named-not-found",
        "row": ROW_PROBE,
        "file": "shardkit/storage/retry.py",
        "old": '                    raise StorageError(f"{self.url}: not found") from None',
        "new": "                    raise",
        "tests": ["tests/system/test_faults_s3.py::test_missing_and_denied_objects_are_not_retried"],
    },
]
