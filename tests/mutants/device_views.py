"""Mutants of multi-crop views decoded on the device: ``shardkit/loader/decode/deviceviews.py`` (the
worker half sends each JPEG once with every view's geometry; the consumer half decodes each sample once on its
device and cuts every view group in one batched call) and the ``DeviceViews`` choice in
``shardkit/loader/decode/strategies.py``. Tests: ``tests/loader/decode/test_device_views.py`` (run on CPU tensors)."""

ROW_VIEWS = (
    "Multi-crop views on the device: every view of a sample shows that sample, its own documented crop and flip, in "
    "the order given, and a sample no decoder reads drops from every view (counted; strict raises)"
)
ROW_ONCE = (
    "Multi-crop views on the device: each sample is decoded once (the CPU fallback at the DCT scale its most "
    "demanding view needs), each view group cut in one batched call"
)
ROW_SAME = (
    "Multi-crop views on the device: the worker path's boxes and flips exactly, its pixels within the "
    "device-vs-worker tolerance; decoded on the consumer's device, in the configured layout"
)

T = "tests/loader/decode/test_device_views.py::"
COLOURS = T + "test_every_view_shows_its_samples_colour"
BOXES = T + "test_the_worker_sends_each_jpeg_once_with_every_views_documented_box"
REFERENCE = T + "test_every_view_is_its_documented_crop_and_flip"
WORKER = T + "test_device_views_match_the_worker_views"
ONCE = T + "test_each_sample_is_decoded_once_and_each_view_group_cut_in_one_call"
DROPS = T + "test_a_sample_no_decoder_reads_drops_all_its_views"
BATCH_DROPS = T + "test_views_of_a_batch_stay_with_their_samples_after_drops"
MIXTURE = T + "test_a_mixture_counts_each_drop_against_its_source"

F = "shardkit/loader/decode/deviceviews.py"

MUTANTS = [
    {
        "id": "dviews-boxes-of-another-sample-after-a-drop",  # geometry not selected with the decoded samples
        "row": ROW_VIEWS,
        "file": F,
        "old": "        boxes[kept],\n        flips[kept],\n",
        "new": "        boxes[: len(kept)],\n        flips[: len(kept)],\n",
        "tests": [BATCH_DROPS, DROPS],
    },
    {
        "id": "dviews-rows-of-another-sample-after-a-drop",  # the rows not selected with the decoded samples
        "row": ROW_VIEWS,
        "file": "shardkit/loader/batchtypes.py",
        "old": "return self.labels[idx], self.gids[idx], [self.keys[i] for i in rows], extra",
        "new": "return self.labels[: len(rows)], self.gids[: len(rows)], self.keys[: len(rows)], extra",
        "tests": [BATCH_DROPS, DROPS],
    },
    {
        "id": "dviews-flips-ignored",
        "row": ROW_VIEWS,
        "file": F,
        "old": "            f = np.asarray(flips[:, j : j + k], bool).T.reshape(-1)",
        "new": "            f = np.zeros(k * n, bool)",
        "tests": [REFERENCE, BATCH_DROPS],
    },
    {
        "id": "dviews-first-views-box-for-every-view",  # the worker sends view 0's geometry V times
        "row": ROW_VIEWS,
        "file": F,
        "old": "np.stack([np.asarray(c.boxes, np.float64).reshape(-1, 4) for c in crops], axis=1)",
        "new": "np.stack([np.asarray(crops[0].boxes, np.float64).reshape(-1, 4) for c in crops], axis=1)",
        "tests": [BOXES, REFERENCE],
    },
    {
        "id": "dviews-every-group-reads-the-first-groups-boxes",  # an offset lost in the per-group loop
        "row": ROW_VIEWS,
        "file": F,
        "old": "b = np.asarray(boxes[:, j : j + k], np.float64)",
        "new": "b = np.asarray(boxes[:, :k], np.float64)",
        "tests": [REFERENCE],
    },
    {
        "id": "dviews-crops-sample-major",  # rows ordered (sample, view) but carved as (view, sample)
        "row": ROW_VIEWS,
        "file": F,
        "old": ".transpose(1, 0, 2).reshape(-1, 4)",
        "new": ".reshape(-1, 4)",
        "tests": [REFERENCE],
    },
    {
        "id": "dviews-drop-not-counted",
        "row": ROW_VIEWS,
        "file": "shardkit/loader/batching.py",
        "old": '    counters.add("samples", -len(errors))\n',
        "new": "",
        "tests": [DROPS],
    },
    {
        "id": "dviews-drop-not-moved-to-its-sources-skipped",  # a mixture's per-source counts lose the drop
        "row": ROW_VIEWS,
        "file": "shardkit/loader/batching.py",
        "old": '        counters.add_sources("skipped", lost)\n',
        "new": "",
        "tests": [MIXTURE],
    },
    {
        "id": "dviews-drop-ignores-strict",
        "row": ROW_VIEWS,
        "file": "shardkit/loader/batching.py",
        "old": "skip_key(batch.keys[i], shards[i], reason, strict, counters)",
        "new": "skip_key(batch.keys[i], shards[i], reason, False, counters)",
        "tests": [BATCH_DROPS],
    },
    {
        "id": "dviews-one-decode-per-view",  # a perf bug: the same pixels, V decodes per sample
        "row": ROW_ONCE,
        "file": F,
        "old": "    decoded, errors = decoder.decode(jpegs, ask, routes)\n",
        "new": "    for _ in views:\n        decoded, errors = decoder.decode(jpegs, ask, routes)\n",
        "tests": [ONCE],
    },
    {
        "id": "dviews-fallback-decodes-at-full-size",  # a perf bug: the CPU fallback ignores the DCT scale
        "row": ROW_ONCE,
        "file": F,
        "old": "    ask = np.array([dct_size(w, h, r) for (w, h), r in zip(sizes.tolist(), reduce)], np.int64)",
        "new": "    ask = np.array(sizes.tolist(), np.int64)",
        "tests": [ONCE],
    },
    {
        "id": "dviews-cut-per-view-of-each-sample",  # a perf bug: one resized_crops call per sample and view
        "row": ROW_ONCE,
        "file": F,
        "old": "            resized_crops(images * k, px, py, f, group, max_canvas_pixels)",
        "new": (
            "            for r in range(k * n):\n"
            "                resized_crops([images[r % n]], px[r : r + 1], py[r : r + 1], f[r : r + 1], "
            "group[r : r + 1], max_canvas_pixels)"
        ),
        "tests": [ONCE],
    },
    {
        "id": "dviews-layout-ignored",
        "row": ROW_SAME,
        "file": F,
        "old": "part.view(k * n, s, s, 3).permute(0, 3, 1, 2) if channels_last else part.view(k * n, 3, s, s)",
        "new": "part.view(k * n, 3, s, s)",
        "tests": [COLOURS],
    },
    {
        "id": "dviews-decoded-in-the-worker-after-all",  # strategy_for ignores decode_on: same pixels, wrong place
        "row": ROW_SAME,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "return DeviceViews(config.image) if config.image.decode_on is DecodeOn.DEVICE else ViewsDecode(",
        "new": "return ViewsDecode(config.image) if config.image.decode_on is DecodeOn.DEVICE else ViewsDecode(",
        "tests": [COLOURS],
    },
]
