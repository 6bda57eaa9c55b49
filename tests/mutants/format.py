"""Mutants of the shard format (``shardkit/format/members.py``, ``tar.py``, ``writer.py``, ``sample.py``, ``splits.py``).

``index.py`` is another helper's area and is not mutated here.
"""

ROW_AGREE = "Damaged shards: loader and verify agree sample by sample on awkward member names"
ROW_TRICKS = "Hostile input: tar tricks touch nothing, never merge two samples"
ROW_WRITER = "Damaged shards: the writer is byte for byte webdataset.TarWriter and refuses unreadable keys"
ROW_DETERMINISTIC = (
    "Conversion: byte-identical shards whatever --workers or --num-tasks; a shard's recorded sha256 is its file's"
)
ROW_HEADER = "Damaged shards: corrupt header bytes reported at that header's offset"
ROW_TRUNCATED = "Damaged shards: truncated shard delivers the prefix once and counts the rest"
ROW_TAMPERED = (
    "Damaged shards: tampered headers (type flag, USTAR prefix, size, pax) never hand out what the walk would not"
)
ROW_SIZES = "Damaged shards: huge header sizes are damage; oversized .cls/.json are bad samples, unread"
ROW_JSON = "Damaged shards: a deep or non-JSON .json member is a bad sample, not a crash"
ROW_FOREIGN = "Hostile input: foreign members are never deserialised, nor even read"
ROW_VERIFY = "Damaged shards: shardkit verify finds corrupt shards by checksum, count and repeated keys"
ROW_INCOMPLETE = "Processes killed: an interrupted conversion is named by verify, other splits still checked"

T_AGREE = "tests/format/test_member_rule.py::test_loader_and_verify_agree_sample_by_sample"
T_GUARD = "tests/format/test_format_oracle.py"

