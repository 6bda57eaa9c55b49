"""Mutants of the loader's older code: decode and batching (``shardkit/loader/decode/worker.py``, ``batching.py``,
``decoders.py``), the batched crop/resize (``shardkit/loader/decode/cropresize.py``) and dead workers (``worker_death.py``).

Remote reads and the shard cache are in ``storage.py``.
"""

ROW_NOTHING_MOVES = "Damaged images: skipped and counted; every other sample keeps its pixels, label and id"
ROW_CROPS = "Decode: train crops are torchvision's RandomResizedCrop + flip, a pure function of (seed, epoch, sample)"
ROW_EVAL = "Decode: eval is torchvision's Resize + CenterCrop (elongated images cropped first)"
ROW_DEVICE_CROPS = "Device decode on CPU: each sample resized from its own box with its own flip"
ROW_BOMBS = "Damaged images: bombs refused from their header, before any allocation"
ROW_WORKER_DEATH = "Processes killed: a killed worker is one error naming the worker and signal"
ROW_FUZZ = "Hostile input: fuzzed JPEGs fail only with the documented error types (a counted skip)"
ROW_AUG = "GPU augmentation: each op equals torchvision's, MixUp/CutMix labels included"
ROW_NO_SYNC = "GPU augmentation: a GpuAugment call never reads a value back to the host"
ROW_PIPE = "Hostile input: pipe: URLs are never run"
ROW_PREFETCH = "GPU augmentation: DevicePrefetcher yields the loader's batches, transformed (labels to MixUp/CutMix)"
ROW_AGREE = "Damaged shards: loader and verify agree sample by sample on awkward member names"

T = "tests/loader/test_loader_oracle.py"
T_MOVES = f"{T}::test_a_bad_sample_moves_nothing_else"
T_DEC = "tests/loader/decode/test_worker.py"

