"""Mutants of the one geometry rule of every target: ``shardkit/targets/geometry.py`` (boxes moved by the
forward of each inverse map, enclosing box of the four corners, clipping, ``min_visible``, flip pairs, keypoint
visibility, nearest masks). Tests: ``tests/targets/test_geometry.py`` (per-box and per-pixel references) and the
scenes oracle ``tests/augment/test_targets_scenes.py``."""

ROW_BOXES = (
    "Targets geometry: a box moves to the enclosing box of its four moved corners, clipped to the output, dropped "
    "below min_visible; survivors first, in order"
)
ROW_KEYPOINTS = (
    "Targets geometry: keypoints move with the pixels, swap their flip pairs exactly when the map mirrors, and are "
    "not visible outside the output"
)
ROW_PRECISION = (
    "GPU augmentation and device decode: resize and affine results do not depend on the global matmul precision"
)
ROW_MASKS = "Targets geometry: masks follow the image's own map, nearest (ties up), 255 where no source pixel maps"

T = "tests/targets/test_geometry.py::"
REF = T + "test_move_matches_the_per_box_reference"
PIXELS = T + "test_warp_masks_matches_the_per_pixel_reference"
TIES = T + "test_mask_ties_round_up_and_a_shared_map_broadcasts"
SWAP = T + "test_a_mirroring_map_swaps_pairs_exactly_when_it_mirrors"
CONVENTION = T + "test_augment_maps_move_scene_boxes_onto_the_warped_pixels"
SCENES = "tests/augment/test_targets_scenes.py::test_every_geometric_op_moves_boxes_masks_and_keypoints_with_the_pixels"

F = "shardkit/targets/geometry.py"

