"""Mutants of random access, the key and per-sample tables and ``show`` (``shardkit/access/``,
``shardkit/format/tables.py``, ``shardkit/ops/upgrade.py``'s tables, ``shardkit/viz/``, ``shardkit/convert/``'s rows)."""

ROW_OPEN = "Random access: open() items equal the stored samples field by field, one ranged read each"
ROW_LIST = "Random access: negative indices and slices behave like a list; out of range is IndexError"
ROW_KEYS = "Random access: keys() and get() come from the key table and equal every shard's keys"
ROW_TRUST = "Random access: a changed sample or key table is refused, never served"
ROW_TABLE = "Tables: convert records each sample's path, size and source sha256"
ROW_SHOW = "show: a box is drawn in its class's colour where the box is"
ROW_STREAM = "Random access: get(key) equals the sample the loader streams at stored size, field by field"

T = "tests/access/test_open.py"
S = "tests/access/test_show.py"
V = "tests/access/test_open_vs_stream.py"

MUTANTS = [
    {
        "id": "open-negative-index-off-by-one",
        "row": ROW_LIST,
        "file": "shardkit/access/dataset.py",
        "old": "return j + n if j < 0 else j",
        "new": "return j + n - 1 if j < 0 else j",
        "tests": [f"{T}::test_indices_and_slices_behave_like_a_list"],
    },
    {
        "id": "open-reads-a-shard-evicted-under-it",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": "            if not rf.closed:\n",
        "new": "            if True:\n",
        "tests": [f"{T}::test_a_shard_evicted_between_its_lookup_and_its_read_is_read_again"],
    },
    {
        "id": "open-first-negative-index-refused",
        "row": ROW_LIST,
        "file": "shardkit/access/dataset.py",
        "old": "if not -n <= j < n:",
        "new": "if not -n < j < n:",
        "tests": [f"{T}::test_indices_and_slices_behave_like_a_list"],
    },
    {
        "id": "open-position-in-wrong-shard",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": 'shard = int(np.searchsorted(self.offsets, gid, side="right") - 1)',
        "new": 'shard = int(np.searchsorted(self.offsets, gid, side="left") - 1)',
        "tests": [f"{T}::test_items_equal_the_stored_fields"],
    },
    {
        "id": "open-error-sample-served",
        "row": ROW_TRUST,
        "file": "shardkit/access/dataset.py",
        "old": "        if s.error:\n            raise DataError(",
        "new": "        if s.error and False:\n            raise DataError(",
        "tests": [f"{T}::test_a_changed_sample_is_a_data_error_naming_shard_and_key"],
    },
    {
        "id": "open-key-table-unchecked",
        "row": ROW_TRUST,
        "file": "shardkit/access/keys.py",
        "old": 'table = KeyTable.from_bytes(checked(data, t["keys"], url), url)',
        "new": "table = KeyTable.from_bytes(data, url)",
        "tests": [f"{T}::test_a_changed_key_table_is_refused"],
    },
    {
        "id": "open-cached-shard-read-from-the-store",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": "return path if os.path.getsize(path) == info.bytes else None",
        "new": "return None",
        "tests": [f"{T}::test_a_cached_shard_is_read_locally_and_a_missing_one_is_not_downloaded"],
    },
    {
        "id": "open-remote-shard-read-by-pread",
        "row": ROW_OPEN,
        "file": "shardkit/access/dataset.py",
        "old": "if _PREAD and storage.is_local(self.urls[shard]):",
        "new": "if _PREAD:",
        "tests": [f"{T}::test_one_ranged_request_per_item_on_s3"],
    },
    {
        "id": "items-crowd-boxes-kept",
        "row": ROW_OPEN,
        "file": "shardkit/access/items.py",
        "old": "kept = objects.take(keep)",
        "new": "kept = objects",
        "tests": [f"{T}::test_crowd_regions_are_not_boxes_and_their_pixels_leave_the_instance_map"],
    },
    {
        "id": "keys-sorted-lookup-linear-prefix",
        "row": ROW_KEYS,
        "file": "shardkit/format/tables.py",
        "old": "if i < len(self.keys) and self.keys[i] == kb:",
        "new": "if i < len(self.keys) and self.keys[i].startswith(kb):",
        "tests": [f"{T}::test_the_key_table_equals_every_shards_keys"],
    },
    {
        "id": "keys-order-not-by-position",
        "row": ROW_KEYS,
        "file": "shardkit/format/tables.py",
        "old": 'return [k.decode("utf-8") for k in self.keys[np.argsort(gid, kind="stable")].tolist()]',
        "new": 'return [k.decode("utf-8") for k in self.keys.tolist()]',
        "tests": [f"{T}::test_the_key_table_equals_every_shards_keys"],
    },
    {
        "id": "rows-source-hash-dropped",
        "row": ROW_TABLE,
        "file": "shardkit/convert/splitjob.py",
        "old": "row = sample_row(s.key, s.meta, out.source_sha256)",
        "new": "row = sample_row(s.key, s.meta)",
        "tests": [f"{T}::test_convert_fills_the_per_sample_table"],
    },
    {
        "id": "show-box-colour-of-another-class",
        "row": ROW_SHOW,
        "file": "shardkit/viz/grid.py",
        "old": "colors=[class_colour(c) for c in cls],",
        "new": "colors=[class_colour(c + 1) for c in cls],",
        "tests": [f"{S}::test_a_box_is_drawn_in_its_class_colour_on_its_border"],
    },
    {
        "id": "show-padding-rows-drawn",
        "row": ROW_SHOW,
        "file": "shardkit/viz/grid.py",
        "old": 'keep = out["box_labels"] >= 0',
        "new": 'keep = out["box_labels"] >= -1',
        "tests": [f"{S}::test_masks_are_blended_and_padding_rows_are_not_boxes"],
    },
    {
        "id": "open-decodes-with-the-fast-idct",
        "row": ROW_STREAM,
        "file": "shardkit/access/items.py",
        "old": "pixels = decoder.decode(s.jpeg, w, h)",
        "new": "pixels = decoder.decode(s.jpeg, w, h, fast=True)",
        "tests": [f"{V}::test_targets_equal_the_stream"],
    },
    {
        "id": "open-get-serves-the-next-position",
        "row": ROW_STREAM,
        "file": "shardkit/access/dataset.py",
        "old": "return int(self.offsets[at[0]]) + local",
        "new": "return min(len(self) - 1, int(self.offsets[at[0]]) + local + 1)",
        "tests": [f"{V}::test_row_fields_equal_the_stream"],
    },
    {
        "id": "open-crowd-instance-rows-not-closed-up",
        "row": ROW_STREAM,
        "file": "shardkit/access/items.py",
        "old": 'out["instances"] = relabel(ids, table)[0] if len(keep) else ids[0]',
        "new": 'out["instances"] = ids[0]',
        "tests": [f"{V}::test_a_coco_conversion_with_crowd_regions_equals_the_stream_from_worker_processes"],
    },
]
