"""Mutants of the loader's epoch length and position, its state checks, mixtures' labels and Lightning."""

ROW_LEN = "len() and epoch_info describe the pass the next iter() gives, also after a pass stopped at exactly len()"
ROW_LIGHTNING = "Lightning over epochs of varying length: every batch of every epoch, also resumed mid-run"
ROW_STATE = (
    "A loader state is refused for other ordering options, another mixture spec or labels mode, naming the field"
)
ROW_DATA = "A loader state is refused for another dataset even with the same shard layout (shard contents or classes differ, named)"
ROW_LABELS = "A mixture's labels name each sample's true class (merged by name, or per source)"
ROW_OPTIONS = "Options of the wrong kind are refused where they are built, naming the option; given options stay given"

T_LEN = "tests/loader/test_len.py"
ROW_RESUME = "Training epochs: a mid-epoch state resumes exactly where it was saved, on the same or another topology"
T_STATE = "tests/loader/test_state_checks.py"
T_LABELS = "tests/loader/test_mixture_labels.py"

MUTANTS = [
    # ------------------------------------------------------------------ A2: len() / epoch_info
    {
        "id": "len-stale-after-islice",  # len() must describe the pass the next iter() gives
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        return self.num_batches()\n",
        "new": "        return self.dataset.num_batches(self._position.epoch)\n",
        "tests": [f"{T_LEN}::test_islice_of_len_then_next_pass_is_the_whole_next_epoch"],
    },
    {
        "id": "len-stale-after-islice-oracle",  # the same bug, caught by the generated oracle alone
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        return self.num_batches()\n",
        "new": "        return self.dataset.num_batches(self._position.epoch)\n",
        "tests": [f"{T_LEN}::test_len_is_the_next_pass_and_every_sample_comes_as_promised"],
    },
    {
        "id": "epoch-info-of-the-finished-epoch",
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        pos = self._upcoming()\n        return EpochInfo(",
        "new": "        pos = self._position\n        return EpochInfo(",
        "tests": [f"{T_LEN}::test_epoch_info_after_a_pass_says_which_epoch"],
    },
    {
        "id": "state-dict-of-the-finished-epoch",
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        pos = self._upcoming()  # a finished epoch is saved as the next one's start",
        "new": "        pos = self._position  # a finished epoch is saved as the next one's start",
        "tests": [f"{T_LEN}::test_epoch_info_after_a_pass_says_which_epoch"],
    },
    {
        "id": "set-epoch-after-islice-moves-on",
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        up = self._upcoming()  # a pass stopped at exactly len() has finished its epoch: set_epoch(it) replays it",
        "new": "        up = self._position  # a pass stopped at exactly len() has finished its epoch: set_epoch(it) replays it",
        "tests": [f"{T_LEN}::test_set_epoch_after_an_islice_pass_replays_that_epoch"],
    },
    {
        "id": "finished-epoch-not-advanced",
        "row": ROW_LEN,
        "file": "shardkit/loader/loader.py",
        "old": "        if pos.batches_done >= self.dataset.rank_split(pos).num_batches:",
        "new": "        if pos.batches_done > self.dataset.rank_split(pos).num_batches:",
        "tests": [f"{T_LEN}::test_islice_of_len_then_next_pass_is_the_whole_next_epoch"],
    },
    {
        "id": "lightning-len-read-once",
        "row": ROW_LIGHTNING,
        "file": "shardkit/integrations/lightning.py",
        "old": "            trainer.reload_dataloaders_every_n_epochs = 1",
        "new": "            pass",
        "tests": [
            "tests/integrations/test_lightning.py::test_resumed_fit_over_epochs_of_varying_length_equals_uninterrupted"
        ],
    },
    {
        "id": "lightning-len-of-the-loaders-epoch",
        "row": ROW_LIGHTNING,
        "file": "shardkit/integrations/lightning.py",
        "old": '        return self.loader.num_batches(self._epoch() if self._epoch is not None else self._start["epoch"])  # type: ignore[index]',
        "new": "        return self.loader.num_batches(0)",
        "tests": ["tests/integrations/test_lightning.py::test_fit_over_epochs_of_varying_length_sees_every_sample"],
    },
    # ------------------------------------------------------------------ B: state checks
    {
        "id": "plan-check-seed-and-batch-only",
        "row": ROW_STATE,
        "file": "shardkit/loader/state.py",
        "old": "    if saved != mine:",
        "new": "    if (saved.get('seed'), saved.get('batch_size')) != (mine['seed'], mine['batch_size']):",
        "tests": [f"{T_STATE}::test_every_ordering_field_is_checked"],
    },
    {
        "id": "plan-dict-drops-shuffle-initial",
        "row": ROW_STATE,
        "file": "shardkit/loader/config.py",
        "old": "    d = {f.name: getattr(cfg, f.name) for f in fields(cfg)}",
        "new": "    d = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != 'shuffle_initial'}",
        "tests": [f"{T_STATE}::test_every_ordering_field_is_checked"],
    },
    {
        "id": "mixture-diff-weight-only",
        "row": ROW_STATE,
        "file": "shardkit/plan/remix.py",
        "old": '        for k in ("weight", "repeat", "choose"):',
        "new": '        for k in ("weight",):',
        "tests": [f"{T_STATE}::test_every_mixture_spec_field_is_checked"],
    },
    {
        "id": "mixture-diff-ignores-epoch-size",
        "row": ROW_STATE,
        "file": "shardkit/plan/remix.py",
        "old": '    if saved.get("epoch_size") != current.get("epoch_size"):',
        "new": "    if False:",
        "tests": [f"{T_STATE}::test_epoch_size_is_checked"],
    },
    {
        "id": "labels-mode-switch-accepted",
        "row": ROW_STATE,
        "file": "shardkit/loader/state.py",
        "old": "    if labels is not None and labels != ident.label_mode.value:",
        "new": "    if False:",
        "tests": [f"{T_STATE}::test_switching_labels_between_save_and_resume_is_refused"],
    },
    {
        "id": "mixture-sources-not-fingerprinted",  # each source of a mixture fingerprinted in the state
        "row": ROW_DATA,
        "file": "shardkit/loader/state.py",
        "old": "    if len(manifests) > 1 and isinstance(fps, list):",
        "new": "    if False:",
        "tests": [f"{T_STATE}::test_mixture_source_with_the_same_shard_sizes_but_other_data_is_refused"],
    },
    {
        "id": "mixture-source-check-sizes-only",
        "row": ROW_DATA,
        "file": "shardkit/loader/identity.py",
        "old": "    differ = [k for k in mine if (k in saved and saved[k] != mine[k]) or (k not in saved and complete)]",
        "new": "    differ = [k for k in mine if k == 'shard_sizes' and saved.get(k) != mine[k]]",
        "tests": [f"{T_STATE}::test_mixture_source_with_the_same_shard_sizes_but_other_data_is_refused"],
    },
    {
        "id": "remix-finishes-epoch-with-other-data",
        "row": ROW_DATA,
        "file": "shardkit/loader/state.py",
        "old": '                if mid and isinstance(a, dict) and a.get("shard_sizes") in sizes\n',
        "new": "                if False\n",
        "tests": [f"{T_STATE}::test_mixture_source_with_the_same_shard_sizes_but_other_data_is_refused"],
    },
    {
        "id": "remix-class-change-silent",
        "row": ROW_STATE,
        "file": "shardkit/loader/state.py",
        "old": "    if saved_classes is not None and saved_classes != classes_digest(ident.classes):",
        "new": "    if False:",
        "tests": [f"{T_STATE}::test_a_remix_that_changes_the_classes_says_so"],
    },
    {
        "id": "allow-remix-refused-at-epoch-boundary",
        "row": ROW_DATA,
        "file": "shardkit/loader/state.py",
        "old": "        if not (remixed or allow_remix):",
        "new": "        if not remixed:",
        "tests": [f"{T_STATE}::test_mixture_source_with_the_same_shard_sizes_but_other_data_is_refused"],
    },
    # ------------------------------------------------------------------ B: labels
    {
        "id": "labels-same-set-kept-as-is",  # the class SET compared, not the list
        "row": ROW_LABELS,
        "file": "shardkit/plan/labels.py",
        "old": "    if mode is LabelMode.MERGED and all(cl == lists[0] for cl in lists):",
        "new": "    if mode is LabelMode.MERGED and all(set(cl) == set(lists[0]) for cl in lists):",
        "tests": [f"{T_LABELS}::test_merged_labels_name_the_true_class"],
    },
    {
        "id": "labels-merged-table-by-position",
        "row": ROW_LABELS,
        "file": "shardkit/plan/labels.py",
        "old": "        return LabelSpace(tuple(union), tuple(np.array([index[c] for c in cl], np.int64) for cl in class_lists))",
        "new": "        return LabelSpace(tuple(union), tuple(np.array([index[c] for c in sorted(cl)], np.int64) for cl in class_lists))",
        "tests": [f"{T_LABELS}::test_merged_labels_name_the_true_class"],
    },
    {
        "id": "labels-per-source-not-offset",
        "row": ROW_LABELS,
        "file": "shardkit/plan/labels.py",
        "old": "        tables.append(np.arange(base, base + len(cl), dtype=np.int64))",
        "new": "        tables.append(np.arange(len(cl), dtype=np.int64))",
        "tests": [f"{T_LABELS}::test_per_source_labels_name_the_true_class_of_their_source"],
    },
    {
        "id": "labels-source-from-plan-order",
        "row": ROW_LABELS,
        "file": "shardkit/loader/mixing.py",
        "old": "            labels = torch.from_numpy(spec.labels.map(src, batch.labels.numpy()))",
        "new": "            labels = torch.from_numpy(spec.labels.map(np.sort(src), batch.labels.numpy()))",
        "tests": [f"{T_LABELS}::test_merged_labels_name_the_true_class"],
    },
    # ------------------------------------------------------------------ rough edges: options
    {
        "id": "resize-size-equal-to-derived-rederived",  # an explicit size equal to the derived one
        "row": ROW_OPTIONS,
        "file": "shardkit/loader/config.py",
        "old": "        for name in self.derived:\n            changes.setdefault(name, None)\n",
        "new": '        if "resize_size" not in changes and self.resize_size == self._derived_resize_size():\n'
        '            changes["resize_size"] = None\n'
        '        if "fast_decode" not in changes and self.fast_decode == self._derived_fast_decode():\n'
        '            changes["fast_decode"] = None\n',
        "tests": [f"{T_STATE}::test_an_explicit_resize_size_stays_explicit_when_the_size_changes"],
    },
    {
        "id": "epoch-size-fraction-accepted",  # epoch_size must be an integer
        "row": ROW_OPTIONS,
        "file": "shardkit/plan/mixture.py",
        "old": "                isinstance(self.epoch_size, bool)\n                or not isinstance(self.epoch_size, numbers.Integral)\n                or self.epoch_size < 1\n",
        "new": "                self.epoch_size < 1\n",
        "tests": [f"{T_STATE}::test_epoch_size_must_be_a_whole_number_of_samples"],
    },
    {
        "id": "integer-options-accept-fractions",
        "row": ROW_OPTIONS,
        "file": "shardkit/choices.py",
        "old": "            ok, plain = isinstance(v, numbers.Integral) and not isinstance(v, bool), int",
        "new": "            ok, plain = isinstance(v, numbers.Real), int",
        "tests": [f"{T_STATE}::test_an_integer_option_given_a_fraction_is_refused_naming_it"],
    },
    {
        "id": "state-saves-one-batch-too-few",  # caught by the shared resume checker (tests/support/resume.py)
        "row": ROW_RESUME,
        "file": "shardkit/loader/state.py",
        "old": '        "batches_done": position.batches_done,',
        "new": '        "batches_done": max(0, position.batches_done - 1),',
        "tests": [
            "tests/loader/test_loader.py::test_state_dict_resume_is_exact",
            "tests/loader/test_mixtures.py::test_mid_epoch_resume_equals_uninterrupted",
        ],
    },
]
