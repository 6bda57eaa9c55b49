"""Mutants of planning and elastic resume (``shardkit/plan/epoch.py``, ``shardkit/plan/split.py``), the sample-index
fallback and range reads (``shardkit/loader/read/reader.py``, ``shardkit/format/index.py``) and device decode
(``shardkit/loader/decode/device.py``). Area "plan"."""

ROW_ONCE = "Every sample exactly once per epoch over ranks × workers"
ROW_RESUME = "Mid-epoch checkpoint, resume: the resumed run starts at the next step and equals the uninterrupted run"
ROW_ELASTIC = "Elastic: up to three topologies in one epoch (3 → 2 → 3 ranks), also after padding was emitted"
ROW_INDEX = "The sample index yields exactly the header walk's samples; samples a wrong index rejects are withheld and counted, never walked"
ROW_DEVICE = 'decode_on="device": the worker path\'s samples, crops and flips, also after a dropped sample'

ORACLE = "tests/plan/test_epoch_oracle.py::test_single_dataset_plan_matches_the_reference"
ORACLE_ONE = "tests/plan/test_epoch_oracle.py::test_one_source_mixture_plan_matches_the_reference"
ORACLE_MIX = "tests/plan/test_epoch_oracle.py::test_mixture_plan_matches_the_reference"
CHAIN = "tests/plan/test_epoch_oracle.py::test_three_two_three_ranks_with_checkpoints_after_padding"
CHAIN_REPEATS = "tests/plan/test_epoch_oracle.py::test_three_two_three_ranks_mixture_with_repeats"
GRID = "tests/plan/test_epoch_oracle.py::test_grid_of_three_topology_chains_with_checkpoints_inside_shuffle_blocks"
EVERY_STEP = "tests/plan/test_epoch_oracle.py::test_grid_every_step_resumes_exactly"
PADDING_FIRST = "tests/plan/test_epoch_oracle.py::test_padding_emitted_before_its_original_counts_as_seen"
LOADER_CHAIN = (
    "tests/plan/test_epoch_oracle.py::test_loader_elastic_chain_delivers_every_key_once_plus_reported_padding"
)
FALLBACK = "tests/loader/test_index_rejects.py::test_index_wrong_at_slice_time_withholds_those_samples_and_never_walks"
WITHHELD = "tests/loader/test_index_reads.py::test_damaged_or_wrong_index_withholds_its_shard_once"
GOING_BACK = "tests/loader/test_index_rejects.py::test_ids_going_back_in_a_shard_read_without_overflow"
DEV = "tests/loader/decode/test_device_train.py::test_train_crops_and_flips_stay_with_their_samples_after_a_dropped_one"

