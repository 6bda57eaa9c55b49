"""Mutants of prefix spreading at conversion (``shardkit convert --prefixes N``):
``shardkit/format/prefixes.py`` (the names), the manifest's name rule, and the converter's writing, resuming,
merging and clearing of spread shards. Tests: ``tests/convert/test_prefixes.py``."""

ROW_NAMES = (
    "Prefix spreading: shard j goes to prefix directory j % N (round trip), every prefix holds floor or ceil of "
    "shards/N, and a prefix's name depends only on its number"
)
ROW_RULE = (
    "Prefix spreading: a manifest accepts exactly the shard names spread_name makes (a plain .tar name, or "
    "4 lowercase hex digits / a plain name); '..', nesting, absolute paths and URLs are refused"
)
ROW_SAME = (
    "Prefix spreading: a --prefixes N conversion is the flat one with shard j (overflow shards too) renamed "
    "spread_name(name, j, N): same bytes, sidecars next to their shards, nothing else in DEST; the loader and verify "
    "see the flat dataset"
)
ROW_RESUME = "Prefix spreading: resume keeps the spread shards already written; --num-tasks + merge equals one task"
ROW_CLEAR = (
    "Prefix spreading: another --prefixes is refused in one line; --overwrite removes the old prefix directories' "
    "shards (no stale shard left), and a foreign shard-named file in a prefix directory is refused"
)

T = "tests/convert/test_prefixes.py::"
ROUND_TRIP = T + "test_spread_name_round_trips_and_is_accepted"
RULE = T + "test_name_rule_accepts_exactly_the_reference"
REFUSED = T + "test_name_rule_refuses_paths_that_leave_the_split"
BALANCE = T + "test_every_prefix_holds_floor_or_ceil_of_the_shards"
SAME = T + "test_spread_conversion_is_the_flat_one_renamed"
LOADER = T + "test_loader_and_verify_see_the_flat_dataset"
RESUME = T + "test_resume_and_tasks_give_the_single_run"
OVERWRITE = T + "test_overwrite_with_other_prefixes_leaves_no_stale_shard"
FOREIGN = T + "test_a_shard_someone_else_put_in_a_prefix_dir_is_refused"
CLI = T + "test_cli_prefixes_on_a_file_url"

