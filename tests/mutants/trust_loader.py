"""Mutants of checked reads: per-sample CRC32C in the sample index, checked on every read
(``shardkit/format/index.py``, ``shardkit/format/writer.py``, ``shardkit/loader/read/blocks.py``)."""

ROW_CHECKED = (
    "Checked reads: every sample delivered through a sample index matches its CRC32C and tar headers; "
    "a changed sample is withheld and counted (DataError under strict), never delivered"
)
ROW_INDEX_CACHE = (
    "Checked reads: sample indexes are cached least recently used; a sidecar of the wrong length is refused"
)

CHANGED = "tests/loader/test_checked_reads.py::test_changed_bytes_are_never_delivered"
STRICT = "tests/loader/test_checked_reads.py::test_changed_sample_with_workers_and_strict"

MUTANTS = [
    {
        "id": "checksum-not-checked",
        "row": ROW_CHECKED,
        "file": "shardkit/format/index.py",
        "old": "        if self.crc32c is None:\n            return []",
        "new": "        if True:\n            return []",
        "tests": [CHANGED],
    },
    {
        "id": "checksum-of-the-data-only",  # the writer's CRC skips the sample's headers: every read disagrees
        "row": ROW_CHECKED,
        "file": "shardkit/format/writer.py",
        "old": "crcs.append(crc32c(sample_bytes))",
        "new": "crcs.append(crc32c(sample_bytes[512:]))",
        "tests": ["tests/cli/test_info_verify.py::test_verify_clean_and_corrupted"],
    },
    {
        "id": "checksum-first-sample-only",  # a block's checksums compared for its first sample alone
        "row": ROW_CHECKED,
        "file": "shardkit/format/index.py",
        "old": "            for s in range(stop - start)\n            if crc32c(",
        "new": "            for s in range(min(1, stop - start))\n            if crc32c(",
        "tests": [CHANGED],
    },
    {
        "id": "short-range-delivered-as-walk",  # a truncated shard's short read: samples silently dropped
        "row": ROW_CHECKED,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                    out.extend(\n                        RawSample(key=idx.keys[x], gid=first + x, shard=url, index=x, error=why) for x in range(i, j)\n                    )",
        "new": "                    pass",
        "tests": [CHANGED],
    },
    {
        "id": "withheld-not-an-error-under-strict",
        "row": ROW_CHECKED,
        "file": "shardkit/format/index.py",
        "old": '                sample.error = changed_error(url, start + s, key, "its CRC32C differs from the index")\n',
        "new": "",
        "tests": [STRICT],
    },
    {
        "id": "index-cache-fifo",  # a hot shard's index evicted by the shards read between its blocks
        "row": ROW_INDEX_CACHE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "        idx = self._indexes.pop(shard, None)\n",
        "new": "        idx = self._indexes.get(shard)\n",
        "tests": ["tests/loader/test_checked_reads.py::test_a_hot_shards_index_stays_cached_while_others_come_and_go"],
    },
    {
        "id": "index-trailing-bytes-accepted",
        "row": ROW_INDEX_CACHE,
        "file": "shardkit/format/index.py",
        "old": "        if need != len(data) or k == 0:",
        "new": "        if need > len(data) or k == 0:",
        "tests": ["tests/loader/test_checked_reads.py::test_a_sidecar_with_trailing_bytes_is_refused"],
    },
    {
        "id": "cached-range-not-read-again",  # a damaged cache entry's samples skipped instead of refetched
        "row": ROW_CHECKED,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                data = self._from_store(shard, lo, hi)",
        "new": "                pass",
        "tests": [
            "tests/system/test_checked_cache.py::test_a_damaged_cache_entry_is_dropped_and_read_again_from_the_store"
        ],
    },
    {
        "id": "bench-spread-of-one-window",  # the uncertainty taken from one window instead of the last two
        "row": "shardkit bench: the best figure carries its spread (the last two windows) and names the limiting stage",
        "file": "shardkit/loader/doctor.py",
        "old": "        return abs(self.windows[-1] - self.windows[-2]) / 2 if len(self.windows) >= 2 else 0.0",
        "new": "        return abs(self.windows[-1] - self.windows[0]) / 2 if len(self.windows) >= 2 else 0.0",
        "tests": ["tests/ops/test_bench_report.py::test_the_spread_is_half_the_last_two_windows_difference"],
    },
]
