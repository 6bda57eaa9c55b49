"""Mutants of reading a snapshot: the loader, ``shardkit.open``, bench and simulate over an appended split, a
corrected split and a selection (``shardkit/loader/read/stored.py``, the read path, generation pinning in states,
``shardkit/access/``)."""

ROW_ONCE = "Living datasets: a selection's or corrected split's epoch delivers each sample that is in exactly once"
ROW_LABEL = "Living datasets: a relabelled sample carries its new label (and class name) in load() and open()"
ROW_STATE = "Living datasets: a state re-pins its generation; a state of another snapshot is refused"
ROW_OPEN = "Living datasets: open() items are the samples that are in, a removed key is a KeyError saying so"
ROW_HOLE = "Living datasets: max_hole_bytes=0 reads only the selected samples' bytes"

L = "tests/living/test_loader_snapshots.py"
A = "tests/living/test_open_snapshots.py"
C = "tests/living/test_cli_snapshots.py"
EPOCHS = f"{L}::test_selection_epochs_deliver_each_selected_key_once"
GENERATIONS = f"{L}::test_each_generation_reads_what_it_holds"
CORRECTED = f"{L}::test_removed_keys_never_delivered_and_relabelled_keys_carry_the_new_label"
APPEND = f"{L}::test_append_then_resume_continues_the_saved_generation"
ITEMS = f"{A}::test_items_are_the_kept_samples_with_their_labels"

