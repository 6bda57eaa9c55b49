#!/usr/bin/env bash
# GPU check for issue #4 (GpuAugment + DevicePrefetcher) and the loader's pinned path (#3), about 3-4 minutes on one H200.
#
# Runs the augment/prefetch tests with their CUDA parametrizations (including
# the no-host-sync test under torch.cuda.set_sync_debug_mode("error")), then
# tools/bench_augment.py on cuda: shardkit eager and torch.compile vs Kornia vs
# per-image torchvision at 224^2 batch 256, a ResNet-50 bf16 step with and
# without the augmentation, and loader alone vs loader + prefetch + augmentation.
#
# Needs python3 with torch + torchvision + pytest. Kornia is optional: carry a
# pure-Python copy made here with
#   mkdir -p build/gpu_deps/kornia_rs_stub/kornia_rs && cp -r .venv/lib/python3*/site-packages/kornia build/gpu_deps/ \
#     && touch build/gpu_deps/kornia_rs_stub/kornia_rs/__init__.py build/gpu_deps/kornia_rs_stub/kornia_rs/io.py
# (kornia imports kornia_rs only for image I/O) and run with carry=["build/gpu_deps"]:
#   tools/gpu_check.sh            # figures also written to $OUT/bench_augment_cuda.json when OUT is set
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
status=0

nvidia-smi -L || true
"$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.cuda.is_available())"
"$PY" -c "import kornia; print('kornia', kornia.__version__)" 2>/dev/null || echo "kornia: not importable (Kornia column skipped)"

echo "== tests (CUDA parametrizations included) =="
timeout 150 "$PY" -m pytest -q -p no:cacheprovider --noconftest tests/test_augment.py tests/test_augment_random.py tests/test_prefetch.py 2>&1 | tail -25 || status=1
echo "== loader: pinned batches and the buffer pool (needs webdataset, simplejpeg, fsspec importable) =="
timeout 90 "$PY" -m pytest -q -p no:cacheprovider --noconftest tests/test_pool.py 2>&1 | tail -8 || status=1

echo "== benchmark: 224^2, batch 256, cuda =="
timeout 270 "$PY" tools/bench_augment.py --device cuda --batch 256 --size 224 --input-size 256 \
    --compile --half-compute --resnet50 --e2e --e2e-batches 20 --json "$OUTDIR/bench_augment_cuda.json" || status=1
exit $status
