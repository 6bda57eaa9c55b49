#!/usr/bin/env bash
# GPU check for issue #14 (and #4, #3): the device path on a real GPU, in one call of about 5-8 minutes on one H200.
#
#   tools/gpu_check.sh                 # everything, in this order:
#   tools/gpu_check.sh tests           #   tests with CUDA parametrizations: augment (incl. the no-host-sync test under
#                                      #   torch.cuda.set_sync_debug_mode("error")), prefetch, device decode, pinned pool,
#                                      #   and the loader with decode_on="device" through DevicePrefetcher on cuda
#                                      #   (test_prefetch.py::test_decode_on_device_loader_is_decoded_in_the_prefetcher)
#   tools/gpu_check.sh decode          #   tools/bench_devicedecode.py on cuda: nvJPEG decode + crop + augmentation chain,
#                                      #   batch 256 of 341x256 JPEGs, peak memory; the loader with 2 workers +
#                                      #   DevicePrefetcher + chain, decode_on="worker" vs decode_on="device";
#                                      #   ResNet-50 bf16 step alone vs fed by the device path
#   tools/gpu_check.sh augment         #   tools/bench_augment.py on cuda: shardkit eager/compiled vs Kornia vs per-image
#                                      #   torchvision, ResNet-50 bf16 step with/without augmentation, loader + prefetch
# (sections can be combined: tools/gpu_check.sh tests decode). Figures go to $OUT (or .) as
# bench_devicedecode_cuda.json and bench_augment_cuda.json (written as each part finishes), the log to
# $OUT/gpu_check.log, the full test output to $OUT/pytest_cuda.log and $OUT/pytest_pool.log.
#
# Needs python3 with torch + torchvision + pytest (+ webdataset, simplejpeg, fsspec for the loader parts).
# Kornia is optional: carry a pure-Python copy made here with
#   mkdir -p build/gpu_deps/kornia_rs_stub/kornia_rs && cp -r .venv/lib/python3*/site-packages/kornia build/gpu_deps/ \
#     && touch build/gpu_deps/kornia_rs_stub/kornia_rs/__init__.py build/gpu_deps/kornia_rs_stub/kornia_rs/io.py
# (kornia imports kornia_rs only for image I/O) and run with carry=["build/gpu_deps"].
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d build/gpu_deps ]; then
    "$PY" -c "import kornia" 2>/dev/null || export PYTHONPATH="$PYTHONPATH:$PWD/build/gpu_deps:$PWD/build/gpu_deps/kornia_rs_stub"
fi
export PYTHONUNBUFFERED=1
OUTDIR=${OUT:-.}
mkdir -p "$OUTDIR"
exec > >(tee -a "$OUTDIR/gpu_check.log") 2>&1
SECTIONS=${*:-tests decode augment}
status=0

nvidia-smi -L || true
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
echo "CPUs: $(nproc)"
"$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.cuda.is_available())"
"$PY" -c "import kornia; print('kornia', kornia.__version__)" 2>/dev/null || echo "kornia: not importable (Kornia column skipped)"
# decode_on="device" decodes through TorchCodec when it imports, else torchvision's (deprecated) decode_jpeg: say which
"$PY" -c "import torchcodec; print('torchcodec', torchcodec.__version__)" 2>/dev/null || echo "torchcodec: not importable (device decode through torchvision)"
"$PY" -c "from shardkit.loader.decode.backend import default_backend; print('JPEG backend:', default_backend())" || true

for section in $SECTIONS; do
  case "$section" in
    tests)
      echo "== tests (CUDA parametrizations included) =="
      timeout 180 "$PY" -m pytest -q -p no:cacheprovider --noconftest -rsfEp tests/augment/test_ops.py tests/augment/test_randomness.py \
          tests/loader/test_prefetch.py tests/loader/test_gpu_path.py tests/loader/decode/test_device.py tests/loader/decode/test_backend.py \
          tests/loader/decode/test_device_views.py tests/augment/test_views.py > "$OUTDIR/pytest_cuda.log" 2>&1 || status=1
      tail -30 "$OUTDIR/pytest_cuda.log"   # the whole output stays in $OUT/pytest_cuda.log
      grep -E "^(PASSED|FAILED|ERROR|SKIPPED).*(decode_on|test_devicedecode)" "$OUTDIR/pytest_cuda.log" || true
      echo "== loader: pinned batches and the buffer pool (needs webdataset, simplejpeg, fsspec importable) =="
      timeout 90 "$PY" -m pytest -q -p no:cacheprovider --noconftest tests/loader/test_transport.py > "$OUTDIR/pytest_pool.log" 2>&1 || status=1
      tail -8 "$OUTDIR/pytest_pool.log"
      ;;
    decode)
      echo "== device decode: nvJPEG + batched crop + augmentation, batch 256, 256-px shards; loader with 2 workers =="
      timeout 240 "$PY" tools/bench_devicedecode.py --device cuda --batch 256 --images 2048 --repeats 3 \
          --e2e --workers 2 --e2e-batches 24 --resnet50 --json "$OUTDIR/bench_devicedecode_cuda.json" || status=1
      ;;
    augment)
      echo "== augmentation benchmark: 224^2, batch 256, cuda =="
      timeout 270 "$PY" tools/bench_augment.py --device cuda --batch 256 --size 224 --input-size 256 \
          --compile --half-compute --resnet50 --e2e --e2e-batches 20 --json "$OUTDIR/bench_augment_cuda.json" || status=1
      ;;
    *)
      echo "unknown section '$section'; choose from: tests decode augment"; exit 2 ;;
  esac
done
exit $status
