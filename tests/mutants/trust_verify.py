"""Mutants of ``shardkit verify``'s stray-file and checksum checks and of ``shardkit index``
(``shardkit/ops/strays.py``, ``verify.py``, ``verify_split.py``, ``upgrade.py``, ``cli/cmd_verify.py``,
``cli/cmd_index.py``)."""

ROW_STRAYS = (
    "Stray files: verify names the shard and index files a split folder holds but its manifest does not list "
    "(flat, prefix directories, local, file:// and S3), a warning, an error with --strict"
)
ROW_CRC = (
    "Per-sample checksums: verify checks every sample's CRC32C against the tar and names the shard and key; a split "
    "without checksums is a warning naming shardkit index"
)
ROW_INDEX = (
    "shardkit index: sidecars byte for byte a fresh conversion's, the manifest changed in sample_index alone, "
    "crash-safe and idempotent, never vouches for changed bytes"
)

T_STRAYS = "tests/cli/test_verify_strays.py::"
T_CLEAN = T_STRAYS + "test_a_clean_split_has_no_strays_the_work_folder_and_other_files_are_not_looked_at"
T_DROPPED = T_STRAYS + "test_a_shard_dropped_from_the_manifest_is_named_a_warning_and_with_strict_a_problem"
T_CRC = "tests/ops/test_verify_checksums.py::"
T_UP = "tests/ops/test_verify_upgrade.py::"
T_ORACLE = T_UP + "test_index_writes_what_a_fresh_conversion_writes"
T_REFUSED = T_UP + "test_a_shard_whose_bytes_changed_is_refused_and_nothing_is_vouched_for"
T_UNINDEXABLE = T_UP + "test_a_shard_that_cannot_be_indexed_is_reported_and_the_manifest_promises_no_index"