MUTANTS = [
    # ---------------------------------------------------------------- members.py: the one member rule
    {
        "id": "members-absolute-name-accepted",
        "row": ROW_AGREE,
        "file": "shardkit/format/members.py",
        "old": 'if name[:1] == "/" or ".." in name and ".." in name.split("/"):',
        "new": 'if ".." in name and ".." in name.split("/"):',
        "tests": ["tests/format/test_member_rule.py::test_member_rule"],
    },
    {
        "id": "members-reserved-names-are-samples",
        "row": ROW_AGREE,
        "file": "shardkit/format/members.py",
        "old": 'if not dot or not stem or base.startswith("__"):',
        "new": "if not dot or not stem:",
        "tests": ["tests/format/test_member_rule.py::test_member_rule"],
    },
    {
        "id": "members-key-up-to-last-dot",
        "row": ROW_AGREE,
        "file": "shardkit/format/members.py",
        "old": 'stem, dot, ext = base.partition(".")',
        "new": 'stem, dot, ext = base.rpartition(".")',
        "tests": ["tests/format/test_member_rule.py::test_member_rule"],
    },
    {
        "id": "members-label-bound-off-by-one",
        "row": ROW_TRICKS,
        "file": "shardkit/format/members.py",
        "old": "label >= num_classes)",
        "new": "label > num_classes)",
        "tests": [f"{T_GUARD}::test_label_bound_is_exclusive", f"{T_GUARD}::test_walk_equals_a_tarfile_reference"],
    },
    {
        "id": "members-key-pattern-accepts-trailing-newline",
        "row": ROW_WRITER,
        "file": "shardkit/format/members.py",
        "old": r'KEY_PATTERN = re.compile(r"^(?!__)[A-Za-z0-9_-]{1,80}\Z")',
        "new": r'KEY_PATTERN = re.compile(r"^(?!__)[A-Za-z0-9_-]{1,80}$")',
        "tests": ["tests/format/test_hostile_headers.py::test_writer_refuses_a_key_no_reader_would_see"],
    },
    {
        "id": "members-json-depth-counts-escaped-quotes",
        "row": ROW_JSON,
        "file": "shardkit/format/members.py",
        "old": "quote = (a == 34) & (run % 2 == 0)",
        "new": "quote = a == 34",
        "tests": [
            "tests/format/test_member_rule.py::test_json_bounds_are_linear_and_ignore_brackets_in_strings",
            f"{T_GUARD}::test_json_depth_equals_a_reference_parser",
        ],
    },
    {
        "id": "members-json-depth-check-skipped",
        "row": ROW_JSON,
        "file": "shardkit/format/members.py",
        "old": "> MAX_JSON_DEPTH and _depth(data) > MAX_JSON_DEPTH:",
        "new": "> MAX_JSON_DEPTH and _depth(data) > 10 * MAX_JSON_DEPTH:",
        "tests": ["tests/format/test_member_rule.py::test_json_bounds_are_linear_and_ignore_brackets_in_strings"],
    },
    # ---------------------------------------------------------------- tar.py: the header walk
    {
        "id": "tar-repeated-field-merges-into-one-sample",
        "row": ROW_TRICKS,
        "file": "shardkit/format/tar.py",
        "old": "while m is not None and m.key == key and m.ext not in exts:",
        "new": "while m is not None and m.key == key:",
        "tests": [T_AGREE, f"{T_GUARD}::test_walk_equals_a_tarfile_reference"],
    },
    {
        "id": "tar-duplicate-key-not-damage",
        "row": ROW_AGREE,
        "file": "shardkit/format/tar.py",
        "old": "if key in self._keys and sample is not None:",
        "new": "if False and key in self._keys and sample is not None:",
        "tests": [T_AGREE],
    },
    {
        "id": "tar-header-checksum-ignored",
        "row": ROW_HEADER,
        "file": "shardkit/format/tar.py",
        "old": "if (chk - header_sum(buf)) % _ADLER_MOD:",
        "new": "if False:",
        "tests": ["tests/system/test_faults_shards.py::test_corrupt_header_reported_at_its_offset_and_verify_finds_it"],
    },
    {
        "id": "tar-links-are-sample-members",
        "row": ROW_TAMPERED,
        "file": "shardkit/format/tar.py",
        "old": "if kind not in FILE_TYPES:  # directories",
        "new": 'if kind in (b"5",):  # directories',
        "tests": [
            "tests/format/test_hostile_headers.py::test_member_of_another_type_is_not_sliced",
            f"{T_GUARD}::test_walk_equals_a_tarfile_reference",
        ],
    },
    {
        "id": "tar-pax-size-record-ignored",
        "row": ROW_SIZES,
        "file": "shardkit/format/tar.py",
        "old": 'if pax_size is not None and kind not in (b"x", b"L"):',
        "new": "if False:",
        "tests": ["tests/format/test_hostile_headers.py::test_pax_size_record_is_honoured_as_tar_and_webdataset_do"],
    },
    {
        "id": "tar-label-size-limit-not-checked",
        "row": ROW_SIZES,
        "file": "shardkit/format/tar.py",
        "old": "elif m.size > FIELD_LIMITS[m.ext]:",
        "new": "elif m.size > MAX_MEMBER_BYTES:",
        "tests": [
            "tests/format/test_hostile_headers.py::test_oversized_label_and_metadata_members_are_bad_samples_read_by_neither_walk_nor_index"
        ],
    },
    {
        "id": "tar-huge-size-not-damage",
        "row": ROW_SIZES,
        "file": "shardkit/format/tar.py",
        "old": "if size >= MAX_SIZE:",
        "new": "if False:",
        "tests": [
            "tests/format/test_hostile_headers.py::test_huge_member_size_is_tar_damage_for_walk_loader_and_verify"
        ],
    },
    {
        "id": "tar-truncated-member-not-damage",
        "row": ROW_TRUNCATED,
        "file": "shardkit/format/tar.py",
        "old": "if len(data) < m.size:\n                            raise",
        "new": "if False:\n                            raise",
        "tests": [f"{T_GUARD}::test_walk_of_every_cut_of_a_small_shard"],
    },
    {
        "id": "tar-ustar-prefix-ignored",
        "row": ROW_TAMPERED,
        "file": "shardkit/format/tar.py",
        "old": "        if prefix:\n            name = prefix",
        "new": "        if False:\n            name = prefix",
        "tests": [
            "tests/format/test_hostile_headers.py::test_ustar_prefix_changes_the_key_for_the_walk_so_the_index_must_see_it"
        ],
    },
    {
        "id": "tar-octal-accepts-non-digits",
        "row": ROW_TAMPERED,
        "file": "shardkit/format/tar.py",
        "old": 'if s.translate(None, b"01234567"):',
        "new": "if False:",
        "tests": [f"{T_GUARD}::test_signed_or_prefixed_size_fields_are_damage"],
    },
    {
        "id": "tar-damage-after-a-complete-sample-drops-it",
        "row": ROW_TRUNCATED,
        "file": "shardkit/format/tar.py",
        "old": "self._damage, m, damage = exc, None, exc",
        "new": "raise",
        "tests": [f"{T_GUARD}::test_walk_of_every_cut_of_a_small_shard"],
    },
    # ---------------------------------------------------------------- writer.py
    {
        "id": "writer-mode-0644",
        "row": ROW_WRITER,
        "file": "shardkit/format/writer.py",
        "old": '0, 0o444, "shardkit", "shardkit"',
        "new": '0, 0o644, "shardkit", "shardkit"',
        "tests": ["tests/format/test_hostile_headers.py::test_writer_is_byte_for_byte_webdatasets_tarwriter"],
    },
    {
        "id": "writer-no-record-padding",
        "row": ROW_WRITER,
        "file": "shardkit/format/writer.py",
        "old": "hw.write(bytes(2 * BLOCK + (-end) % tarfile.RECORDSIZE))",
        "new": "hw.write(bytes(2 * BLOCK))",
        "tests": ["tests/format/test_hostile_headers.py::test_writer_is_byte_for_byte_webdatasets_tarwriter"],
    },
    {
        "id": "writer-fields-in-reverse-order",
        "row": ROW_WRITER,
        "file": "shardkit/format/writer.py",
        "old": "for ext in sorted(fields):",
        "new": "for ext in sorted(fields, reverse=True):",
        "tests": ["tests/format/test_hostile_headers.py::test_writer_is_byte_for_byte_webdatasets_tarwriter"],
    },
    {
        "id": "writer-key-not-checked",
        "row": ROW_WRITER,
        "file": "shardkit/format/writer.py",
        "old": "if not KEY_PATTERN.match(s.key):",
        "new": "if False:",
        "tests": ["tests/format/test_hostile_headers.py::test_writer_refuses_a_key_no_reader_would_see"],
    },
    {
        "id": "writer-sha256-not-the-files",
        "row": ROW_DETERMINISTIC,
        "file": "shardkit/format/writer.py",
        "old": "self.sha.update(b)",
        "new": "self.sha.update(b[:-1])",
        "tests": ["tests/format/test_manifest_and_writer.py::test_writer_is_deterministic"],
    },
    {
        "id": "writer-metadata-keys-unsorted",
        "row": ROW_DETERMINISTIC,
        "file": "shardkit/format/writer.py",
        "old": "return json.dumps(meta, sort_keys=True, ensure_ascii=False,",
        "new": "return json.dumps(meta, sort_keys=False, ensure_ascii=False,",
        "tests": [f"{T_GUARD}::test_writer_bytes_do_not_depend_on_metadata_insertion_order"],
    },
    {
        "id": "writer-index-records-padded-sizes",
        "row": ROW_WRITER,
        "file": "shardkit/format/writer.py",
        "old": "members.append(Member(s.key, ext, len(data), offset + len(header), offset))",
        "new": "members.append(Member(s.key, ext, pad(len(data)), offset + len(header), offset))",
        "tests": [f"{T_GUARD}::test_writer_index_slices_equal_a_tarfile_reference"],
    },
    # ---------------------------------------------------------------- sample.py
    {
        "id": "sample-unreadable-label-not-an-error",
        "row": ROW_AGREE,
        "file": "shardkit/format/sample.py",
        "old": "sample.unparsed = {**(sample.unparsed or {}), LABEL_EXT: data}",
        "new": "sample.label = 0",
        "tests": [f"{T_GUARD}::test_walk_equals_a_tarfile_reference"],
    },
    {
        "id": "sample-bad-json-accepted",
        "row": ROW_JSON,
        "file": "shardkit/format/sample.py",
        "old": 'sample.error = sample.error or f"bad .{META_EXT} member: {exc}"',
        "new": "pass",
        "tests": ["tests/format/test_member_rule.py::test_deep_json_is_a_bad_sample_not_a_crash"],
    },
    # ---------------------------------------------------------------- splits.py
    {
        "id": "splits-journal-only-folder-not-incomplete",
        "row": ROW_INCOMPLETE,
        "file": "shardkit/format/splits.py",
        "old": "if _JOURNAL_DIR not in dirs and not shards:",
        "new": "if not shards:",
        "tests": ["tests/format/test_member_rule.py::test_verify_reports_incomplete_splits"],
    },
    {
        "id": "splits-damaged-manifest-hides-other-splits",
        "row": ROW_INCOMPLETE,
        "file": "shardkit/format/splits.py",
        "old": "                unreadable.append(Incomplete(sub, str(exc)))",
        "new": "                raise",
        "tests": [
            "tests/cli/test_info_verify.py::test_one_damaged_split_manifest_is_a_problem_and_the_other_splits_are_checked"
        ],
    },
    {
        "id": "splits-journal-files-counted-as-finished-shards",
        "row": ROW_INCOMPLETE,
        "file": "shardkit/format/splits.py",
        "old": "records = sum(1 for f in jfiles if _RECORD.fullmatch(f))",
        "new": "records = len(jfiles)",
        "tests": ["tests/format/test_member_rule.py::test_verify_reports_incomplete_splits"],
    },
    # ---------------------------------------------------------------- foreign members, verify (inspect.py)
    {
        "id": "tar-foreign-members-read",
        "row": ROW_FOREIGN,
        "file": "shardkit/format/tar.py",
        "old": "pass  # foreign member: skipped unread",
        "new": "self._read_at(m.data_offset, m.size)  # foreign member: skipped unread",
        "tests": ["tests/format/test_tar_walk.py::test_foreign_members_ignored_never_unpickled"],
    },
    {
        "id": "verify-sha256-not-compared",
        "row": ROW_VERIFY,
        "file": "shardkit/ops/verify_split.py",
        "old": "if r.sha.hexdigest() != s.sha256:",
        "new": "if False:",
        "tests": ["tests/format/test_hostile_input.py::test_wrong_checksum_found_by_verify"],
    },
    {
        "id": "verify-sample-count-not-compared",
        "row": ROW_VERIFY,
        "file": "shardkit/ops/verify_split.py",
        "old": "        if n != expected:\n",
        "new": "        if False:\n",
        "tests": ["tests/format/test_member_rule.py::test_adjacent_duplicate_keys_are_damage_for_both"],
    },
    {
        "id": "verify-key-repeated-across-shards-not-reported",
        "row": ROW_VERIFY,
        "file": "shardkit/ops/verify_split.py",
        "old": "if smp.key in self.keys:",
        "new": "if False:",
        "tests": [f"{T_GUARD}::test_verify_reports_a_key_repeated_in_another_shard"],
    },
    {
        "id": "members-name-limit-exclusive",
        "row": ROW_SIZES,
        "file": "shardkit/format/members.py",
        "old": "    if len(name) > MAX_NAME:",
        "new": "    if len(name) >= MAX_NAME:",
        "tests": ["tests/format/test_format_oracle.py::test_member_name_and_json_limits_are_inclusive"],
    },
    {
        "id": "members-json-limit-exclusive",
        "row": ROW_SIZES,
        "file": "shardkit/format/members.py",
        "old": "    if len(data) > MAX_JSON_BYTES:",
        "new": "    if len(data) >= MAX_JSON_BYTES:",
        "tests": ["tests/format/test_format_oracle.py::test_member_name_and_json_limits_are_inclusive"],
    },
]