MUTANTS = [
    # ------------------------------------------------------------------ the one planner (shardkit/plan/epoch.py, split.py):
    # a single dataset given as a plain stream (ORACLE) -- the same bugs as the one-source mixture's below, planted
    # where the single-dataset planner had them before it became the one-source mixture
    {
        "id": "plan-padding-seen-does-not-count",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/split.py",
        "old": "        out[: min(n, size - a)] |= cov[a : a + n]\n",
        "new": "        pass\n",
        "tests": [PADDING_FIRST],
    },
    {
        "id": "plan-partly-emitted-block-forgotten",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "for i in np.flatnonzero(whole < skip).tolist():",
        "new": "for i in np.flatnonzero(whole < whole).tolist():",
        "tests": [CHAIN, ORACLE],
    },
    {
        "id": "plan-second-replan-reuses-generation-0",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "epoch=epoch, batches_done=seg.batches_done, generation=gen\n",
        "new": "epoch=epoch, batches_done=seg.batches_done, generation=0\n",
        "tests": [GRID, ORACLE],
    },
    {
        "id": "plan-dropped-samples-come-back-after-replan",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "keep = np.flatnonzero(assigned & ~seen)",
        "new": "keep = np.flatnonzero(~seen)",
        "tests": [CHAIN, ORACLE],
    },
    {
        "id": "plan-resume-worker-role-not-rotated",
        "row": ROW_RESUME,
        "file": "shardkit/plan/epoch.py",
        "old": "world = world.with_worker((world.worker + batches_done) % world.num_workers, world.num_workers)",
        "new": "world = world.with_worker(world.worker, world.num_workers)",
        "tests": [EVERY_STEP, ORACLE],
    },
    {
        "id": "plan-padding-repeats-the-last-sample",
        "row": ROW_ONCE,
        "file": "shardkit/plan/epoch.py",
        "old": "        a = p % n\n",
        "new": "        a = min(p, n - 1)\n",
        "tests": [EVERY_STEP, ORACLE],
    },
    {
        "id": "plan-resume-inside-block-reordered",
        "row": ROW_RESUME,
        "file": "shardkit/plan/epoch.py",
        "old": "s, g, order = s[keep], g[keep], np.searchsorted(keep, rest)",
        "new": "s, g, order = s[keep], g[keep], np.arange(len(rest))",
        "tests": [EVERY_STEP, ORACLE],
    },
    # ------------------------------------------------------------------ the one planner, as the loader uses it (mixtures, one source)
    {
        "id": "mix-padding-in-whole-blocks-not-seen",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "seen = covered(n, starts, starts + whole)",
        "new": "seen = covered(n, starts, np.minimum(starts + whole, n))",
        "tests": [PADDING_FIRST, CHAIN, ORACLE_ONE],
    },
    {
        "id": "mix-second-replan-reuses-generation-0",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "epoch=epoch, batches_done=seg.batches_done, generation=gen\n",
        "new": "epoch=epoch, batches_done=seg.batches_done, generation=0\n",
        "tests": [GRID, ORACLE_ONE],
    },
    {
        "id": "mix-partial-block-of-the-wrong-reader",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "world = World(i // num_workers, world_size, i % num_workers, num_workers)",
        "new": "world = World(i % world_size, world_size, i % num_workers, num_workers)",
        "tests": [GRID, ORACLE_ONE],
    },
    {
        "id": "mix-partial-block-emission-off-by-one",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "seen[(c0 + b0 + order[: int(skip[i]) - b0]) % n] = True",
        "new": "seen[(c0 + b0 + order[: int(skip[i]) - b0 - 1]) % n] = True",
        "tests": [CHAIN, ORACLE_ONE],
    },
    {
        "id": "mix-resume-inside-block-reordered",
        "row": ROW_RESUME,
        "file": "shardkit/plan/epoch.py",
        "old": "s, g, order = s[keep], g[keep], np.searchsorted(keep, rest)",
        "new": "s, g, order = s[keep], g[keep], np.arange(len(rest))",
        "tests": [EVERY_STEP, ORACLE_ONE],
    },
    {
        "id": "mix-repeats-counted-by-id-not-position",
        "row": ROW_ELASTIC,
        "file": "shardkit/plan/epoch.py",
        "old": "    keep = np.flatnonzero(assigned & ~seen)\n    return Explicit(",
        "new": "    seen |= np.isin(listed.gids, listed.gids[seen])\n    keep = np.flatnonzero(assigned & ~seen)\n    return Explicit(",
        "tests": [CHAIN_REPEATS, ORACLE_MIX],
    },
    # ------------------------------------------------------------------ shardkit/loader/read/reader.py, shardkit/format/index.py
    {
        "id": "read-rejected-shard-walked",  # an unusable index: the shard read with the header walk instead
        "row": ROW_INDEX,
        "file": "shardkit/loader/read/blocks.py",
        "old": "            why = self._withheld[shard]\n            return [",
        "new": "            return self._walk(shard, gids)\n            return [",
        "tests": [WITHHELD],
    },
    {
        "id": "read-rejected-samples-walked",  # a slice's rejected samples read again with the walk
        "row": ROW_INDEX,
        "file": "shardkit/loader/read/blocks.py",
        "old": "out.extend(idx.slice(piece, i, j, url=url, first_gid=first + i, rule=self.rule))",
        "new": "out.extend(x if not x.error else self._walk(shard, np.array([x.gid]))[0] for x in idx.slice(piece, i, j, url=url, first_gid=first + i, rule=self.rule))",
        "tests": [FALLBACK],
    },
    {
        "id": "read-uint64-offsets-wrap",
        "row": ROW_INDEX,
        "file": "shardkit/loader/read/ranges.py",
        "old": "st = np.asarray(starts).astype(np.int64)",
        "new": "st = np.asarray(starts)",
        "tests": [GOING_BACK],
    },
    {
        "id": "read-span-going-back-joined-to-the-range",
        "row": ROW_INDEX,
        "file": "shardkit/loader/read/ranges.py",
        "old": "0 <= st[span[0]] - st[group[-1][1]] <= max_hole",
        "new": "st[span[0]] - st[group[-1][1]] <= max_hole",
        "tests": [GOING_BACK],
    },
    {
        "id": "index-slice-does-not-check-the-member-name",
        "row": ROW_INDEX,
        "file": "shardkit/format/index.py",
        "old": "len(hdr) != BLOCK\n                    or hdr[: len(name)] != name\n",
        "new": "len(hdr) != BLOCK\n",
        "tests": [FALLBACK],
    },
    {
        "id": "index-slice-does-not-check-the-size",
        "row": ROW_INDEX,
        "file": "shardkit/format/index.py",
        "old": "                    or _size(hdr) != size\n",
        "new": "",
        "tests": [FALLBACK],
    },
    # ------------------------------------------------------------------ shardkit/loader/decode/device.py
    {
        "id": "devdecode-crops-shift-after-a-dropped-sample",
        "row": ROW_DEVICE,
        "file": "shardkit/loader/decode/device.py",
        "old": "Crops(np.asarray(crops.boxes)[kept], np.asarray(crops.flips)[kept])",
        "new": "Crops(np.asarray(crops.boxes)[: len(kept)], np.asarray(crops.flips)[: len(kept)])",
        "tests": [DEV],
    },
    {
        "id": "devdecode-flips-shift-after-a-dropped-sample",
        "row": ROW_DEVICE,
        "file": "shardkit/loader/decode/device.py",
        "old": "Crops(np.asarray(crops.boxes)[kept], np.asarray(crops.flips)[kept])",
        "new": "Crops(np.asarray(crops.boxes)[kept], np.asarray(crops.flips)[: len(kept)])",
        "tests": [DEV],
    },
    {
        "id": "devdecode-sizes-shift-after-a-dropped-sample",
        "row": ROW_DEVICE,
        "file": "shardkit/loader/decode/device.py",
        "old": "out = self.resize(images, sizes[kept],",
        "new": "out = self.resize(images, sizes[: len(kept)],",
        "tests": [DEV],
    },
    {
        "id": "devdecode-bisection-loses-the-second-half",
        "row": ROW_DEVICE,
        "file": "shardkit/loader/decode/device.py",
        "old": "                self._decode_batched(idx[half:], tensors, jpegs, sizes, out, errors)\n",
        "new": "",
        "tests": [DEV],
    },
]
