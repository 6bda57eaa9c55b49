"""Mutants of the living split's format: ``Subset``, generations in the manifest, ``pin`` and a selection's parent
check (``shardkit/format/snapshot/subset.py``, ``generations.py``, ``pin.py``, ``manifest.py``, ``snapshot.py``)."""

ROW_SUBSET = "Living datasets: a subset keeps exactly the samples its mask keeps"
ROW_GEN = "Living datasets: generations describe the manifest's shards, and pinning one takes its prefix"
ROW_VERSION = "Living datasets: a corrected split is version 4, which readers without corrections refuse"
ROW_SEL = "Living datasets: a selection whose parent changed is refused"

T = "tests/format/test_snapshot_contract.py"

MUTANTS = [
    {
        "id": "subset-mask-shard-bounds-shifted",
        "row": ROW_SUBSET,
        "file": "shardkit/format/snapshot/subset.py",
        "old": "kept = tuple(np.flatnonzero(mask[bounds[i] : bounds[i + 1]]) for i in range(len(sizes)))",
        "new": "kept = tuple(np.flatnonzero(mask[bounds[i] : bounds[i + 1] + 1]) for i in range(len(sizes)))",
        "tests": [f"{T}::test_a_subset_keeps_what_its_mask_keeps"],
    },
    {
        "id": "subset-stored-ignores-kept",
        "row": ROW_SUBSET,
        "file": "shardkit/format/snapshot/subset.py",
        "old": "return local if k is None else k[local]",
        "new": "return local",
        "tests": [f"{T}::test_a_subset_keeps_what_its_mask_keeps"],
    },
    {
        "id": "subset-restrict-keeps-union",
        "row": ROW_SUBSET,
        "file": "shardkit/format/snapshot/subset.py",
        "old": "else np.intersect1d(a, b, assume_unique=True)",
        "new": "else np.union1d(a, b)",
        "tests": [f"{T}::test_a_subset_keeps_what_its_mask_keeps"],
    },
    {
        "id": "subset-fingerprint-ignores-relabels",
        "row": ROW_SUBSET,
        "file": "shardkit/format/snapshot/subset.py",
        "old": 'sha.update(f"{pos}={r[pos]},".encode())',
        "new": "pass",
        "tests": [f"{T}::test_relabels_and_fingerprints"],
    },
    {
        "id": "pin-keeps-later-classes",
        "row": ROW_GEN,
        "file": "shardkit/format/snapshot/pin.py",
        "old": "classes = m.classes[: kept[-1].classes]",
        "new": "classes = m.classes",
        "tests": [f"{T}::test_generations_round_trip_and_pin_takes_a_prefix"],
    },
    {
        "id": "generations-samples-unchecked",
        "row": ROW_GEN,
        "file": "shardkit/format/generations.py",
        "old": "if sum(shard_samples[first : first + g.shards]) != g.samples:",
        "new": "if False:",
        "tests": [f"{T}::test_generations_that_do_not_describe_the_shards_are_refused"],
    },
    {
        "id": "manifest-corrections-written-as-version-3",
        "row": ROW_VERSION,
        "file": "shardkit/format/manifest.py",
        "old": 'd["version"] = CORRECTED_VERSION if has_corrections(self.generations) else min(self.version, VERSION)',
        "new": 'd["version"] = min(self.version, VERSION)',
        "tests": [f"{T}::test_corrections_make_version_4_and_a_version_3_file_with_them_is_refused"],
    },
    {
        "id": "selection-parent-fingerprint-unchecked",
        "row": ROW_SEL,
        "file": "shardkit/format/snapshot/__init__.py",
        "old": "if fingerprint(pinned) != sel.parent_fingerprint:",
        "new": "if False:",
        "tests": [f"{T}::test_a_selection_whose_parent_was_reconverted_is_refused"],
    },
]
