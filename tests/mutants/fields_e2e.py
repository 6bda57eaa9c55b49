"""Mutants that the end-to-end fields test must catch on its own: a CSV with tags, targets and captions through
``shardkit convert`` and back out of ``shardkit.load(fields=...)``. Each bug here is also caught by its
half's own oracle (fields_convert.py, fields_loader.py); these entries prove the end-to-end check can fail too.
Test: ``tests/system/test_fields_end_to_end.py``."""

ROW_E2E = "Fields end to end: what a listing says (tags, targets, captions) is what the loader yields for that image"
E2E = "tests/system/test_fields_end_to_end.py::test_listing_fields_come_out_of_the_loader_as_written"

MUTANTS = [
    {
        "id": "e2e-multi-hot-shifted-by-one",
        "row": ROW_E2E,
        "file": "shardkit/loader/rows.py",
        "old": "out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy(flat)] = 1",
        "new": "out[torch.from_numpy(np.repeat(np.arange(n), counts)), torch.from_numpy((flat + 1) % num_classes)] = 1",
        "tests": [E2E],
    },
    {
        "id": "e2e-split-on-the-wrong-separator",
        "row": ROW_E2E,
        "file": "shardkit/convert/scan/values.py",
        "old": "parts = raw.split(sep) if sep else [raw]",
        "new": 'parts = raw.split(",") if sep else [raw]',
        "tests": [E2E],
    },
    {
        "id": "e2e-text-from-the-label-column",
        "row": ROW_E2E,
        "file": "shardkit/convert/scan/listing.py",
        "old": "text, reason, why = text_value(row.get(opts.text_col))",
        "new": "text, reason, why = text_value(row.get(opts.label_col))",
        "tests": [E2E],
    },
    {
        "id": "e2e-target-dims-swapped",
        "row": ROW_E2E,
        "file": "shardkit/loader/rows.py",
        "old": "values.reshape(len(samples), spec.num_targets)",
        "new": "values.reshape(spec.num_targets, len(samples)).T.copy()",
        "tests": [E2E],
    },
]
