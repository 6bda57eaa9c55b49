"""Mutants of multi-crop views in the worker: ``shardkit/loader/decode/multicrop.py`` (one decode per
sample, every view's crop cut from it), the ``ViewsDecode`` strategy's slot size in
``shardkit/loader/decode/strategies.py``. Tests: ``tests/loader/test_views.py``."""

ROW_VIEWS = (
    "Multi-crop views: every view of a sample shows that sample, in the order given, and a bad sample drops all "
    "its views together"
)
ROW_PURE = "Multi-crop views: each crop is a pure function of (seed, epoch, sample, view index)"
ROW_ONCE = "Multi-crop views: each sample is decoded once, at the DCT scale its most demanding view needs"
ROW_SLOT = "Multi-crop views: a batch's views travel in one shared slot (no new memory per batch)"
ROW_REFUSED = "Multi-crop views: an option views= cannot honour is a one-line error, never silently ignored"

T = "tests/loader/test_views.py::"
COLOURS = T + "test_every_view_shows_its_samples_colour"
GEOMETRY = T + "test_views_follow_the_documented_geometry"
DIFFERENT = T + "test_different_views_of_a_sample_are_different_crops"
BAD = T + "test_a_bad_sample_drops_all_its_views_together"
ONCE = T + "test_each_sample_is_decoded_once_for_all_its_views"
SLOT = T + "test_every_batch_travels_in_one_shared_slot"

F = "shardkit/loader/decode/multicrop.py"

MUTANTS = [
    {
        "id": "views-order-swapped",
        "row": ROW_VIEWS,
        "file": F,
        "old": "        start += size\n    return out\n",
        "new": "        start += size\n    return out[::-1]\n",
        "tests": [COLOURS],
    },
    {
        "id": "views-crops-in-reverse-order",  # the shapes stay right, each view gets another view's crop
        "row": ROW_VIEWS,
        "file": F,
        "old": "cut_into(chw, boxes[j][i], sx, sy, flips[j][i], out[row])",
        "new": "cut_into(chw, boxes[-1 - j][i], sx, sy, flips[-1 - j][i], out[row])",
        "tests": [GEOMETRY],
    },
    {
        "id": "views-row-of-another-sample",  # rows indexed by input sample, not by kept sample: wrong after a skip
        "row": ROW_VIEWS,
        "file": F,
        "old": "cut_into(chw, boxes[j][i], sx, sy, flips[j][i], out[row])",
        "new": "cut_into(chw, boxes[j][i], sx, sy, flips[j][i], out[i])",
        "tests": [BAD],
    },
    {
        "id": "views-crop-ignores-view-index",
        "row": ROW_PURE,
        "file": F,
        "old": "uj = u[:, CROP_UNIFORMS * j : CROP_UNIFORMS * (j + 1)]",
        "new": "uj = u[:, :CROP_UNIFORMS]",
        "tests": [DIFFERENT, GEOMETRY],
    },
    {
        "id": "views-one-decode-per-view",  # a perf bug: same pixels, ten decodes per sample
        "row": ROW_ONCE,
        "file": F,
        "old": "                for j, out in enumerate(outs):\n                    cut_into(",
        "new": (
            "                for j, out in enumerate(outs):\n"
            "                    arr = self.decoder.decode(data, *dct_size(width, height, reduce[i]), self.fast)\n"
            "                    chw = torch.from_numpy(arr).permute(2, 0, 1)\n"
            "                    cut_into("
        ),
        "tests": [ONCE],
    },
    {
        "id": "views-decoded-at-the-first-views-scale",  # the small views cut from a decode too coarse for them
        "row": ROW_ONCE,
        "file": F,
        "old": "    return per_view.min(axis=1)",
        "new": "    return per_view[:, 0]",
        "tests": [
            ONCE,
            "tests/loader/decode/test_device_views.py::test_each_sample_is_decoded_once_and_each_view_group_cut_in_one_call",
        ],
    },
    {
        "id": "views-slot-sized-for-the-largest-view-only",
        "row": ROW_SLOT,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "return batch_size * sample_bytes(self.image.views)",
        "new": "return batch_size * 3 * max(v.size for v in self.image.views) ** 2",
        "tests": [SLOT],
    },
    {
        "id": "views-set-epoch-size-silently-ignored",  # now honoured: the loader must not drop the size
        "row": ROW_REFUSED,
        "file": "shardkit/loader/loader.py",
        "old": "            pos = pos.resized(0 if size == self._configured_size else size)",
        "new": "            pos = pos if self.config.image.views else pos.resized(0 if size == self._configured_size else size)",
        "tests": ["tests/loader/test_views.py::test_set_epoch_with_a_size_scales_the_views"],
    },
]