MUTANTS = [
    {
        "id": "pfx-spread-by-name-hash",  # "hashed prefixes" read as hashing the name: unbalanced, j % N lost
        "row": ROW_NAMES,
        "file": "shardkit/format/prefixes.py",
        "old": 'return f"{prefix_dirs(prefixes)[index % prefixes]}/{name}"',
        "new": 'return f"{prefix_dirs(prefixes)[int(hashlib.sha256(name.encode()).hexdigest(), 16) % prefixes]}/{name}"',
        "tests": [ROUND_TRIP, BALANCE],
    },
    {
        "id": "pfx-dir-names-depend-on-count",
        "row": ROW_NAMES,
        "file": "shardkit/format/prefixes.py",
        "old": 'd = hashlib.sha256(f"{p}:{salt}".encode()).hexdigest()[:4]',
        "new": 'd = hashlib.sha256(f"{p}:{salt}:{prefixes}".encode()).hexdigest()[:4]',
        "tests": [BALANCE],
    },
    {
        "id": "pfx-rule-any-nesting",  # a name rule loosened to "any safe-looking path"
        "row": ROW_RULE,
        "file": "shardkit/format/manifest.py",
        "old": '_SAFE_NAME = re.compile(rf"^(?:{PREFIX_DIR.pattern}/)?',
        "new": '_SAFE_NAME = re.compile(rf"^(?:[A-Za-z0-9_.-]+/)*',
        "tests": [RULE, REFUSED],
    },
    {
        "id": "pfx-rule-forgets-dotdot",
        "row": ROW_RULE,
        "file": "shardkit/format/manifest.py",
        "old": 'if not allow_unsafe_names and (not _SAFE_NAME.fullmatch(s.name) or ".." in s.name):',
        "new": "if not allow_unsafe_names and not _SAFE_NAME.fullmatch(s.name):",
        "tests": [RULE],
    },
    {
        "id": "pfx-sidecar-flat",  # the shard spread, its sample index written in the split folder
        "row": ROW_SAME,
        "file": "shardkit/convert/splitjob.py",
        "old": "storage.put_bytes(index_url(url), w.index.to_bytes(), **storage_options)",
        "new": 'storage.put_bytes(index_url(url.rsplit("/", 2)[0] + "/" + url.rsplit("/", 1)[1]), w.index.to_bytes(), **storage_options)',
        "tests": [SAME],
    },
    {
        "id": "pfx-overflow-sidecar-flat",
        "row": ROW_SAME,
        "file": "shardkit/convert/merge.py",
        "old": "storage.put_bytes(index_url(storage.join(split_url, name)), w.index.to_bytes(), **storage_options)",
        "new": 'storage.put_bytes(index_url(storage.join(split_url, name.rsplit("/", 1)[-1])), w.index.to_bytes(), **storage_options)',
        "tests": [SAME],
    },
    {
        "id": "pfx-overflow-not-spread",
        "row": ROW_SAME,
        "file": "shardkit/convert/merge.py",
        "old": "name = journal.shard_path(p.stem, p.num_planned + g, p.prefixes)",
        "new": "name = journal.shard_name(p.stem, p.num_planned + g)",
        "tests": [SAME],
    },
    {
        "id": "pfx-overflow-spread-by-position",  # spread by its place among the overflow shards, not its index
        "row": ROW_SAME,
        "file": "shardkit/convert/merge.py",
        "old": "name = journal.shard_path(p.stem, p.num_planned + g, p.prefixes)",
        "new": "name = journal.shard_name(p.stem, p.num_planned + g) if p.prefixes == 1 else f\"{journal.shard_path(p.stem, g, p.prefixes).rpartition('/')[0]}/{journal.shard_name(p.stem, p.num_planned + g)}\"",
        "tests": [SAME],
    },
    {
        "id": "pfx-manifest-drops-dir",  # merge records the file name without its prefix directory
        "row": ROW_SAME,
        "file": "shardkit/convert/journal.py",
        "old": "return ShardInfo(**asdict(self.shard)) if self.shard else None",
        "new": 'return ShardInfo(**{**asdict(self.shard), "name": self.shard.name.rsplit("/", 1)[-1]}) if self.shard else None',
        "tests": [SAME],
    },
    {
        "id": "pfx-index-listing-flat",  # merge looks for sidecars in the split folder only: no sample index
        "row": ROW_SAME,
        "file": "shardkit/convert/merge.py",
        "old": "listed = _listed(split_url, {prefix_of(s.name) for s in shards if s is not None}, storage_options)",
        "new": 'listed = _listed(split_url, {""}, storage_options)',
        "tests": [SAME],
    },
    {
        "id": "pfx-work-folders-left",  # every prefix directory keeps an empty _shardkit/ from the local writes
        "row": ROW_SAME,
        "file": "shardkit/convert/merge.py",
        "old": "tidy_prefix_dirs(split_url, storage_options)  # the empty",
        "new": "None  # the empty",
        "tests": [SAME],
    },
    {
        "id": "pfx-resume-looks-flat",  # a finished shard looked for under its flat name: everything redone
        "row": ROW_RESUME,
        "file": "shardkit/convert/splitjob.py",
        "old": "storage.join(self.url, journal.shard_path(self.plan.stem, j, self.plan.prefixes)), rec.shard, self.so",
        "new": "storage.join(self.url, journal.shard_name(self.plan.stem, j)), rec.shard, self.so",
        "tests": [RESUME],
    },
    {
        "id": "pfx-overwrite-leaves-prefix-dirs",  # clearing only the split folder itself, as before prefixes
        "row": ROW_CLEAR,
        "file": "shardkit/convert/dest.py",
        "old": "for name in split_outputs(url, split, so, temporary=True):",
        "new": "for name in [n for n in storage.list_dir(url, **so)[1] if is_split_output(split, n)]:",
        "tests": [OVERWRITE],
    },
    {
        "id": "pfx-outputs-ignore-prefix-dirs",
        "row": ROW_CLEAR,
        "file": "shardkit/convert/dest.py",
        "old": "        if is_prefix_dir(d):\n",
        "new": "        if False:\n",
        "tests": [OVERWRITE, FOREIGN],
    },
    {
        "id": "pfx-prefixes-not-recorded",  # not in the plan's identity: nothing spread, another N not noticed
        "row": ROW_CLEAR,
        "file": "shardkit/convert/options.py",
        "old": '**({"prefixes": self.prefixes} if self.prefixes != 1 else {}),',
        "new": "",
        "tests": [OVERWRITE, SAME],
    },
    {
        "id": "pfx-cli-drops-option",
        "row": ROW_SAME,
        "file": "shardkit/cli/cmd_convert.py",
        "old": '            prefixes=io["prefixes"],\n',
        "new": "",
        "tests": [CLI],
    },
    {
        "id": "pfx-unfinished-split-misses-prefix-dirs",  # an unfinished spread split: 0 shards, its dirs as splits
        "row": ROW_RESUME,
        "file": "shardkit/format/splits.py",
        "old": "    if _JOURNAL_DIR in dirs:  # a conversion's prefix directories",
        "new": "    if False:  # a conversion's prefix directories",
        "tests": [RESUME],
    },
    {
        "id": "pfx-unfinished-split-just-not-found",  # loading an unfinished conversion: only "not found"
        "row": ROW_RESUME,
        "file": "shardkit/format/manifest.py",
        "old": '        if storage.exists(storage.join(base, "_shardkit"), **storage_options):  # a conversion\'s journal',
        "new": "        if False:  # a conversion's journal",
        "tests": [RESUME],
    },
]
