"""Mutants of the device-side rules (area "gpufix"): the shared side stream per device
(``shardkit/loader/prefetch.py``), ``compile=True`` with a dynamic batch dimension (``shardkit/augment/pipeline.py``,
``shardkit/private_apis.py``), resize and affine maths independent of the global matmul precision
(``shardkit/loader/decode/cropresize.py``, ``shardkit/augment/affine.py``), out-of-range MixUp/CutMix labels and empty batches
(``shardkit/augment/mixup.py``, ``shardkit/augment/blur.py``). Tests: ``tests/loader/test_gpu_path.py``.

Not here (CPU cannot catch them; the CUDA tests do): the pinned, non-blocking copies of ``cropresize.to_device``
(``tests/loader/test_gpu_path.py::test_resized_crops_never_syncs_on_cuda``) and the stream actually shared on a GPU
(``::test_prefetchers_share_the_cuda_side_stream``)."""

ROW_STREAM = "GPU augmentation: one side stream per device, shared by every DevicePrefetcher"
ROW_COMPILE = "GPU augmentation: compile=True builds a bounded number of graphs over any batch sizes"
ROW_PRECISION = (
    "GPU augmentation and device decode: resize and affine results do not depend on the global matmul precision"
)
ROW_EMPTY = "GPU augmentation: every op takes an empty batch"
ROW_LABELS = "GPU augmentation: an out-of-range MixUp/CutMix label is refused on the host (DevicePrefetcher) or counted (GpuAugment), never a device-side assert"
ROW_NOSYNC = "GPU augmentation: a GpuAugment call never reads a value back to the host"
ROW_BARRIER = "GPU decode: every batched device decode waits for the work queued on its stream (nvJPEG does not)"

T = "tests/loader/test_gpu_path.py::"
STREAM = T + "test_one_side_stream_per_device_across_prefetchers"
THREADS = T + "test_side_streams_made_once_under_threads"
COMPILE = T + "test_compile_is_bounded_over_batch_sizes"
NO_MATMUL = T + "test_no_float32_matmul_in_resize_or_affine"
PRECISION = T + "test_resize_and_affine_ignore_the_global_matmul_precision"
EMPTY = T + "test_every_op_on_an_empty_batch[False]"
LABELS = T + "test_out_of_range_labels_are_counted_not_a_crash"
HOST_CHECK = T + "test_prefetcher_refuses_out_of_range_labels_on_the_host"
NO_SYNC = "tests/augment/test_no_sync.py::test_a_whole_call_draws_and_applies_without_host_reads"
BARRIER = "tests/loader/decode/test_device.py::test_the_batched_decode_waits_for_the_current_stream_first"