MUTANTS = [
    # ---------------------------------------------------------------- strays.py / verify.py: files the manifest does not list
    {
        "id": "strays-prefix-dirs-not-looked-into",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/strays.py",
        "old": "        if is_prefix_dir(d):",
        "new": "        if False:",
        "tests": [T_STRAYS + "test_prefix_directories_are_looked_into"],
    },
    {
        "id": "strays-work-folder-looked-into",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/strays.py",
        "old": "        if is_prefix_dir(d):",
        "new": "        if True:",
        "tests": [T_CLEAN],
    },
    {
        "id": "strays-listed-shards-indexes-are-strays",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/strays.py",
        "old": "    listed |= {index_url(n) for n in listed}\n",
        "new": "",
        "tests": [T_CLEAN],
    },
    {
        "id": "strays-index-files-not-looked-at",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/strays.py",
        "old": "f.endswith((SHARD_SUFFIX, INDEX_SUFFIX))",
        "new": "f.endswith(SHARD_SUFFIX)",
        "tests": [T_STRAYS + "test_a_stray_index_alone_is_named_and_the_split_folder_url_works_through_file"],
    },
    {
        "id": "strays-message-names-every-file",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/strays.py",
        "old": 'shown = ", ".join(strays[:SHOWN_STRAYS])',
        "new": 'shown = ", ".join(strays)',
        "tests": [T_STRAYS + "test_many_strays_are_counted_after_the_first_ten"],
    },
    {
        "id": "verify-strays-not-checked",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/verify.py",
        "old": "    strays = stray_files(m, **storage_options)",
        "new": "    strays: list[str] = []",
        "tests": [T_DROPPED],
    },
    {
        "id": "verify-strict-ignored",
        "row": ROW_STRAYS,
        "file": "shardkit/ops/verify_split.py",
        "old": "return not self.problems and not (self.strict and self.warnings)",
        "new": "return not self.problems",
        "tests": [T_DROPPED],
    },
    {
        "id": "cmd-verify-strict-not-passed",
        "row": ROW_STRAYS,
        "file": "shardkit/cli/cmd_verify.py",
        "old": "        strict=args.strict,",
        "new": "        strict=False,",
        "tests": [T_DROPPED],
    },
    # ---------------------------------------------------------------- verify_split.py / verify.py: per-sample checksums
    {
        "id": "verify-crc-not-compared",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify_split.py",
        "old": "if want != got]",
        "new": "if False]",
        "tests": [T_CRC + "test_a_wrong_checksum_in_the_index_names_the_shard_and_the_key"],
    },
    {
        "id": "verify-crc-runs-over-samples",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify_split.py",
        "old": "                self._sample.clear()\n",
        "new": "",
        "tests": [T_CRC + "test_intact_checksummed_split_is_ok_without_warnings"],
    },
    {
        "id": "verify-quick-skips-crc",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify_split.py",
        "old": "idx.starts if checksums and idx is not None else None",
        "new": "idx.starts if checksums and idx is not None and not self.quick else None",
        "tests": [T_CRC + "test_a_wrong_checksum_in_the_index_names_the_shard_and_the_key"],
    },
    {
        "id": "verify-crc-names-the-wrong-key",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify_split.py",
        "old": "                idx.keys[i],",
        "new": "                idx.keys[max(i - 1, 0)],",
        "tests": [T_CRC + "test_a_wrong_checksum_in_the_index_names_the_shard_and_the_key"],
    },
    {
        "id": "verify-checksumless-sidecar-under-sidecar-2-accepted",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify_split.py",
        "old": "if m.sample_index == INDEX_FORMAT and not idx.has_checksums:",
        "new": "if False:",
        "tests": [T_CRC + "test_a_sidecar_without_checksums_under_a_manifest_that_promises_them_is_a_problem"],
    },
    {
        "id": "verify-no-checksums-not-said",
        "row": ROW_CRC,
        "file": "shardkit/ops/verify.py",
        "old": "if m.shards and m.sample_index != INDEX_FORMAT and",
        "new": "if False and",
        "tests": [T_CRC + "test_no_checksums_is_a_warning_naming_the_command"],
    },
    # ---------------------------------------------------------------- upgrade.py / cmd_index.py: shardkit index
    {
        "id": "upgrade-sha256-not-checked",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "elif sha.hexdigest() != s.sha256:",
        "new": "elif False:",
        "tests": [T_REFUSED],
    },
    {
        "id": "upgrade-size-not-checked",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "        if n != s.bytes:",
        "new": "        if False:",
        "tests": [T_REFUSED],
    },
    {
        "id": "upgrade-checksummed-sidecars-rebuilt",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "indexed = _has_checksums(url, s, so)",
        "new": "indexed = False",
        "tests": [T_ORACLE],
    },
    {
        "id": "upgrade-any-loadable-sidecar-kept",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "shard_sha256=s.sha256, **so).has_checksums",
        "new": "shard_sha256=s.sha256, **so) is not None",
        "tests": [T_ORACLE],
    },
    {
        "id": "upgrade-manifest-promises-an-index-despite-unindexable",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "index = INDEX_FORMAT if not out.unindexable else m.sample_index",
        "new": "index = INDEX_FORMAT",
        "tests": [T_UNINDEXABLE],
    },
    {
        "id": "upgrade-unindexable-not-reported",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "                out.unindexable.append(s.name)",
        "new": "                pass",
        "tests": [T_UNINDEXABLE],
    },
    {
        "id": "upgrade-version-1-manifest-kept-at-1",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": 'd["version"] = max(d["version"], 2)',
        "new": 'd["version"] = d["version"]',
        "tests": [T_ORACLE],
    },
    {
        "id": "upgrade-manifest-keys-sorted",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "new = json.dumps(d, indent=1, sort_keys=False, ensure_ascii=False)",
        "new": "new = json.dumps(d, indent=1, sort_keys=True, ensure_ascii=False)",
        "tests": [T_ORACLE],
    },
    {
        "id": "upgrade-work-folders-left",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "        if storage.list_dir(work, **so) == ([], []):",
        "new": "        if False:",
        "tests": [T_ORACLE],
    },
    {
        "id": "upgrade-unfinished-split-indexed",
        "row": ROW_INDEX,
        "file": "shardkit/ops/upgrade.py",
        "old": "    if found.incomplete:",
        "new": "    if False:",
        "tests": [T_UP + "test_an_unfinished_split_or_an_unknown_index_format_is_refused_untouched"],
    },
    {
        "id": "cmd-index-exit-0-when-an-index-is-missing",
        "row": ROW_INDEX,
        "file": "shardkit/cli/cmd_index.py",
        "old": "return 0 if report.complete else 1",
        "new": "return 0",
        "tests": ["tests/cli/test_index_command.py::test_a_shard_that_cannot_be_indexed_exits_1_and_says_why"],
    },
]
