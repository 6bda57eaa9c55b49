"""Mutants of the JPEG backend (TorchCodec or torchvision, data errors, the decoder key): ``shardkit/loader/decode/backend.py``, the
batched decode and its fallbacks in ``shardkit/loader/decode/device.py``, ``decoder="torchvision"`` in
``shardkit/loader/decode/decoders.py`` and the device decoder cache and report in ``shardkit/loader/loader.py``.
"""

ROW_BACKEND = (
    "Device decode: TorchCodec decodes when installed (torchvision's deprecated decoder only without it), "
    "chosen once, named in loader.report() and shardkit bench"
)
ROW_SAME = (
    "Device decode: the worker path's pixels and skip counts through either backend (EXIF-oriented, CMYK, gray, "
    "progressive, PNG named .jpg, truncated, garbage)"
)
ROW_ERRORS = (
    "Device decode: only a bad file is bisected and dropped; out-of-memory, CUDA and decoder-start errors propagate"
)
ROW_DEVICE = "Device decode: one decoder per device ('cuda' and 'cuda:0' are the same)"

T = "tests/loader/decode/test_backend.py"

MUTANTS = [
    {
        "id": "codec-torchcodec-never-chosen",
        "row": ROW_BACKEND,
        "file": "shardkit/loader/decode/backend.py",
        "old": "return TORCHCODEC if importable(TORCHCODEC) else TORCHVISION",
        "new": "return TORCHVISION",
        "tests": [f"{T}::test_the_choice_is_a_pure_function_of_what_imports"],
    },
    {
        "id": "codec-torchcodec-backend-calls-torchvision",
        "row": ROW_BACKEND,
        "file": "shardkit/loader/decode/backend.py",
        "old": "    TORCHCODEC: _decode_torchcodec,",
        "new": "    TORCHCODEC: _decode_torchvision,",
        "tests": [f"{T}::test_with_torchcodec_the_device_path_never_calls_torchvisions_decoders"],
    },
    {
        "id": "codec-report-omits-the-backend",
        "row": ROW_BACKEND,
        "file": "shardkit/loader/decode/strategies.py",
        "old": """        return f", decoded on {', '.join(sorted(decoders))}" if decoders else ""\n""",
        "new": '        return ""\n',
        "tests": [f"{T}::test_a_fresh_process_under_W_error_decodes_through_the_reported_backend"],
    },
    {
        "id": "codec-bench-omits-the-backend",
        "row": ROW_BACKEND,
        "file": "shardkit/ops/bench.py",
        "old": 'report.decoder += f", decoded on {device} by {backend}"',
        "new": 'report.decoder += f", decoded on {device}"',
        "tests": [f"{T}::test_bench_names_the_backend"],
    },
    {
        "id": "codec-bisects-on-any-runtime-error",  # the bug of Part C item 2: only OutOfMemoryError propagated
        "row": ROW_ERRORS,
        "file": "shardkit/loader/decode/device.py",
        "old": "            if not is_data_error(exc):",
        "new": "            if isinstance(exc, torch.cuda.OutOfMemoryError) or not isinstance(exc, RuntimeError):",
        "tests": [f"{T}::test_out_of_memory_cuda_and_start_errors_propagate_without_bisection"],
    },
    {
        "id": "codec-nvjpeg-status-ignored",
        "row": ROW_ERRORS,
        "file": "shardkit/loader/decode/backend.py",
        "old": "return not (m and int(m.group(1)) in _NVJPEG_NOT_DATA)",
        "new": "return True",
        "tests": [f"{T}::test_out_of_memory_cuda_and_start_errors_propagate_without_bisection"],
    },
    {
        "id": "codec-every-error-is-the-datas",
        "row": ROW_ERRORS,
        "file": "shardkit/loader/decode/backend.py",
        "old": "    if any(p in msg for p in _NOT_DATA):\n        return False\n",
        "new": "",
        "tests": [f"{T}::test_out_of_memory_cuda_and_start_errors_propagate_without_bisection"],
    },
    {
        "id": "codec-no-error-is-the-datas",
        "row": ROW_ERRORS,
        "file": "shardkit/loader/decode/backend.py",
        "old": "    msg = str(exc).lower()\n",
        "new": "    return False\n    msg = str(exc).lower()\n",
        "tests": [f"{T}::test_a_data_error_is_bisected_and_the_sample_decoded_on_cpu"],
    },
    {
        "id": "codec-fallback-copy-inside-the-broad-except",  # the other half of Part C item 2
        "row": ROW_ERRORS,
        "file": "shardkit/loader/decode/device.py",
        "old": "            pixels = self._cpu_pixels(jpegs[i], sizes[i, 0], sizes[i, 1])\n",
        "new": "            pixels = self._cpu_pixels(jpegs[i], sizes[i, 0], sizes[i, 1]).to(self.device)\n",
        "tests": [f"{T}::test_the_cpu_fallbacks_copy_to_the_device_is_not_swallowed"],
    },
    {
        "id": "codec-exif-orientation-not-routed",
        "row": ROW_SAME,
        "file": "shardkit/loader/decode/jpegroute.py",
        "old": "            oriented = app1_orientation(b[i + 4 : i + 2 + seg_len]) != 1",
        "new": "            oriented = False",
        "tests": [f"{T}::test_bad_jpegs_skip_rule_and_counts_are_the_worker_paths"],
    },
    {
        "id": "codec-exif-byte-order-fixed",
        "row": ROW_SAME,
        "file": "shardkit/loader/decode/backend.py",
        "old": 'order: Literal["little", "big"] = "little" if tiff[:2] == b"II" else "big"',
        "new": 'order: Literal["little", "big"] = "big"',
        "tests": [f"{T}::test_exif_orientation_reads_the_tag_like_pil"],
    },
    {
        "id": "codec-worker-torchvision-decoder-rotates",
        "row": ROW_SAME,
        "file": "shardkit/loader/decode/decoders.py",
        "old": "self._orientation = exif_orientation if self.backend == TORCHCODEC else None",
        "new": "self._orientation = None",
        "tests": [f"{T}::test_worker_decoder_torchvision_gives_the_stored_pixels"],
    },
    {
        "id": "codec-decoder-cache-keyed-by-the-raw-device",  # Part C item 7
        "row": ROW_DEVICE,
        "file": "shardkit/loader/decode/strategies.py",
        "old": "key = (normalize_device(device), size or image.size)",
        "new": "key = (torch.device(device), size or image.size)",
        "tests": [f"{T}::test_cuda_and_cuda0_share_one_decoder"],
    },
]