MUTANTS = [
    # ------------------------------------------------------------------ C3: shardkit/loader/prefetch.py
    {
        "id": "prefetch-a-stream-per-prefetcher",  # a side stream per prefetcher strands memory
        "row": ROW_STREAM,
        "file": "shardkit/loader/prefetch.py",
        "old": "self._stream = side_streams.get(self.device)",
        "new": "self._stream = side_streams._factory(self.device)",
        "tests": [STREAM],
    },
    {
        "id": "prefetch-cuda-and-cuda0-two-devices",
        "row": ROW_STREAM,
        "file": "shardkit/loader/prefetch.py",
        "old": 'if device.type == "cuda" and device.index is None:',
        "new": "if False:",
        "tests": [STREAM],
    },
    {
        "id": "prefetch-side-stream-not-kept",
        "row": ROW_STREAM,
        "file": "shardkit/loader/prefetch.py",
        "old": "                self._streams[device] = self._factory(device)\n            return self._streams[device]",
        "new": "                return self._factory(device)\n            return self._streams[device]",
        "tests": [THREADS, STREAM],
    },
    # ------------------------------------------------------------------ C4: compile=True
    {
        "id": "compile-batch-size-static",  # a graph per batch size
        "row": ROW_COMPILE,
        "file": "shardkit/augment/pipeline.py",
        "old": "                self._compiled = torch.compile(self.apply)\n            # one graph for every batch size (skips, drops, the last partial batch), not one per size\n            mark_batch_dynamic(",
        "new": "                self._compiled = torch.compile(self.apply, dynamic=False)\n            (",
        # today's code before the fix: static shapes, one graph per batch size up to the recompile limit
        "tests": [COMPILE],
    },
    {
        "id": "compile-empty-batch-compiled",
        "row": ROW_COMPILE,
        "file": "shardkit/augment/pipeline.py",
        "old": "if self._compile and images.shape[0] > 0:",
        "new": "if self._compile:",
        "tests": [COMPILE],
    },
    {
        "id": "compile-batch-dim-not-marked",
        "row": ROW_COMPILE,
        "file": "shardkit/private_apis.py",
        "old": "            mark(t, 0)",
        "new": "            pass",
        "tests": [COMPILE],
    },
    # ------------------------------------------------------------------ C6: matmul precision
    {
        "id": "geometry-compose-by-float32-matmul",  # TF32 under precision "high" (affine)
        "row": ROW_PRECISION,
        "file": "shardkit/augment/affine.py",
        "old": "return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)",
        "new": "return torch.matmul(a, b)",
        "tests": [NO_MATMUL],
    },
    {
        "id": "cropresize-float32-matmul",  # TF32 under precision "high" (resize)
        "row": ROW_PRECISION,
        "file": "shardkit/loader/decode/cropresize.py",
        "old": "exact = torch.float64",
        "new": "exact = torch.float32",
        "tests": [NO_MATMUL],
    },
    # ------------------------------------------------------------------ C7: empty batches, labels
    {
        "id": "blur-empty-batch-convolved",  # GaussianBlur on an empty batch
        "row": ROW_EMPTY,
        "file": "shardkit/augment/blur.py",
        "old": "    if b == 0:",
        "new": "    if False:",
        "tests": [EMPTY],
    },
    {
        "id": "mix-out-of-range-label-scattered",  # labels out of range: a device-side assert on CUDA
        "row": ROW_LABELS,
        "file": "shardkit/augment/mixup.py",
        "old": "out.scatter_(1, idx.clamp(0, num_classes - 1).view(-1, 1), valid.view(-1, 1))",
        "new": "out.scatter_(1, idx.view(-1, 1), valid.view(-1, 1))",
        "tests": [LABELS],
    },
    {
        "id": "mix-out-of-range-label-becomes-a-class",
        "row": ROW_LABELS,
        "file": "shardkit/augment/mixup.py",
        "old": "out.scatter_(1, idx.clamp(0, num_classes - 1).view(-1, 1), valid.view(-1, 1))",
        "new": "out.scatter_(1, idx.clamp(0, num_classes - 1).view(-1, 1), 1.0)",
        "tests": [LABELS],
    },
    {
        "id": "mix-negative-label-valid",
        "row": ROW_LABELS,
        "file": "shardkit/augment/mixup.py",
        "old": "return (labels < 0) | (labels >= num_classes)",
        "new": "return labels >= num_classes",
        "tests": [LABELS],
    },
    {
        "id": "augment-label-errors-not-counted",
        "row": ROW_LABELS,
        "file": "shardkit/augment/pipeline.py",
        "old": "            self._count_label_errors(labels)",
        "new": "            pass",
        "tests": [LABELS],
    },
    {
        "id": "augment-label-errors-counted-on-the-host",
        "row": ROW_NOSYNC,
        "file": "shardkit/augment/pipeline.py",
        "old": "            counters[key].add_(n)",
        "new": "            counters[key].add_(int(n))",
        "tests": [NO_SYNC],
    },
    {
        "id": "prefetch-labels-not-checked-on-the-host",
        "row": ROW_LABELS,
        "file": "shardkit/loader/prefetch.py",
        "old": "            check_labels(batch, self._num_classes)",
        "new": "            pass",
        "tests": [HOST_CHECK],
    },
    {
        "id": "prefetch-label-check-off-by-one",
        "row": ROW_LABELS,
        "file": "shardkit/loader/prefetch.py",
        "old": "bad = ((labels < 0) | (labels >= num_classes)).nonzero()",
        "new": "bad = ((labels < 0) | (labels > num_classes)).nonzero()",
        "tests": [HOST_CHECK],
    },
    {
        "id": "device-decode-without-barrier",
        "row": ROW_BARRIER,
        "file": "shardkit/loader/decode/device.py",
        "old": "    stream_barrier(device)\n    return DECODE[backend](tensors, device)",
        "new": "    return DECODE[backend](tensors, device)",
        "tests": [BARRIER],
    },
    {
        "id": "barrier-syncs-nothing-on-cuda",
        "row": ROW_BARRIER,
        "file": "shardkit/loader/decode/backend.py",
        "old": '    if device.type == "cuda":\n        torch.cuda.current_stream(device).synchronize()',
        "new": '    if device.type == "cuda:0":\n        torch.cuda.current_stream(device).synchronize()',
        "tests": [BARRIER],
    },
]