MUTANTS = [
    # ---------------------------------------------------------------- batching.py
    {
        "id": "batching-labels-shift-after-a-bad-image",
        "row": ROW_NOTHING_MOVES,
        "file": "shardkit/loader/batching.py",
        "old": "labels = torch.tensor([ok[i].label for i in kept], dtype=torch.int64)",
        "new": "labels = torch.tensor([ok[i].label for i in range(len(kept))], dtype=torch.int64)",
        "tests": [T_MOVES],
    },
    {
        "id": "batching-ids-shift-after-a-bad-image",
        "row": ROW_NOTHING_MOVES,
        "file": "shardkit/loader/batching.py",
        "old": "return PixelBatch(images, labels, torch.from_numpy(gids_in[kept]), keys, extra)",
        "new": "return PixelBatch(images, labels, torch.from_numpy(gids_in[: len(kept)]), keys, extra)",
        "tests": [T_MOVES],
    },
    {
        "id": "batching-skips-not-counted",
        "row": ROW_AGREE,
        "file": "shardkit/loader/batching.py",
        "old": 'counters.add("skipped", 1)',
        "new": 'counters.add("skipped", 0)',
        "tests": ["tests/format/test_member_rule.py::test_loader_and_verify_agree_sample_by_sample"],
    },
    {
        "id": "batching-strict-ignored",
        "row": ROW_AGREE,
        "file": "shardkit/loader/batching.py",
        "old": "    if strict:\n        raise DataError",
        "new": "    if False:\n        raise DataError",
        "tests": ["tests/format/test_member_rule.py::test_loader_and_verify_agree_sample_by_sample"],
    },
    # ---------------------------------------------------------------- decode.py
    {
        "id": "decode-row-of-a-failed-image-kept",
        "row": ROW_NOTHING_MOVES,
        "file": "shardkit/loader/decode/worker.py",
        "old": "boxes[i], flips[i], images[len(kept)], times)",
        "new": "boxes[i], flips[i], images[i], times)",
        "tests": [T_MOVES],
    },
    {
        "id": "decode-neighbours-crop-after-a-failed-image",
        "row": ROW_NOTHING_MOVES,
        "file": "shardkit/loader/decode/worker.py",
        "old": "boxes[i], flips[i], images[len(kept)], times)",
        "new": "boxes[len(kept)], flips[len(kept)], images[len(kept)], times)",
        "tests": [T_MOVES],
    },
    {
        "id": "decode-rrc-box-may-fill-the-image-wrongly",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/cropgeometry.py",
        "old": "ok = (w > 0) & (w <= wf[:, None]) & (h > 0) & (h <= hf[:, None])",
        "new": "ok = (w > 0) & (w < wf[:, None]) & (h > 0) & (h < hf[:, None])",
        "tests": [f"{T}::test_rrc_boxes_equal_a_per_sample_reference"],
    },
    {
        "id": "decode-rrc-fallback-ratio-not-clamped",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/cropgeometry.py",
        "old": "fw = np.where(in_ratio > rmax, np.round(hf * rmax), wf)",
        "new": "fw = wf",
        "tests": [f"{T_DEC}::test_rrc_geometry_matches_torchvision"],
    },
    {
        "id": "decode-crops-ignore-the-epoch",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/cropgeometry.py",
        "old": "key = _mix64(key ^ (np.array([epoch], np.int64).astype(np.uint64) + _GOLDEN))",
        "new": "key = _mix64(key ^ _GOLDEN)",
        "tests": [f"{T_DEC}::test_crop_depends_on_sample_not_topology"],
    },
    {
        "id": "decode-flip-drawn-from-the-left-offset",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/worker.py",
        "old": "flips = (u[:, 22] < 0.5) if c.flip else np.zeros(n, bool)",
        "new": "flips = (u[:, 21] < 0.5) if c.flip else np.zeros(n, bool)",
        "tests": [
            f"{T_DEC}::test_sample_uniforms_are_uniform_and_independent",
            f"{T}::test_train_flip_is_independent_of_the_crop",
        ],
    },
    {
        "id": "decode-vertical-flip",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/worker.py",
        "old": "out.copy_(out.flip(-1))",
        "new": "out.copy_(out.flip(-2))",
        "tests": [f"{T_DEC}::test_train_crop_matches_torchvision_resized_crop"],
    },
    {
        "id": "decode-dct-scale-below-the-output-size",
        "row": ROW_CROPS,
        "file": "shardkit/loader/decode/resample.py",
        "old": "while r < 8 and 2 * r <= reduce:",
        "new": "while r < 8 and r <= 2 * reduce:",
        "tests": [f"{T}::test_dct_scaled_crop_keeps_at_least_the_output_size"],
    },
    {
        "id": "decode-eval-center-crop-transposed",
        "row": ROW_EVAL,
        "file": "shardkit/loader/decode/worker.py",
        "old": "top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))",
        "new": "top, left = int(round((new_w - size) / 2.0)), int(round((new_h - size) / 2.0))",
        "tests": [f"{T_DEC}::test_eval_preset_close_to_torchvision"],
    },
    {
        "id": "decode-max-pixels-not-checked",
        "row": ROW_BOMBS,
        "file": "shardkit/loader/decode/worker.py",
        "old": "if width < 1 or height < 1 or width * height > self.cfg.max_pixels:",
        "new": "if width < 1 or height < 1:",
        "tests": ["tests/cli/test_info_verify.py::test_verify_reports_images_the_loader_skips_for_their_pixel_count"],
    },
    {
        "id": "decoders-pil-returns-bgr",
        "row": ROW_NOTHING_MOVES,
        "file": "shardkit/loader/decode/decoders.py",
        "old": 'return np.array(im.convert("RGB"))  # writable',
        "new": 'return np.array(im.convert("RGB"))[..., ::-1].copy()  # writable',
        "tests": ["tests/loader/decode/test_decode_promises.py::test_png_named_jpg_decodes_to_its_pixels"],
    },
    # ---------------------------------------------------------------- cropresize.py (device decode, run on CPU)
    {
        "id": "cropresize-flips-indexed-by-batch-not-group",
        "row": ROW_DEVICE_CROPS,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "flipped = to_device(np.flatnonzero(np.asarray(flips, bool)[idx]), torch.int64, device)",
        "new": "flipped = to_device(np.flatnonzero(np.asarray(flips, bool))[: len(idx)], torch.int64, device)",
        "tests": [f"{T}::test_batched_crops_equal_torchs_interpolate_of_each_box"],
    },
    {
        "id": "cropresize-group-written-to-the-first-rows",
        "row": ROW_DEVICE_CROPS,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "out[sel] = res.view(k, c, s, s)",
        "new": "out[: len(idx)] = res.view(k, c, s, s)",
        "tests": [f"{T}::test_batched_crops_equal_torchs_interpolate_of_each_box"],
    },
    {
        "id": "cropresize-weights-not-normalised",
        "row": ROW_DEVICE_CROPS,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "w.div_(w.sum(-1, keepdim=True).clamp_(min=1e-12))",
        "new": "w.div_(w.sum(-1, keepdim=True).mean().clamp_(min=1e-12))",
        "tests": [f"{T}::test_batched_crops_equal_torchs_interpolate_of_each_box"],
    },
    # ---------------------------------------------------------------- worker_death.py
    {
        "id": "worker-death-signal-as-exit-status",
        "row": ROW_WORKER_DEATH,
        "file": "shardkit/loader/worker_death.py",
        "old": 'how = f"killed by {signal.Signals(-w.exitcode).name}" if w.exitcode < 0 else f"exit status {w.exitcode}"',
        "new": 'how = f"exit status {w.exitcode}"',
        "tests": [f"{T}::test_a_dead_worker_is_named_with_its_signal"],
    },
    {
        "id": "worker-death-watchdog-message-not-parsed-for-several-pids",
        "row": ROW_WORKER_DEATH,
        "file": "shardkit/loader/worker_death.py",
        "old": 'return [f"{pid.strip()} ({how})" for pid in pids.split(",") if pid.strip()]',
        "new": 'return [f"{pids.strip()} ({how})"]',
        "tests": [f"{T}::test_a_dead_worker_is_named_with_its_signal"],
    },
    # ---------------------------------------------------------------- more decode
    {
        "id": "decoders-simplejpeg-without-pil-fallback",
        "row": ROW_FUZZ,
        "file": "shardkit/loader/decode/decoders.py",
        "old": "        except ValueError:  # not a JPEG libjpeg-turbo handles as RGB (CMYK, PNG, damaged...)\n            return self._pil.decode(data, min_w, min_h)",
        "new": '        except ValueError as exc:  # not a JPEG libjpeg-turbo handles as RGB (CMYK, PNG, damaged...)\n            raise RuntimeError(f"cannot decode: {exc}")',
        "tests": [f"{T_DEC}::test_non_jpeg_falls_back_to_pil"],
    },
    {
        "id": "decode-panorama-box-off-centre",
        "row": ROW_EVAL,
        "file": "shardkit/loader/decode/cropgeometry.py",
        "old": "    left = int(round((new_w - size) / 2.0))\n",
        "new": "    left = int(round((new_w - size) / 1.8))\n",
        "tests": ["tests/loader/decode/test_decode_promises.py::test_elongated_image_gives_the_center_crop_pixels"],
    },
    {
        "id": "decode-panorama-resized-whole",
        "row": ROW_EVAL,
        "file": "shardkit/loader/decode/worker.py",
        "old": "if max(width, height) > MAX_EVAL_ASPECT * min(width, height):",
        "new": "if False and max(width, height) > MAX_EVAL_ASPECT * min(width, height):",
        "tests": ["tests/loader/decode/test_decode_promises.py::test_elongated_image_is_cropped_before_resizing"],
    },
    # ---------------------------------------------------------------- augment
    {
        "id": "augment-mix-weight-read-on-the-host",
        "row": ROW_NO_SYNC,
        "file": "shardkit/augment/mixup.py",
        "old": "return torch.where(applied, lam, 1.0).expand(b)",
        "new": "return (lam if bool(applied.all()) else torch.where(applied, lam, 1.0)).expand(b)",
        "tests": ["tests/augment/test_no_sync.py::test_a_whole_call_draws_and_applies_without_host_reads"],
    },
    {
        "id": "augment-mixed-labels-from-the-wrong-neighbour",
        "row": ROW_AUG,
        "file": "shardkit/augment/mixup.py",
        "old": "return torch.lerp(labels.roll(1, 0), labels, lam.view(-1, 1))",
        "new": "return torch.lerp(labels.roll(-1, 0), labels, lam.view(-1, 1))",
        "tests": ["tests/augment/test_ops.py::test_mixup_cutmix_labels"],
    },
    # ---------------------------------------------------------------- sources.py, prefetch.py (CPU path)
    {
        "id": "sources-pipe-urls-run",
        "row": ROW_PIPE,
        "file": "shardkit/storage/opener.py",
        "old": 'if storage.scheme(url) == "pipe" and not cfg.allow_pipe:',
        "new": 'if storage.scheme(url) == "pipe" and cfg.allow_pipe is None:',
        "tests": ["tests/loader/test_loader.py::test_pipe_urls_refused_unless_opted_in"],
    },
    {
        "id": "prefetch-mixing-transform-gets-no-labels",
        "row": ROW_PREFETCH,
        "file": "shardkit/loader/prefetch.py",
        "old": 'transform_labels = bool(getattr(transform, "needs_labels", False))',
        "new": "transform_labels = False",
        "tests": ["tests/loader/test_prefetch.py::test_mixing_transform_gets_the_labels"],
    },
    {
        "id": "prefetch-namedtuple-batches-become-lists",
        "row": ROW_PREFETCH,
        "file": "shardkit/loader/prefetch.py",
        "old": 'return type(batch)(*fields) if hasattr(batch, "_fields") else type(batch)(fields)',
        "new": "return list(fields)",
        "tests": [f"{T}::test_prefetched_batches_keep_their_type_and_fields_with_a_transform"],
    },
]
