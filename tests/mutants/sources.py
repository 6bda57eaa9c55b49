"""Mutants of the sources: listings, folders (ImageFolder, --label-regex), the label rule, --val-fraction.

Files: ``shardkit/convert/scan/listing.py``, ``source.py``, ``discover.py``. Tests: ``tests/convert/scan/test_listing.py``
(one test per promise) and ``tests/convert/scan/test_listing_folder_oracle.py`` (the differential oracles; the mutants naming only
an oracle prove that the oracle itself can fail).
"""

ROW_LISTING = "Conversion input: listings (every row one sample with its label, or skipped with its reason)"
ROW_LABELS = "Conversion labels: one rule for every source"
ROW_FOLDERS = "Conversion input: class folders and --label-regex (the real path wins over a symlink)"
ROW_VAL = "Validation split (--val-fraction): F x n rounded half up per class, the same items in every process"

T = "tests/convert/scan/test_listing.py::"
ORACLE = "tests/convert/scan/test_listing_folder_oracle.py::"
LISTING = "shardkit/convert/scan/listing.py"
SOURCE = "shardkit/convert/scan/source.py"
VALSPLIT = "shardkit/convert/scan/valsplit.py"
FOLDERS = "shardkit/convert/scan/folders.py"

MUTANTS = [
    # --- A3: row shape
    {
        "id": "listing-extra-fields-accepted",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "if len(fields) != len(header):",
        "new": "if len(fields) < len(header):",
        "tests": [T + "test_rows_with_more_or_fewer_fields_than_the_header_are_bad_row"],
    },
    {
        "id": "listing-ragged-rows-become-samples",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "if len(fields) != len(header):",
        "new": "if not fields[0]:",
        "tests": [T + "test_ragged_rows_are_converted_as_skips_and_counted"],
    },
    {
        "id": "listing-duplicate-header-keeps-last",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "if twice is not None:",
        "new": "if False:",
        "tests": [T + "test_a_header_naming_a_column_twice_is_a_one_line_error"],
    },
    {
        "id": "listing-bad-rows-vanish",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "if bad_rows:  # a malformed",
        "new": "if False:  # a malformed",
        "tests": [T + "test_ragged_rows_are_converted_as_skips_and_counted"],
    },
    # --- A4: the label rule
    {
        "id": "label-bool-and-float-become-names",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "if isinstance(raw, int) and not isinstance(raw, bool):",
        "new": "if isinstance(raw, (int, float)):",
        "tests": [
            T + "test_label_value_is_the_one_label_rule",
            T + "test_jsonl_labels_that_are_lists_floats_or_bools_are_bad_label",
        ],
    },
    {
        "id": "label-list-becomes-name",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "    return None, SkipReason.BAD_LABEL\n\n\n_FLOAT = ",
        "new": "    return str(raw), None\n\n\n_FLOAT = ",
        "tests": [T + "test_jsonl_labels_that_are_lists_floats_or_bools_are_bad_label"],
    },
    {
        "id": "label-empty-list-is-bad-not-missing",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": " or (isinstance(raw, (list, tuple)) and not raw):",
        "new": ":",
        "tests": [T + "test_label_value_is_the_one_label_rule"],
    },
    {
        "id": "listing-bom-kept",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": 'text = raw.decode("utf-8-sig")',
        "new": 'text = raw.decode("utf-8")',
        "tests": [ORACLE + "test_listing_oracle"],
    },
    # --- A6: huge indices, 1-based labels
    {
        "id": "index-unbounded",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "    if top >= bound:",
        "new": "    if False:",
        "tests": [T + "test_a_huge_integer_label_is_refused_not_a_huge_class_list[index-5e6]"],
    },
    {
        "id": "index-bound-absolute-only",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "bound = min(MAX_CLASSES, max(MIN_INDEX_BOUND, INDEX_FACTOR * len(set(valid))))",
        "new": "bound = MAX_CLASSES",
        "tests": [T + "test_class_index_bound_is_max_1000_or_10x_distinct"],
    },
    {
        "id": "index-digits-parsed-unbounded",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "return MAX_CLASSES if len(digits) > len(str(MAX_CLASSES)) else min(int(digits), MAX_CLASSES)",
        "new": "return int(digits)",
        "tests": [T + "test_a_huge_integer_label_is_refused_not_a_huge_class_list[auto-5000digits]"],
    },
    {
        "id": "one-based-labels-accepted",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "if auto and valid and min(valid) > 0:",
        "new": "if auto and valid and min(valid) > 1:",
        "tests": [T + "test_one_based_labels_are_refused_under_auto"],
    },
    # --- A5: one file, several paths; the root
    {
        "id": "listing-dedupe-by-path-text-only",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "        if real in files:",
        "new": "        if False:",
        "tests": [T + "test_one_file_listed_by_several_paths_is_one_sample"],
    },
    {
        "id": "listing-same-path-called-duplicate-file",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "        if ident in seen:",
        "new": "        if False:",
        "tests": [T + "test_one_file_listed_by_several_paths_is_one_sample"],
    },
    {
        "id": "listing-file-symlink-not-resolved",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "return os.path.realpath(full) if stat.S_ISLNK(os.lstat(full).st_mode) else full",
        "new": "return full",
        "tests": [T + "test_one_file_listed_by_several_paths_is_one_sample"],
    },
    {
        "id": "listing-urls-not-normalised",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": 'return f"{scheme.lower()}://{posixpath.normpath(rest)}"',
        "new": "return url",
        "tests": [T + "test_remote_paths_to_one_object_are_one_sample"],
    },
    {
        "id": "listing-root-escape-allowed",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": 'if rel == ".." or rel.startswith("../"):',
        "new": 'if rel == "..":',
        "tests": [T + "test_a_relative_path_leaving_the_root_is_refused_in_one_line"],
    },
    # --- rough edge: a dead URL
    {
        "id": "dead-url-stops-the-conversion",
        "row": ROW_LISTING,
        "file": SOURCE,
        "old": 'raise UnreadableFile(f"{url}: cannot read{tried}',
        "new": 'raise StorageError(f"{url}: cannot read{tried}',
        "tests": [T + "test_a_dead_url_is_skipped_as_unreadable_and_a_rerun_finishes"],
    },
    {
        "id": "dead-url-not-retried",
        "row": ROW_LISTING,
        "file": SOURCE,
        "old": "    tries = 3\n",
        "new": "    tries = 1\n",
        "tests": [T + "test_a_dead_url_is_skipped_as_unreadable_and_a_rerun_finishes"],
    },
    # --- B: a split whose every row is bad
    {
        "id": "empty-split-dropped",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "splits=list(splits.values()),",
        "new": "splits=[sp for sp in splits.values() if sp.files],",
        "tests": [T + "test_a_split_whose_every_row_is_bad_is_returned_with_its_skips"],
    },
    # --- B: --val-fraction
    {
        "id": "val-bankers-rounding",
        "row": ROW_VAL,
        "file": VALSPLIT,
        "old": "    return math.floor(exact + Fraction(1, 2))",
        "new": "    return round(fraction * n)",
        "tests": [T + "test_val_fraction_takes_f_times_n_rounded_half_up_per_class"],
    },
    {
        "id": "val-per-process-hash",
        "row": ROW_VAL,
        "file": VALSPLIT,
        "old": """random.Random(f"{seed}:val:{'+'.join(source.classes[c] for c in label)}")""",
        "new": """random.Random(hash(f"{seed}:val:{'+'.join(source.classes[c] for c in label)}"))""",
        "tests": [T + "test_val_fraction_picks_the_same_items_in_every_process"],
    },
    {
        "id": "val-empty-split-dropped",
        "row": ROW_VAL,
        "file": VALSPLIT,
        "old": "source.splits = sorted([train, v], key=lambda s: s.name)",
        "new": "source.splits = [s for s in sorted([train, v], key=lambda s: s.name) if s.files]",
        "tests": [T + "test_val_fraction_rounding_to_zero_gives_an_empty_val_split"],
    },
    # --- B: symlinks; folders
    {
        "id": "symlink-walk-in-listing-order",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": "    for dirpath, dirnames, filenames in os.walk(top):  # not following symlinks: the real folders\n"
        "        seen.add(os.path.realpath(dirpath))\n",
        "new": "    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):  # the old walk: the first path wins\n"
        "        if os.path.realpath(dirpath) in seen:\n"
        "            dirnames[:] = []\n"
        "            continue\n"
        "        dirnames.sort()\n"
        "        seen.add(os.path.realpath(dirpath))\n",
        "tests": [T + "test_the_real_path_wins_when_the_alias_sorts_first_inside_a_class"],
    },
    {
        "id": "symlink-alias-wins-by-sort-order",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": "key=lambda i: (not is_real(root_real, group[i][0]), group[i][0].split, group[i][0].rel)",
        "new": "key=lambda i: (group[i][0].split, group[i][0].rel)",
        "tests": [T + "test_the_real_path_wins_for_an_aliased_class_folder"],
    },
    {
        "id": "folder-loose-file-reason",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": 'SkipReason.NOT_IN_CLASS_FOLDER,\n                "file outside any class folder"',
        "new": 'SkipReason.NOT_AN_IMAGE,\n                "file outside any class folder"',
        "tests": [ORACLE + "test_folder_oracle"],
    },
    {
        "id": "regex-whole-match-as-class",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": "named.append((rel, path, m.group(1)))",
        "new": "named.append((rel, path, m.group(0)))",
        "tests": [ORACLE + "test_folder_oracle"],
    },
    # --- the listing oracle alone catches these (proof that it can fail)
    {
        "id": "oracle-listing-dedupe-by-path-text-only",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "        if real in files:",
        "new": "        if False:",
        "tests": [ORACLE + "test_listing_oracle"],
    },
    {
        "id": "oracle-listing-one-based-accepted",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "if auto and valid and min(valid) > 0:",
        "new": "if False:",
        "tests": [ORACLE + "test_listing_oracle"],
    },
    {
        "id": "oracle-listing-bad-rows-in-the-last-split",
        "row": ROW_LISTING,
        "file": LISTING,
        "old": "skipped.setdefault(names[0], []).extend(bad_rows)",
        "new": "skipped.setdefault(names[-1], []).extend(bad_rows)",
        "tests": [ORACLE + "test_listing_oracle"],
    },
    # --- the folder oracle alone
    {
        "id": "oracle-folder-alias-wins-by-sort-order",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": "key=lambda i: (not is_real(root_real, group[i][0]), group[i][0].split, group[i][0].rel)",
        "new": "key=lambda i: (group[i][0].split, group[i][0].rel)",
        "tests": [ORACLE + "test_folder_oracle"],
    },
    {
        "id": "oracle-folder-symlinked-files-not-deduplicated",
        "row": ROW_FOLDERS,
        "file": FOLDERS,
        "old": "        if len(group) == 1:\n            by_path.append(group)",
        "new": "        if True:\n            by_path.extend([g] for g in group)",
        "tests": [ORACLE + "test_folder_oracle"],
    },
    {
        "id": "oracle-listing-list-label-becomes-name",
        "row": ROW_LABELS,
        "file": SOURCE,
        "old": "    return None, SkipReason.BAD_LABEL\n\n\n_FLOAT = ",
        "new": "    return str(raw), None\n\n\n_FLOAT = ",
        "tests": [ORACLE + "test_listing_oracle"],
    },
]
