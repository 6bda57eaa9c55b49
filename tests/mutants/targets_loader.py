"""Mutants of the target fields in the loader: boxes, box labels and counts, keypoints and masks moved
with each sample's crop (``shardkit/targets/crops.py``, ``shardkit/loader/targetrows.py``, ``batching.decode_batch``,
``decode/worker.py``). Tests: ``tests/loader/test_targets_oracle.py``."""

ROW_MOVE = (
    "Targets: every box, keypoint and mask pixel moves with its sample's crop, resize and flip (boxes clipped, "
    "keypoint flip pairs swapped, masks nearest)"
)
ROW_ALIGN = "Targets: every sample's targets are its own, whatever is skipped (bad image, bad mask)"
ROW_COUNT = "Targets: boxes dropped below min_visible are counted (stats.boxes_dropped); M is the most kept"

T = "tests/loader/test_targets_oracle.py::"
FOLLOW = T + "test_targets_follow_the_crop"
WORKERS = T + "test_targets_with_workers"
BAD = T + "test_a_bad_mask_or_image_skips_its_sample_and_rows_stay_aligned"
P = "tests/loader/test_targets_presets.py::"
LETTERBOX = P + "test_letterbox_fits_the_longer_side_and_centres"
DETECT = P + "test_detect_scales_then_crops_or_pads"
EVERY = P + "test_every_dataset_loads_with_the_detection_presets"
U = "tests/loader/test_targets_unchanged.py::"
MIXTURE = U + "test_mixture_remaps_box_labels_and_masks_by_class_name"
ROW_MIX = (
    "Targets in mixtures: box labels and mask classes remapped by class name like labels, 'background' first, "
    "padding (-1, 255) kept"
)
DEVICE_DROP = U + "test_device_decode_drops_a_bad_sample_from_every_field"
DEVICE = U + "test_device_decode_moves_targets_with_the_crop_it_cuts"
DCT = "tests/loader/decode/test_targets_dct.py::test_targets_follow_the_box_rounded_to_the_decoded_grid"
FAST = "tests/loader/test_targets_crops.py::test_the_fast_mask_warp_is_warp_masks"
WINDOW = "tests/loader/decode/test_letterbox_window.py::test_the_window_pixels_follow_the_returned_box"
SLOT = "tests/loader/test_target_planes_slot.py::"
DEVICE_WINDOW = "tests/loader/decode/test_device.py::test_detection_presets_match_worker"
PLANES_IN_SLOT = SLOT + "test_planes_travel_in_the_slot_and_equal_the_in_process_loader"
ROW_SLOT = (
    "Targets: masks and instance maps travel from the workers in the batch's shared slot beside the images, the "
    "same bytes as in process"
)
ROW_PRESET = (
    "Presets detect/letterbox: aspect kept, longer side s * size (s in scale; letterbox: size), crop or pad at whole "
    "pixels, letterbox centred, padding 0 (mask 255); a pure function of (seed, epoch, gid)"
)

