"""Mutants of ``fields=`` in the loader: dict batches of image/views, label, labels, target, text, meta,
key, source (``shardkit/loader/fields.py``, ``rows.py``, ``batching.with_rows``, ``strategies.deliver_fields`` and
``decode_on_device``, ``mixing.mixed_multi_hot``, ``batchtypes``), the reader's per-dataset rule
(``loader/read/blocks.py``), and the shared slot of an empty batch (``transport.SlotWriter.claim``).
Tests: ``tests/loader/test_fields.py``, ``tests/integrations/test_lightning_fields.py``."""

ROW_ROWS = (
    "Fields: every row of every field (image or views, label, labels, target, text, meta, key, source) is its "
    "sample's, whatever is skipped, in the worker or on the device"
)
ROW_ORDER = "Fields: a batch is a dict of exactly the fields asked for, in the order asked"
ROW_RULE = (
    "Fields: a bad member of a declared field skips its sample (counted), by the header walk and the index alike; "
    "one of an undeclared field is ignored"
)
ROW_MIX = "Fields: a mixture's multi-label class spaces merge by name; sources that disagree are refused in one line"
ROW_REFUSED = "Fields: a field a dataset does not have is a one-line error naming the fields it has"
ROW_SLOT = "Loader: a batch whose every sample failed leaves its worker's shared slots intact"

T = "tests/loader/test_fields.py::"
EVERY_ROW = T + "test_every_row_of_every_field_is_its_samples"
VIEWS = T + "test_views_and_fields_rows_belong_to_the_same_sample"
DEVICE = T + "test_device_decode_drops_a_sample_from_every_field"
PICKLE = T + "test_pinned_and_pickled_batches_keep_every_field"
INDEX = T + "test_the_sample_index_reads_every_field_like_the_header_walk"
EMPTY = T + "test_a_batch_whose_every_sample_failed_leaves_the_shared_slots_intact"
ERRORS = T + "test_a_field_the_dataset_lacks_is_one_line_naming_what_it_has"
MIX = T + "test_mixture_multi_label_spaces_merge_by_class_name"
MIX_ERR = T + "test_mixture_sources_must_agree_on_the_fields_asked_for"
LIGHTNING = (
    "tests/integrations/test_lightning_fields.py::test_a_trainer_over_dict_batches_sees_every_sample_once_per_epoch"
)

MUTANTS = [
    {
        "id": "fields-row-of-another-sample-after-a-skip",  # rows by position among the read samples, not by id
        "row": ROW_ROWS,
        "file": "shardkit/loader/batching.py",
        "old": "field_rows([by_gid[g] for g in batch.gids.tolist()], spec)",
        "new": "field_rows(good[: len(batch)], spec)",
        "tests": [EVERY_ROW, VIEWS],
    },
    {
        "id": "fields-multi-hot-shifted-by-one",
        "row": ROW_ROWS,
        "file": "shardkit/loader/rows.py",
        "old": "out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy(flat)] = 1",
        "new": "out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy((flat + 1) % num_classes)] = 1",
        "tests": [EVERY_ROW, LIGHTNING],
    },
    {
        "id": "fields-target-dims-swapped",  # the right shape, values laid out [D, n]
        "row": ROW_ROWS,
        "file": "shardkit/loader/rows.py",
        "old": "values.reshape(len(samples), spec.num_targets)",
        "new": "values.reshape(spec.num_targets, len(samples)).T.copy()",
        "tests": [EVERY_ROW],
    },
    {
        "id": "fields-text-not-filtered-on-device-drop",  # device decode and device views share Batch.rows_at
        "row": ROW_ROWS,
        "file": "shardkit/loader/batchtypes.py",
        "old": "extra = None if self.extra is None else self.extra.take(rows)",
        "new": "extra = self.extra",
        "tests": [DEVICE],
    },
    {
        "id": "fields-pickled-without-their-rows",  # workers send the rows' tensors through torch's reducer... or not at all
        "row": ROW_ROWS,
        "file": "shardkit/loader/batchtypes.py",
        "old": "self.gids.numpy(), self.keys, self.extra)",
        "new": "self.gids.numpy(), self.keys, None)",
        "tests": [PICKLE],
    },
    {
        "id": "fields-order-ignored",
        "row": ROW_ORDER,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "        for name in names:\n            home = table[name].home",
        "new": "        for name in sorted(names):\n            home = table[name].home",
        "tests": [EVERY_ROW],
    },
    {
        "id": "fields-index-path-forgets-the-rule",  # the index reads every dataset as single-label
        "row": ROW_RULE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "first_gid=first + i, rule=self.rule))",
        "new": "first_gid=first + i, num_classes=self.num_classes))",
        "tests": [INDEX],
    },
    {
        "id": "fields-walk-forgets-the-rule",
        "row": ROW_RULE,
        "file": "shardkit/loader/read/blocks.py",
        "old": "                self.urls[shard],\n                rule=self.rule,\n",
        "new": "                self.urls[shard],\n                num_classes=self.num_classes,\n",
        "tests": [EVERY_ROW],
    },
    {
        "id": "fields-mixture-labels-not-remapped",  # each source's columns left in its own class space
        "row": ROW_MIX,
        "file": "shardkit/loader/mixing.py",
        "old": "space.map(src[rows.numpy()], cols.numpy())",
        "new": "cols.numpy()",
        "tests": [MIX],
    },
    {
        "id": "fields-mixture-target-names-compared-by-count",
        "row": ROW_MIX,
        "file": "shardkit/loader/fields.py",
        "old": "if list(m.targets) != first:",
        "new": "if len(m.targets) != len(first):",
        "tests": [MIX_ERR],
    },
    {
        "id": "fields-missing-field-not-refused",
        "row": ROW_REFUSED,
        "file": "shardkit/loader/fields.py",
        "old": "missing = [f for f in names if f not in has]",
        "new": "missing = [f for f in names if f not in FIELD_KINDS]",
        "tests": [ERRORS],
    },
    {
        "id": "loader-empty-batch-slot-unclaimed",  # claimed by data pointer: an empty tensor's is 0
        "row": ROW_SLOT,
        "file": "shardkit/loader/transport.py",
        "old": "return self._taken.pop(int(images.storage_offset()), (-1, 0))",
        "new": "return self._taken.pop(int(images.storage_offset()) if images.numel() else -1, (-1, 0))",
        "tests": [EMPTY],
    },
]
