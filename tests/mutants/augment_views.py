"""Mutants of GPU augmentation per view group: ``shardkit/augment/views.py`` (``ViewAugment``,
``ViewOps``, ``augment_views``), ``RandomSolarize`` in ``shardkit/augment/color.py`` and DINO's recipes in
``shardkit/augment/presets.py``. Tests: ``tests/augment/test_views.py``."""

ROW_GROUPS = (
    "GPU augmentation of views: each view goes through its group's ops (or its override), with its own rows of its "
    "recipe's parameter draw; a group's ops never touch another group's views"
)
ROW_BATCHED = "GPU augmentation of views: the batched path (same-size views concatenated) equals one view at a time"
ROW_DRAWS = (
    "GPU augmentation of views: every view of every sample draws its own parameters; same seed, same output; "
    "recipes and neighbouring seeds share no stream"
)
ROW_DINO = "GPU augmentation of views: the DINO preset is DataAugmentationDINO's colour recipe; solarize is PIL's"
ROW_COMPILE = "GPU augmentation of views: compile=True compiles the views' step too"
ROW_ERRORS = "GPU augmentation of views: group counts that do not add up, a bad view tensor: one-line errors"

T = "tests/augment/test_views.py::"
REFERENCE = T + "test_every_view_matches_the_per_sample_reference"
BATCHED = T + "test_batched_views_equal_one_view_at_a_time"
ISOLATED = T + "test_a_groups_ops_never_touch_another_groups_views"
OWN = T + "test_every_view_of_every_sample_draws_its_own_parameters"
SEEDS = T + "test_same_seed_same_output_and_batches_differ"
DISTINCT = T + "test_recipe_seeds_are_distinct_across_recipes_and_neighbouring_seeds"
CONCAT = T + "test_gpu_augment_on_a_views_list_is_one_draw_over_the_concatenation"
COMPILE = T + "test_compile_reaches_the_views"
DINO = T + "test_dino_recipe_is_data_augmentation_dino"
SOLARIZE = T + "test_solarize_matches_pil"
COUNTS = T + "test_counts_that_do_not_add_up_are_one_line"

V = "shardkit/augment/views.py"
VG = "shardkit/augment/viewops.py"
PRESETS = "shardkit/augment/presets.py"