MUTANTS = [
    {
        "id": "snapshot-read-stored-position-not-mapped",
        "row": ROW_ONCE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                local = self.map.stored(shard, local)",
        "new": "                local = local",
        "tests": [EPOCHS, f"{L}::test_a_selection_of_a_split_without_sample_indexes_is_read_by_the_walk"],
    },
    {
        "id": "snapshot-read-planned-id-not-restored",
        "row": ROW_ONCE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                    s.gid = gid",
        "new": "                    pass",
        "tests": [EPOCHS, f"{L}::test_a_mixture_source_may_be_a_selection"],
    },
    {
        "id": "snapshot-read-index-checked-against-kept-count",
        "row": ROW_ONCE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "            return int(self.map.stored_sizes[shard])",
        "new": "            return int(self.offsets[shard + 1] - self.offsets[shard])",
        "tests": [EPOCHS],
    },
    {
        "id": "snapshot-read-plans-over-stored-sizes",
        "row": ROW_ONCE,
        "file": "shardkit/loader/dataset.py",
        "old": "Mixture(self.sources, tuple(s.shard_sizes for s in snapshots), self._epoch_size)",
        "new": "Mixture(self.sources, tuple(np.asarray(s.manifest.shard_sizes, np.int64) for s in snapshots), self._epoch_size)",
        "tests": [EPOCHS],
    },
    {
        "id": "snapshot-read-relabel-not-applied",
        "row": ROW_LABEL,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                self.map.relabel(shard, got)",
        "new": "                pass",
        "tests": [CORRECTED],
    },
    {
        "id": "snapshot-read-class-name-not-relabelled",
        "row": ROW_LABEL,
        "file": "shardkit/loader/read/stored.py",
        "old": 'sample.meta_bytes = json.dumps({**meta, "class": classes[new]}, ensure_ascii=False).encode("utf-8")',
        "new": "pass",
        "tests": [CORRECTED, ITEMS],
    },
    {
        "id": "snapshot-read-generation-keyword-ignored",
        "row": ROW_ONCE,
        "file": "shardkit/loader/api.py",
        "old": "        generation=generation,",
        "new": "        generation=None,",
        "tests": [GENERATIONS],
    },
    {
        "id": "snapshot-read-max-hole-not-passed",
        "row": ROW_HOLE,
        "file": "shardkit/loader/stages.py",
        "old": "            max_hole=cfg.max_hole_bytes,",
        "new": "            max_hole=1 << 20,",
        "tests": [f"{L}::test_max_hole_bytes_zero_reads_only_the_selected_samples"],
    },
    {
        "id": "snapshot-state-generation-not-pinned-on-resume",
        "row": ROW_STATE,
        "file": "shardkit/loader/loader.py",
        "old": "        repinned = self.dataset.repin(saved_generations(state, before))",
        "new": "        repinned = False",
        "tests": [APPEND],
    },
    {
        "id": "snapshot-state-without-generation-read-at-the-newest",
        "row": ROW_STATE,
        "file": "shardkit/loader/identity.py",
        "old": "out.append(None if own else 0)",
        "new": "out.append(None)",
        "tests": [APPEND],
    },
    {
        "id": "snapshot-state-before-the-first-append-refused",
        "row": ROW_STATE,
        "file": "shardkit/loader/identity.py",
        "old": 'if "snapshot" not in saved and snap.selection is None and snap.subset.is_everything:',
        "new": "if False:",
        "tests": [APPEND],
    },
    {
        "id": "snapshot-state-fingerprint-not-recorded",
        "row": ROW_STATE,
        "file": "shardkit/loader/identity.py",
        "old": '        out["snapshot"] = snap.fingerprint()',
        "new": '        out["snapshot"] = snap.manifest.split',
        "tests": [f"{L}::test_a_state_of_a_selection_of_the_same_counts_is_refused"],
    },
    {
        "id": "snapshot-state-plain-split-state-changed",
        "row": ROW_STATE,
        "file": "shardkit/loader/identity.py",
        "old": "    if not plain(snap):",
        "new": "    if True:",
        "tests": [f"{L}::test_a_plain_split_state_is_unchanged"],
    },
    {
        "id": "snapshot-state-refused-state-leaves-the-loader-repinned",
        "row": ROW_STATE,
        "file": "shardkit/loader/loader.py",
        "old": "                self.dataset.use(before)  # a refused state leaves the loader as it was",
        "new": "                pass",
        "tests": [f"{L}::test_a_state_of_another_snapshot_is_refused"],
    },
    {
        "id": "snapshot-open-stored-position-not-mapped",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": "pos = int(self.snapshot.subset.stored(shard, np.array([gid - int(self.offsets[shard])]))[0])",
        "new": "pos = gid - int(self.offsets[shard])",
        "tests": [ITEMS],
    },
    {
        "id": "snapshot-open-relabel-not-applied",
        "row": ROW_LABEL,
        "file": "shardkit/access/dataset.py",
        "old": "        relabel(s, self.snapshot.subset.relabels[shard], self.manifest.classes)\n",
        "new": "",
        "tests": [ITEMS],
    },
    {
        "id": "snapshot-open-removed-key-served",
        "row": ROW_OPEN,
        "file": "shardkit/access/keys.py",
        "old": "return j if j < len(kept) and int(kept[j]) == position else None",
        "new": "return min(j, len(kept) - 1)",
        "tests": [f"{A}::test_a_removed_key_is_a_key_error_saying_so"],
    },
    {
        "id": "snapshot-open-keys-not-filtered",
        "row": ROW_OPEN,
        "file": "shardkit/access/keys.py",
        "old": "return [k for k, kept in zip(keys, mask.tolist()) if kept]",
        "new": "return keys",
        "tests": [ITEMS],
    },
    {
        "id": "snapshot-open-generation-keyword-ignored",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": "snap = resolve(url, generation=generation,",
        "new": "snap = resolve(url, generation=None,",
        "tests": [ITEMS],
    },
    {
        "id": "snapshot-simulate-plans-stored-samples",
        "row": ROW_ONCE,
        "file": "shardkit/cli/cmd_simulate.py",
        "old": "    if snap.subset.is_everything:\n        return data",
        "new": "    if True:\n        return data",
        "tests": [f"{C}::test_simulate_plans_the_samples_that_are_in"],
    },
]
