"""Mutants of the converter's older, pure parts: planning (``shardkit/convert/shards.py``), the resume journal
(``journal.py``) and image processing (``imageproc.py``, away from its ``SkipReason`` enum).
"""

ROW_SAME_BYTES = (
    "Conversion: byte-identical shards whatever --workers or --num-tasks; a shard's recorded sha256 is its file's"
)
ROW_CAP = "Conversion: shards within --shard-bytes (the writer's bytes)"
ROW_RESUME = "Processes killed: a killed conversion, rerun, is byte-identical to an uninterrupted one"
ROW_PIXELS = "Conversion: every image converted upright to the target size, or skipped with its reason"

T = "tests/convert/test_convert_oracle.py"
T_UNITS = "tests/convert/test_parts.py"

MUTANTS = [
    # ---------------------------------------------------------------- plan.py
    {
        "id": "plan-keys-in-discovery-order",
        "row": ROW_SAME_BYTES,
        "file": "shardkit/convert/shards.py",
        "old": "ordered = sorted(files, key=lambda f: f.relpath)",
        "new": "ordered = list(files)",
        "tests": [f"{T_UNITS}::test_order_and_tasks_are_partitions"],
    },
    {
        "id": "plan-shuffle-with-the-global-rng",
        "row": ROW_SAME_BYTES,
        "file": "shardkit/convert/shards.py",
        "old": "random.Random(seed).shuffle(items)",
        "new": "random.shuffle(items)",
        "tests": [f"{T_UNITS}::test_order_and_tasks_are_partitions"],
    },
    {
        "id": "plan-last-shard-owned-by-no-task",
        "row": ROW_SAME_BYTES,
        "file": "shardkit/convert/shards.py",
        "old": "return list(range(task_index, num_shards, num_tasks))",
        "new": "return list(range(task_index, num_shards - 1, num_tasks))",
        "tests": [f"{T_UNITS}::test_order_and_tasks_are_partitions"],
    },
    {
        "id": "plan-per-shard-against-the-whole-cap",
        "row": ROW_CAP,
        "file": "shardkit/convert/shards.py",
        "old": "usable = shard_bytes * FILL_TARGET - _END_OF_ARCHIVE - _RECORD",
        "new": "usable = shard_bytes",
        "tests": [f"{T_UNITS}::test_order_and_tasks_are_partitions"],
    },
    {
        "id": "plan-cap-ignores-end-blocks-and-record-padding",
        "row": ROW_CAP,
        "file": "shardkit/convert/shards.py",
        "old": "(self.full or shard_bytes_for(self.total + size) > self.shard_bytes)",
        "new": "(self.full or self.total + size > self.shard_bytes)",
        "tests": [f"{T}::test_byte_cap_is_the_longest_prefix_the_writer_keeps_under_it"],
    },
    {
        "id": "plan-cap-split-not-a-prefix",
        "row": ROW_CAP,
        "file": "shardkit/convert/shards.py",
        "old": "(self.full or shard_bytes_for(self.total + size) > self.shard_bytes)",
        "new": "(shard_bytes_for(self.total + size) > self.shard_bytes)",
        "tests": [f"{T_UNITS}::test_pack_and_split_at_cap"],
    },
    {
        "id": "plan-member-bytes-wrong-at-whole-blocks",
        "row": ROW_CAP,
        "file": "shardkit/convert/shards.py",
        "old": "return _MEMBER_OVERHEAD + math.ceil(payload / _BLOCK) * _BLOCK",
        "new": "return _MEMBER_OVERHEAD + (payload // _BLOCK + 1) * _BLOCK",
        "tests": [f"{T}::test_byte_cap_is_the_longest_prefix_the_writer_keeps_under_it"],
    },
    {
        "id": "plan-pack-one-sample-too-many",
        "row": ROW_CAP,
        "file": "shardkit/convert/shards.py",
        "old": "full = shard_size is not None and i - start >= shard_size",
        "new": "full = shard_size is not None and i - start > shard_size",
        "tests": [f"{T_UNITS}::test_pack_and_split_at_cap"],
    },
    # ---------------------------------------------------------------- journal.py
    {
        "id": "journal-plan-identity-ignores-the-input",
        "row": ROW_RESUME,
        "file": "shardkit/convert/journal.py",
        "old": "return json_sha256([self.split, self.options, self.classes, self.encoder, self.input_sha256, *more])",
        "new": "return json_sha256([self.split, self.options, self.classes, self.encoder, *more])",
        "tests": [f"{T}::test_the_plans_identity_covers_options_classes_encoder_and_input"],
    },
    {
        "id": "journal-plan-version-not-checked",
        "row": ROW_RESUME,
        "file": "shardkit/convert/journal.py",
        "old": 'if d.get("format") != PLAN_FORMAT or d.get("version") != PLAN_VERSION:',
        "new": 'if d.get("format") != PLAN_FORMAT:',
        "tests": [f"{T}::test_a_plan_of_another_format_or_version_is_refused"],
    },
    {
        "id": "journal-record-missing-field-crashes",
        "row": ROW_RESUME,
        "file": "shardkit/convert/journal.py",
        "old": "        except (ValueError, TypeError, KeyError):\n            return None",
        "new": "        except (ValueError, TypeError):\n            return None",
        "tests": [f"{T}::test_a_damaged_shard_record_is_redone_not_a_crash"],
    },
    # ---------------------------------------------------------------- imageproc.py (far from SkipReason)
    {
        "id": "imageproc-small-images-upscaled",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/imageproc.py",
        "old": "    if side <= target:\n        return width, height",
        "new": "    if False:\n        return width, height",
        "tests": [f"{T_UNITS}::test_target_size"],
    },
    {
        "id": "imageproc-max-side-bounds-the-short-side",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/imageproc.py",
        "old": "if width <= height if opts.short_side is not None else width >= height:",
        "new": "if width <= height:",
        "tests": [f"{T_UNITS}::test_target_size"],
    },
    {
        "id": "imageproc-16-bit-not-scaled",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/colour.py",
        "old": "arr = np.clip(raw, 0, 65535) >> 8",
        "new": "arr = np.clip(raw, 0, 255)",
        "tests": [f"{T_UNITS}::test_mode_conversions"],
    },
    {
        "id": "imageproc-transparency-pasted-without-mask",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/colour.py",
        "old": "bg.paste(rgb, mask=alpha)",
        "new": "bg.paste(rgb)",
        "tests": [f"{T_UNITS}::test_mode_conversions"],
    },
    {
        "id": "imageproc-copy-keeps-rotated-jpegs",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/imageproc.py",
        "old": 'im.mode in ("RGB", "L") and orientation == 1 and not convert_icc:',
        "new": 'im.mode in ("RGB", "L") and not convert_icc:',
        "tests": [f"{T}::test_copy_keeps_only_upright_rgb_jpegs_within_the_pixel_limit"],
    },
    {
        "id": "imageproc-rotation-ignored-for-the-size",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/imageproc.py",
        "old": "ow, oh = (h, w) if orientation in (5, 6, 7, 8) else (w, h)",
        "new": "ow, oh = (w, h)",
        "tests": [f"{T_UNITS}::test_fast_path_keeps_exif_rotation_and_falls_back_on_truncated_jpeg"],
    },
    {
        "id": "imageproc-max-pixels-after-the-copy",
        "row": ROW_PIXELS,
        "file": "shardkit/convert/imageproc.py",
        "old": "    if w * h > opts.max_pixels:\n        raise SkipImage",
        "new": "    if w * h > opts.max_pixels and not opts.copy:\n        raise SkipImage",
        "tests": [f"{T}::test_copy_keeps_only_upright_rgb_jpegs_within_the_pixel_limit"],
    },
]