MUTANTS = [
    {
        "id": "targets-points-moved-by-float32-matmul",  # TF32 under precision "high" on a GPU
        "row": ROW_PRECISION,
        "file": F,
        "old": "    nx = row[0] * x + row[1] * y + row[2] + 0.5\n    ny = row[3] * x + row[4] * y + row[5] + 0.5\n",
        "new": (
            "    xy1 = torch.stack([x, y, torch.ones_like(x)], -1)[..., None]\n"
            "    nxy = torch.matmul(fw.reshape(fw.shape[0], *(1,) * (points.dim() - 2), 2, 3), xy1)[..., 0]\n"
            "    nx, ny = nxy[..., 0] + 0.5, nxy[..., 1] + 0.5\n"
        ),
        "tests": ["tests/augment/test_targets_api.py::test_no_matmul_in_the_target_path"],
    },
    {
        "id": "targets-boxes-moved-by-the-inverse-map",  # the map the image samples through, not its inverse
        "row": ROW_BOXES,
        "file": F,
        "old": "    fw = forward(inv.to(points.dtype))",
        "new": "    fw = inv.to(points.dtype)[:, :2]",
        "tests": [REF, CONVENTION, SCENES],
    },
    {
        "id": "targets-two-corners-only",  # fine for flips and scales, too small under a rotation
        "row": ROW_BOXES,
        "file": F,
        "old": "[torch.stack([x0, y0], -1), torch.stack([x1, y0], -1), torch.stack([x0, y1], -1), torch.stack([x1, y1], -1)],",
        "new": "[torch.stack([x0, y0], -1), torch.stack([x1, y1], -1)],",
        "tests": [REF, SCENES],
    },
    {
        "id": "targets-min-max-swapped",
        "row": ROW_BOXES,
        "file": F,
        "old": "    lo, hi = moved.amin(dim=-2), moved.amax(dim=-2)",
        "new": "    hi, lo = moved.amin(dim=-2), moved.amax(dim=-2)",
        "tests": [REF, CONVENTION, SCENES],
    },
    {
        "id": "targets-first-corner-as-min",  # x0, y0 moved taken as the top-left: wrong under any mirror
        "row": ROW_BOXES,
        "file": F,
        "old": "    lo, hi = moved.amin(dim=-2), moved.amax(dim=-2)",
        "new": "    lo, hi = moved[..., 0, :], moved[..., 3, :]",
        "tests": [REF, CONVENTION, SCENES],
    },
    {
        "id": "targets-boxes-not-clipped",
        "row": ROW_BOXES,
        "file": F,
        "old": "    cx0, cx1 = x0.clamp(0, w), x1.clamp(0, w)",
        "new": "    cx0, cx1 = x0, x1",
        "tests": [REF, SCENES],
    },
    {
        "id": "targets-clipped-to-the-transposed-size",  # (h, w) read as (w, h)
        "row": ROW_BOXES,
        "file": F,
        "old": "    cy0, cy1 = y0.clamp(0, h), y1.clamp(0, h)",
        "new": "    cy0, cy1 = y0.clamp(0, w), y1.clamp(0, w)",
        "tests": [REF],
    },
    {
        "id": "targets-min-visible-ignored",
        "row": ROW_BOXES,
        "file": F,
        "old": "    keep = (cx1 > cx0) & (cy1 > cy0) & (visible >= min_visible * area)",
        "new": "    keep = (cx1 > cx0) & (cy1 > cy0)",
        "tests": [REF, "tests/augment/test_targets_scenes.py::test_min_visible_drops_and_counts_partly_cropped_boxes"],
    },
    {
        "id": "targets-compaction-reverses-survivors",
        "row": ROW_BOXES,
        "file": F,
        "old": "    order = torch.argsort((~keep).long() * m + pos, dim=1)",
        "new": "    order = torch.argsort((~keep).long() * m + (m - 1 - pos), dim=1)",
        "tests": [REF],
    },
    {
        "id": "targets-pairs-swapped-on-every-sample",
        "row": ROW_KEYPOINTS,
        "file": F,
        "old": "    return torch.where(swap.reshape(-1, 1, 1, 1), swapped, keypoints)",
        "new": "    return swapped",
        "tests": [REF, SWAP, SCENES],
    },
    {
        "id": "targets-pairs-never-swapped",
        "row": ROW_KEYPOINTS,
        "file": F,
        "old": "    return torch.where(swap.reshape(-1, 1, 1, 1), swapped, keypoints)",
        "new": "    return keypoints",
        "tests": [REF, SWAP, SCENES],
    },
    {
        "id": "targets-mirror-test-inverted",
        "row": ROW_KEYPOINTS,
        "file": F,
        "old": "    return inv[:, 0, 0] * inv[:, 1, 1] - inv[:, 0, 1] * inv[:, 1, 0] < 0",
        "new": "    return inv[:, 0, 0] * inv[:, 1, 1] - inv[:, 0, 1] * inv[:, 1, 0] > 0",
        "tests": [REF, SWAP],
    },
    {
        "id": "targets-keypoints-visible-outside",
        "row": ROW_KEYPOINTS,
        "file": F,
        "old": "        out = (x < 0) | (x > w) | (y < 0) | (y > h)",
        "new": "        out = (x < 0) & (x > w)",
        "tests": [REF, SCENES],
    },
    {
        "id": "targets-mask-truncated-not-nearest",  # half a pixel off: floor(x), the pixel left of the nearest one half the time
        "row": ROW_MASKS,
        "file": F,
        "old": "    gx = torch.addcmul(row[2] + row[1] * ys + (2.0 * TIE + 1.0) / w - 1.0, row[0], xs)",
        "new": "    gx = torch.addcmul(row[2] + row[1] * ys + (2.0 * TIE) / w - 1.0, row[0], xs)",
        "tests": [PIXELS, TIES],
    },
    {
        "id": "targets-mask-ties-to-even",  # grid_sample rounds half to even: a 2x reduction picks alternating sides
        "row": ROW_MASKS,
        "file": F,
        "old": "TIE = 2.0**-10",
        "new": "TIE = 0.0",
        "tests": [TIES],
    },
    {
        "id": "targets-mask-bilinear",  # class indices interpolated: classes that are nowhere appear at edges
        "row": ROW_MASKS,
        "file": F,
        "old": 'out = F.grid_sample(src, grid, mode="nearest", padding_mode="zeros", align_corners=False)[:, 0].sub_(1.0)',
        "new": 'out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False)[:, 0].round_().sub_(1.0)',
        "tests": [PIXELS, TIES, SCENES],
    },
    {
        "id": "targets-mask-no-fill-outside",
        "row": ROW_MASKS,
        "file": F,
        "old": "    return out.masked_fill_(out < 0, float(fill)).to(masks.dtype)",
        "new": "    return out.clamp_(min=0).to(masks.dtype)",
        "tests": [PIXELS, SCENES],
    },
]