MUTANTS = [
    {
        "id": "views-aug-group-boundary-off-by-one",  # each next group starts one view early; the last view is lost
        "row": ROW_GROUPS,
        "file": V,
        "old": "            start += g.count\n",
        "new": "            start += g.count - 1\n",
        "tests": [REFERENCE, ISOLATED],
    },
    {
        "id": "views-aug-override-index-over-the-list",  # an override's index counted over the list, not the group
        "row": ROW_GROUPS,
        "file": V,
        "old": "                r = g.recipe(j)\n",
        "new": "                r = g.recipe(start + j)\n",
        "tests": [REFERENCE],
    },
    {
        "id": "views-aug-second-global-gets-the-first-recipe",  # overrides ignored: DINO's view 2 never solarizes
        "row": ROW_GROUPS,
        "file": VG,
        "old": "return tuple(self.overrides.get(j, self.ops))",
        "new": "return tuple(self.ops)",
        "tests": [REFERENCE, DINO],
    },
    {
        "id": "views-aug-all-views-share-one-draw",  # B rows drawn and repeated for each concatenated view
        "row": ROW_DRAWS,
        "file": VG,
        "old": "        params = aug.sample_params(len(idx) * b, size, views[idx[0]].device)\n",
        "new": (
            "        params = [{k: v.repeat(len(idx), *(1,) * (v.ndim - 1)) for k, v in p.items()}"
            " for p in aug.sample_params(b, size, views[idx[0]].device)]\n"
        ),
        "tests": [OWN, REFERENCE],
    },
    {
        "id": "views-aug-split-back-in-reverse-order",  # the concatenated result split back in the wrong order
        "row": ROW_BATCHED,
        "file": VG,
        "old": "                out[i] = y[j * b : (j + 1) * b]\n",
        "new": "                out[i] = y[(len(idx) - 1 - j) * b : (len(idx) - j) * b]\n",
        "tests": [BATCHED, CONCAT],
    },
    {
        "id": "views-aug-one-at-a-time-reuses-the-first-rows",  # the per-view path gives every view view 0's draw
        "row": ROW_BATCHED,
        "file": VG,
        "old": "    return [{k: v[start:stop] for k, v in p.items()} for p in params]\n",
        "new": "    return [{k: v[: stop - start] for k, v in p.items()} for p in params]\n",
        "tests": [BATCHED],
    },
    {
        "id": "views-aug-compile-bypassed",  # compile=True silently ignored for the views list
        "row": ROW_COMPILE,
        "file": VG,
        "old": "            y, _ = aug.step(x, params)\n",
        "new": "            y, _ = aug.apply(x, params)\n",
        "tests": [COMPILE],
    },
    {
        "id": "views-aug-recipes-share-one-seed",  # every recipe seeded alike: global 1 and 2 draw the same jitter
        "row": ROW_DRAWS,
        "file": V,
        "old": "GpuAugment(r, seed=derive_seed(self.seed, k), **kwargs)",
        "new": "GpuAugment(r, seed=self.seed, **kwargs)",
        "tests": [OWN, DISTINCT],
    },
    {
        "id": "views-aug-recipe-seed-is-seed-plus-index",  # manual_seed(seed + epoch) replays a neighbour's stream
        "row": ROW_DRAWS,
        "file": V,
        "old": "GpuAugment(r, seed=derive_seed(self.seed, k), **kwargs)",
        "new": "GpuAugment(r, seed=self.seed + k, **kwargs)",
        "tests": [DISTINCT],
    },
    {
        "id": "views-aug-manual-seed-not-derived",  # reseeding forgets the per-recipe derivation
        "row": ROW_DRAWS,
        "file": V,
        "old": "            p.manual_seed(derive_seed(self.seed, k))\n",
        "new": "            p.manual_seed(self.seed + k)\n",
        "tests": [SEEDS],
    },
    {
        "id": "views-aug-count-not-checked",  # extra views silently left out, too few an IndexError
        "row": ROW_ERRORS,
        "file": VG,
        "old": "    if expected is not None and len(views) != expected:\n",
        "new": "    if expected is not None and len(views) < expected:\n",
        "tests": [COUNTS],
    },
    {
        "id": "solarize-inverts-below-the-threshold",
        "row": ROW_DINO,
        "file": "shardkit/augment/color.py",
        "old": "return torch.where((x >= threshold) & apply.view(-1, 1, 1, 1), 1.0 - x, x)",
        "new": "return torch.where((x < threshold) & apply.view(-1, 1, 1, 1), 1.0 - x, x)",
        "tests": [SOLARIZE],
    },
    {
        "id": "solarize-ignores-p",
        "row": ROW_DINO,
        "file": "shardkit/augment/color.py",
        "old": "return torch.where((x >= threshold) & apply.view(-1, 1, 1, 1), 1.0 - x, x)",
        "new": "return torch.where(x >= threshold, 1.0 - x, x)",
        "tests": [SOLARIZE],
    },
    {
        "id": "dino-local-blur-probability",  # the locals blurred with the second global view's p
        "row": ROW_DINO,
        "file": PRESETS,
        "old": "GaussianBlur(blur_kernel, DINO_BLUR_SIGMA, p=0.5), _dino_norm()]",
        "new": "GaussianBlur(blur_kernel, DINO_BLUR_SIGMA, p=0.1), _dino_norm()]",
        "tests": [DINO],
    },
    {
        "id": "dino-jitter-fixed-order",  # torchvision's ColorJitter permutes its four adjustments per image
        "row": ROW_DINO,
        "file": PRESETS,
        "old": "ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8, order=jitter_order)",
        "new": "ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8)",
        "tests": [DINO],
    },
]
