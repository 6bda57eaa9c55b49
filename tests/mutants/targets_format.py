"""Mutants of the detection/segmentation members: ``.objects.json`` (``shardkit/format/objects.py``),
``.mask.png`` (``shardkit/format/masks.py``), the manifest's keypoint entries. Tests:
``tests/format/test_targets_members.py``."""

ROW_RULE = "Stored targets: a sample's objects and mask follow one rule, refused in one line when broken"
ROW_ROUND = "Stored targets: what a writer stores is what every reader gets back, bit for bit"
ROW_MANIFEST = "Stored targets: the manifest's keypoint names, flip pairs and annotation counts are kept and checked"

T = "tests/format/test_targets_members.py::"
RULE = T + "test_objects_rule_equals_a_per_element_reference"
ROUND = T + "test_objects_bytes_round_trip"
MASK = T + "test_mask_member_round_trips_bit_for_bit"
BADMASK = T + "test_bad_masks_are_refused_in_one_line"
FIELDS = T + "test_fields_rule_with_targets_equals_a_reference"
KEEPS = T + "test_manifest_keeps_keypoints_pairs_and_annotations"
BROKEN = T + "test_manifest_refuses_broken_target_entries"
READ = T + "test_written_scenes_read_back_by_the_rule_and_by_plain_tarfile"
MISSING = T + "test_a_sample_missing_or_breaking_a_declared_member_is_unusable"

F = "shardkit/format/fields.py"
SAMPLE = "shardkit/format/sample.py"
OBJ = "shardkit/format/objects.py"
M = "shardkit/format/masks.py"
MAN = "shardkit/format/manifest.py"

MUTANTS = [
    {
        "id": "objects-empty-box-accepted",
        "row": ROW_RULE,
        "file": OBJ,
        "old": "(flat[:, 0] >= flat[:, 2]) | (flat[:, 1] >= flat[:, 3])",
        "new": "(flat[:, 0] > flat[:, 2]) | (flat[:, 1] > flat[:, 3])",
        "tests": [RULE],
    },
    {
        "id": "objects-label-bound-inclusive",
        "row": ROW_RULE,
        "file": OBJ,
        "old": "    bad = [x for x in raw if not 0 <= x < limit]\n",
        "new": "    bad = [x for x in raw if not 0 <= x <= limit]\n",
        "tests": [RULE],
    },
    {
        "id": "objects-crowd-unchecked",
        "row": ROW_RULE,
        "file": OBJ,
        "old": "not all(x in (0, 1) for x in crowd)",
        "new": "not all(x in (0, 1, 2) for x in crowd)",
        "tests": [RULE],
    },
    {
        "id": "objects-visibility-unchecked",
        "row": ROW_RULE,
        "file": OBJ,
        "old": "np.isin(kp[:, :, 2], (0, 1, 2))",
        "new": "np.isin(kp[:, :, 2], (0, 1, 2, 3))",
        "tests": [RULE],
    },
    {
        "id": "objects-float32-overflow-accepted",
        "row": ROW_RULE,
        "file": OBJ,
        "old": "    if (np.abs(out) > _FLOAT32_MAX).any():\n",
        "new": "    if False:\n",
        "tests": [RULE],
    },
    {
        "id": "objects-crowd-not-written",
        "row": ROW_ROUND,
        "file": OBJ,
        "old": "    if np.asarray(objects.iscrowd).any():\n",
        "new": "    if False:\n",
        "tests": [ROUND],
    },
    {
        "id": "rule-forgets-objects",
        "row": ROW_RULE,
        "file": SAMPLE,
        "old": '            if "boxes" in self.fields:\n                sample.objects',
        "new": '            if "objects" in self.fields:\n                sample.objects',
        "tests": [READ, MISSING],
    },
    {
        "id": "rule-forgets-mask",
        "row": ROW_RULE,
        "file": SAMPLE,
        "old": "                sample.mask = _member(extra, MASK_EXT)",
        "new": "                sample.mask = extra.get(MASK_EXT)",
        "tests": [MISSING],
    },
    {
        "id": "fields-keypoints-without-boxes",
        "row": ROW_RULE,
        "file": F,
        "old": '    if "keypoints" in fields and "boxes" not in fields:\n',
        "new": "    if False:\n",
        "tests": [FIELDS, BROKEN],
    },
    {
        "id": "fields-flip-pair-range",
        "row": ROW_RULE,
        "file": F,
        "old": "    return isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n",
        "new": "    return isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= n",
        "tests": [FIELDS, BROKEN],
    },
    {
        "id": "mask-stored-lossy",
        "row": ROW_ROUND,
        "file": M,
        "old": '    Image.fromarray(np.ascontiguousarray(arr), mode="L").save(buf, format="PNG", compress_level=PNG_LEVEL)',
        "new": '    Image.fromarray(np.ascontiguousarray(arr), mode="L").save(buf, format="JPEG", quality=90)',
        "tests": [MASK],
    },
    {
        "id": "mask-size-unchecked",
        "row": ROW_RULE,
        "file": M,
        "old": "                if size is not None and tuple(im.size) != tuple(size):",
        "new": "                if False:",
        "tests": [BADMASK],
    },
    {
        "id": "manifest-drops-flip-pairs",
        "row": ROW_MANIFEST,
        "file": MAN,
        "old": 'flip_pairs=[list(jsonvalues.items(p)) for p in jsonvalues.items(d.get("flip_pairs", []))]',
        "new": "flip_pairs=[]",
        "tests": [KEEPS],
    },
    {
        "id": "manifest-negative-annotation-count",
        "row": ROW_MANIFEST,
        "file": MAN,
        "old": "        if any(v < 0 for v in self.annotations.values()):",
        "new": "        if False:",
        "tests": [BROKEN],
    },
]