MUTANTS = [
    {
        "id": "targets-flip-forgets-boxes",  # the pixels (and masks) are mirrored, the boxes and keypoints not
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "pad_objects(objects, k), inv,",
        "new": "pad_objects(objects, k), crop_maps(boxes, np.zeros_like(flips), size),",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-flip-forgets-everything",  # the crop's map has no flip at all
        "row": ROW_MOVE,
        "file": "shardkit/targets/crops.py",
        "old": "    a = np.where(f, -sx, sx)\n    c = np.where(f, tx + (ow - 1) * sx, tx)\n",
        "new": "    a, c = sx, tx\n",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "loader-boxes-clipped-to-the-wrong-size",  # clipped to (and dropped against) the wrong output size
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "(size, size), min_visible=spec.min_visible",
        "new": "(4 * size, 4 * size), min_visible=spec.min_visible",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-keypoint-pairs-not-swapped",
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "flip_pairs=spec.flip_pairs",
        "new": "flip_pairs=()",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "loader-mask-bilinear",  # neighbouring labels blended (class indices averaged at edges)
        "row": ROW_MOVE,
        "file": "shardkit/loader/targetrows.py",
        "old": "mask[i] = warp_crop_mask(src, inv[i], (size, size))",
        "new": (
            "mask[i] = ((warp_crop_mask(src, inv[i], (size, size)).int() + warp_crop_mask(src, "
            "inv[i] + torch.tensor([[0.0, 0, 0.5], [0, 0, 0.5], [0, 0, 0]], dtype=inv.dtype), (size, size))"
            ".int()) // 2).to(torch.uint8)"
        ),
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-mask-moved-with-another-samples-crop",
        "row": ROW_ALIGN,
        "file": "shardkit/loader/targetrows.py",
        "old": "inv[i], (size, size))",
        "new": "inv[(i + 1) % n], (size, size))",
        "tests": [FOLLOW, WORKERS],
    },
    {
        "id": "targets-used-box-by-input-position",  # after a failed decode the crops shift by one row
        "row": ROW_ALIGN,
        "file": "shardkit/loader/decode/worker.py",
        "old": "used[len(kept)] = box",
        "new": "used[i] = box",
        "tests": [BAD],
    },
    {
        "id": "targets-rows-of-the-first-samples-after-a-failed-decode",
        "row": ROW_ALIGN,
        "file": "shardkit/loader/batching.py",
        "old": "            [ok[i] for i in kept],\n",
        "new": "            ok[:n],\n",
        "tests": [BAD],
    },
    {
        "id": "targets-dropped-boxes-not-counted",
        "row": ROW_COUNT,
        "file": "shardkit/loader/batching.py",
        "old": 'counters.add("boxes_dropped", dropped)',
        "new": 'counters.add("boxes_dropped", 0)',
        "tests": [WORKERS, FOLLOW],
    },
    {
        "id": "targets-object-axis-not-trimmed",  # M stays the most objects given, not the most kept
        "row": ROW_COUNT,
        "file": "shardkit/loader/targetrows.py",
        "old": "m_kept = int(moved.count.max()) if n else 0",
        "new": "m_kept = moved.boxes.shape[1]",
        "tests": [FOLLOW],
    },
    {
        "id": "letterbox-scale-factor-first",  # side * (longer / m): an exact half lands just below and rounds down
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "return np.maximum(1, np.round(w * longer / m)), np.maximum(1, np.round(h * longer / m))",
        "new": "return np.maximum(1, np.round(w * (longer / m))), np.maximum(1, np.round(h * (longer / m)))",
        "tests": ["tests/loader/test_targets_presets.py::test_letterbox_fits_the_longer_side_and_centres"],
    },
    {
        "id": "letterbox-offset-off-by-the-pad",  # the image pasted at the corner, the targets where the box says
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "y0, y1, x0, x1 = oy0, oy1, ox0, ox1",
        "new": "y0, y1, x0, x1 = 0, oy1 - oy0, 0, ox1 - ox0",
        "tests": [FOLLOW],
    },
    {
        "id": "detect-pixels-not-flipped",  # the flip reaches the targets, not the pixels
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "    if flip:  # the mirrored window lands at the mirrored columns",
        "new": "    if False:  # the mirrored window lands at the mirrored columns",
        "tests": [FOLLOW],
    },
    {
        "id": "detect-flip-pads-on-the-wrong-side",  # the window's pixels mirrored in place, the padding not moved
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "x0, x1, window = size - x1, size - x0, window.flip(-1)",
        "new": "x0, x1, window = x0, x1, window.flip(-1)",
        "tests": [FOLLOW],
    },
    {
        "id": "detect-padding-not-cleared",  # the slot's previous batch shows through the padding
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "        if pad.numel():\n            pad.zero_()",
        "new": "        if pad.numel():\n            pad.fill_(128)",
        "tests": [FOLLOW, EVERY],
    },
    {
        "id": "detect-returns-the-planned-box",  # the window resized from whole decoded pixels, the targets unmoved
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "    return bx0, by0, bx0 + size * kx, by0 + size * ky",
        "new": "    return box",
        "tests": [WINDOW],
    },
    {
        "id": "detect-window-span-not-rounded-outward-enough",  # the last decoded column never reaches the window
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "    b = min(n, max(a + 1, int(round((start + o1 * per_out) * per_stored))))",
        "new": "    b = min(n - 1, max(a + 1, int(round((start + o1 * per_out) * per_stored))))",
        "tests": [WINDOW],
    },
    {
        "id": "dct-scale-taken-as-the-size-ratio",  # a stored edge up to (r-1)/r decoded pixel off
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/resample.py",
        "old": "                return 1.0 / r, 1.0 / r",
        "new": "                return dw / width, dh / height",
        "tests": [WINDOW],
    },
    {
        "id": "detect-scale-ignored",
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "s = scale[0] + (scale[1] - scale[0]) * u[:, 0]",
        "new": "s = 1.0 + 0.0 * u[:, 0]",
        "tests": [DETECT],
    },
    {
        "id": "letterbox-not-centred",
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/letterbox.py",
        "old": "-np.floor((size - sw) / 2), -np.floor((size - sh) / 2), size)",
        "new": "0 * sw, 0 * sh, size)",
        "tests": [LETTERBOX],
    },
    {
        "id": "mixture-mask-not-remapped",  # box labels follow the mixture's classes, the masks keep their source's
        "row": ROW_MIX,
        "file": "shardkit/loader/mixing.py",
        "old": "mask = luts[torch.from_numpy(src).long()].gather(1, flat).reshape(mask.shape)",
        "new": "mask = mask",
        "tests": [MIXTURE],
    },
    {
        "id": "mixture-box-labels-by-the-first-sources-table",
        "row": ROW_MIX,
        "file": "shardkit/loader/mixing.py",
        "old": "space.map(src[r], box_labels[live].numpy())",
        "new": "space.map(np.zeros_like(src[r]), box_labels[live].numpy())",
        "tests": [MIXTURE],
    },
    {
        "id": "mixture-background-not-first",  # the sorted union: "apple" becomes class 0, the masks' background 1
        "row": ROW_MIX,
        "file": "shardkit/loader/dataset.py",
        "old": "self.labels = background_first(self.labels, [list(m.classes) for m in manifests])",
        "new": "pass",
        "tests": [MIXTURE],
    },
    {
        "id": "device-drop-forgets-the-masks",  # a sample the device cannot decode leaves its mask in the batch
        "row": ROW_ALIGN,
        "file": "shardkit/loader/rows.py",
        "old": "else v[idx]) for k, v in self._v.items()}",
        "new": "else v[: len(rows)] if k in PLANES else v[idx]) for k, v in self._v.items()}",
        "tests": [DEVICE_DROP],
    },
    {
        "id": "device-bad-mask-leaves-its-geometry",  # the worker skips a bad mask but sends its crop with the next
        "row": ROW_ALIGN,
        "file": "shardkit/loader/decode/devicetargets.py",
        "old": "crops = Crops(np.asarray(geo.crops.boxes)[keep], np.asarray(geo.crops.flips)[keep])",
        "new": "crops = Crops(np.asarray(geo.crops.boxes)[: len(keep)], np.asarray(geo.crops.flips)[: len(keep)])",
        "tests": [DEVICE_DROP],
    },
    {
        "id": "targets-follow-the-requested-box",  # not the box rounded to the DCT-decoded grid the pixels came from
        "row": ROW_MOVE,
        "file": "shardkit/loader/decode/worker.py",
        "old": "    return x0 / sx, y0 / sy, x1 / sx, y1 / sy",
        "new": "    return box",
        "tests": [DCT],
    },
    {
        "id": "device-drop-keeps-counting-its-boxes",  # boxes_dropped of a row the device could not decode
        "row": ROW_COUNT,
        "file": "shardkit/loader/batching.py",
        "old": 'counters.add("boxes_dropped", -int(per_row[[i for i, _ in errors]].sum()))',
        "new": "pass",
        "tests": [DEVICE_DROP],
    },
    {
        "id": "fast-mask-warp-rows-from-the-x-coordinates",  # the row indices read the grid's x: rows of a square crop
        "row": ROW_MOVE,
        "file": "shardkit/targets/crops.py",
        "old": "iy, in_y = _nearest(m, h, oh, along_x=False)",
        "new": "iy, in_y = _nearest(m.flip(0), h, oh, along_x=True)",
        "tests": [FAST],
    },
    {
        "id": "fast-mask-warp-edge-columns-not-filled",  # columns past the image repeat its edge instead of 255
        "row": ROW_MOVE,
        "file": "shardkit/targets/crops.py",
        "old": "    cols = np.where(in_x.numpy(), ix.numpy(), w)",
        "new": "    cols = ix.numpy()",
        "tests": [FAST, FOLLOW],
    },
    {
        "id": "planes-pickled-beside-the-slot",  # every mask and instance map through a new shared segment
        "row": ROW_SLOT,
        "file": "shardkit/loader/transport.py",
        "old": "        if t is None or t.untyped_storage().data_ptr() != ptr:",
        "new": "        if True:",
        "tests": [PLANES_IN_SLOT],
    },
    {
        "id": "planes-cut-on-top-of-each-other",  # the instance map written over the mask's bytes
        "row": ROW_SLOT,
        "file": "shardkit/loader/batching.py",
        "old": "        at = _aligned(at + PLANE_BYTES[name] * pixels)",
        "new": "        at = _aligned(at)",
        "tests": [PLANES_IN_SLOT],
    },
    {
        "id": "planes-slot-too-small",  # slots cut for the images only: every batch with a mask goes to new memory
        "row": ROW_SLOT,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "        return batch_layout(batch_size, size, self.planes)[0]",
        "new": "        return batch_size * 3 * size**2",
        "tests": [PLANES_IN_SLOT, SLOT + "test_a_batch_slot_holds_the_planes"],
    },
    {
        "id": "instances-relabelled-beside-the-slot",  # the relabelled map replaces the slot's plane, unsent
        "row": ROW_SLOT,
        "file": "shardkit/loader/targetrows.py",
        "old": "            inst.copy_(relabel(inst, table))",
        "new": "            inst = relabel(inst, table)",
        "tests": [PLANES_IN_SLOT, "tests/loader/test_instances_loader.py"],
    },
    {
        "id": "planes-not-aligned",  # an instance map alone at an odd offset: a batch of odd size cannot be viewed
        "row": ROW_SLOT,
        "file": "shardkit/loader/batching.py",
        "old": "ALIGN = 64",
        "new": "ALIGN = 1",
        "tests": [SLOT + "test_an_instance_map_alone_at_odd_sizes"],
    },
    {
        "id": "fast-mask-warp-constant-folded",  # one rounding where sampling_grid has two: a column off near a tie
        "row": ROW_MOVE,
        "file": "shardkit/targets/crops.py",
        "old": "        g = torch.addcmul(shift + shear * _ZERO + (2.0 * TIE + 1.0) / n_in - 1.0, scale, pos)",
        "new": "        g = torch.addcmul(shift + shear * _ZERO + ((2.0 * TIE + 1.0) / n_in - 1.0), scale, pos)",
        "tests": [FAST],
    },
    {
        "id": "device-window-pads-nothing",  # output pixels outside the window still get taps: no padding on the device
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "        & (o < o1)",
        "new": "        & (o < o1 + 1e9)",
        "tests": [DEVICE_WINDOW, DEVICE],
    },
    {
        "id": "device-window-targets-by-the-crop-rule",  # the device's targets follow train's clamp rule, not the window
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/devicetargets.py",
        "old": "        if window:",
        "new": "        if False:",
        "tests": [DEVICE],
    },
    {
        "id": "device-window-planned-scale",  # the window resampled at the planned scale, not the rounded span's
        "row": ROW_PRESET,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "    scale = (b - a) / np.maximum(o1 - o0, 1.0)",
        "new": "    scale = per_out * per_stored",
        "tests": [DEVICE_WINDOW, DEVICE],
    },
]
