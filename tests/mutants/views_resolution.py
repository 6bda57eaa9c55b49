"""Mutants of progressive resolution with views: ``set_epoch(epoch, size=S)`` scales every view by
``S / views[0].size`` (``shardkit/loader/view.py``, ``ImageConfig.at_size``), the size saved in the state, crops
independent of the size, the device path cutting at the epoch's sizes. Tests: ``tests/loader/test_views_resolution.py``."""

ROW_SCALED = (
    "Progressive resolution with views: set_epoch(size=S) gives every view size round(v.size x S / views[0].size) "
    "(nearest, halves up, >= 1), on the worker and the device path, exactly once per epoch with persistent workers"
)
ROW_CROPS = "Progressive resolution with views: the crops (boxes, flips) at size S are the crops at the configured size"
ROW_STATE = (
    "Progressive resolution with views: the size is saved in state_dict() and a mid-epoch resume gives the same pixels"
)

T = "tests/loader/test_views_resolution.py::"
RULE = T + "test_every_view_is_scaled_by_the_first_views_factor"
SCHEDULE = T + "test_a_size_schedule_scales_every_view_exactly_once_per_epoch"
BOXES = T + "test_the_crop_boxes_at_any_size_are_the_configured_ones"
PIXELS = T + "test_the_views_at_a_size_are_the_documented_crops_resized"
RESUME = T + "test_mid_epoch_resume_after_a_size_change"
DEVICE = T + "test_device_views_are_cut_at_the_epochs_sizes"

V = "shardkit/loader/view.py"

MUTANTS = [
    {
        "id": "vres-only-the-first-view-rescaled",
        "row": ROW_SCALED,
        "file": V,
        "old": "    return tuple(replace(v, size=scaled_size(v.size, size, ref)) for v in views)",
        "new": "    return (replace(views[0], size=size), *views[1:])",
        "tests": [RULE, SCHEDULE],
    },
    {
        "id": "vres-scale-from-the-last-view",
        "row": ROW_SCALED,
        "file": V,
        "old": "    ref = views[0].size\n",
        "new": "    ref = views[-1].size\n",
        "tests": [RULE, SCHEDULE],
    },
    {
        "id": "vres-rounds-to-zero",  # a tiny view at a small size: size 0 (View refuses it: the epoch fails)
        "row": ROW_SCALED,
        "file": V,
        "old": "    return max(1, (2 * size * new_ref + ref) // (2 * ref))",
        "new": "    return (2 * size * new_ref + ref) // (2 * ref)",
        "tests": [RULE],
    },
    {
        "id": "vres-rounds-down",  # int(x) instead of the nearest int
        "row": ROW_SCALED,
        "file": V,
        "old": "    return max(1, (2 * size * new_ref + ref) // (2 * ref))",
        "new": "    return max(1, size * new_ref // ref)",
        "tests": [RULE],
    },
    {
        "id": "vres-size-ignored-by-the-workers",  # loader.size/views say S, the batches keep the configured sizes
        "row": ROW_SCALED,
        "file": "shardkit/loader/config.py",
        "old": "else self.updated(views=scaled_views(self.views, size))",
        "new": "else self",
        "tests": [SCHEDULE, "tests/loader/test_views.py::test_set_epoch_with_a_size_scales_the_views"],
    },
    {
        "id": "vres-device-cuts-at-the-configured-sizes",  # the consumer's decoder has the configured views
        "row": ROW_SCALED,
        "file": "shardkit/loader/decode/deviceviews.py",
        "old": "        decoder.cfg.views,  # the epoch's sizes",
        "new": "        (),  # the epoch's sizes",
        "tests": [DEVICE],
    },
    {
        "id": "vres-rescale-drops-the-crop-options",  # a new View(size, count) per group: scale/ratio/flip reset
        "row": ROW_CROPS,
        "file": V,
        "old": "    return tuple(replace(v, size=scaled_size(v.size, size, ref)) for v in views)",
        "new": "    return tuple(View(scaled_size(v.size, size, ref), count=v.count) for v in views)",
        "tests": [RULE, BOXES, PIXELS],
    },
    {
        "id": "vres-crops-redrawn-with-the-size",  # the draw keyed by the output size as well
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/multicrop.py",
        "old": "        u = sample_uniforms(self.seed, epoch, gids, CROP_UNIFORMS * len(self.views))",
        "new": "        u = sample_uniforms(self.seed + self.views[0].size, epoch, gids, CROP_UNIFORMS * len(self.views))",
        "tests": [BOXES, PIXELS],
    },
    {
        "id": "vres-size-not-saved",
        "row": ROW_STATE,
        "file": "shardkit/loader/state.py",
        "old": '        "size": position.size,',
        "new": '        "size": 0,',
        "tests": [RESUME],
    },
]
