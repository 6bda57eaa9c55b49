#!/usr/bin/env bash
# GPU check: the device path (decode, augmentation, prefetch, the CUDA tests) on a real GPU, and the CPU figures of its 16 cores.
#
# Device-session plan (15 min of device time in all, machine start included; each call < 7 min):
#   0. here, once (needs PyPI):  tools/gpu_wheels.sh          # ~18 MB of py3.12 wheels into build/gpu_wheels/
#   1. run(command="tools/gpu_check.sh tests decode",  carry=["build/gpu_wheels"], timeout_s=430)   # <= 7 min
#   2. run(command="tools/gpu_check.sh augment cpu16", carry=["build/gpu_wheels"], timeout_s=430)   # <= 7 min
#   then give_back(). Figures come back under files_at; each call's log is $OUT/gpu_check.log.
#   If call 1 fails in preflight (one line says what did not import), fix that here and rerun the same call.
#   Short of time: call 2 without cpu16 (the CPU figures matter least); cpu16 alone is ~2-3 min.
#
#   tools/gpu_check.sh                 # tests decode augment (cpu16 only when named: the four together pass 10 min)
#   tools/gpu_check.sh preflight       #   always runs first, alone when named alone (~10-30 s): installs the carried
#                                      #   wheels (build/gpu_wheels -> build/gpu_site, no network), then imports torch
#                                      #   (CUDA required), torchvision, webdataset, simplejpeg, fsspec and shardkit and
#                                      #   exits 3 with one "PREFLIGHT FAILED: ..." line if one does not; kornia and
#                                      #   torchcodec are optional and reported (versions, the JPEG backend)
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
#   tools/gpu_check.sh cpu16           #   no GPU needed: on all cores (16 there), 3,000 ImageNet-like JPEGs generated
#                                      #   once per machine (tools/bench_loader.py's make_data, shards of 250);
#                                      #   `shardkit convert` --workers 1 2 4 8 16, one fresh process each, start-up
#                                      #   included (tools/bench_convert.py's fresh_run; goal: speed-up over --workers 1
#                                      #   >= 0.8 x workers up to 8), and the start-up alone (10 images); the CPU loader
#                                      #   at 2, 4, 8, 16 workers (steady state, shardkit.ops.bench.bench) against
#                                      #   workers x the decode-only ceiling of one core (~2 min on 16 cores)
# Section budgets (timeouts): preflight 50 s (wheel install 20, once per machine, + imports 30), tests 140 + 50,
# decode 170, augment 210, cpu16 155 (data 40, convert 70, loader 45). Worst case: call 1 = 410 s, call 2 = 415 s,
# so each call ends inside 7 min by itself; usually well under (the preflight takes seconds, a warm machine keeps
# build/gpu_site). A step that runs out is cut and the next one runs; the benches write their JSON as parts finish.
# Figures go to $OUT (or .) as bench_devicedecode_cuda.json, bench_augment_cuda.json (written as each part
# finishes), bench_convert_cpu16.json and bench_loader_cpu16.json (rewritten after each worker count), the
# log to $OUT/gpu_check.log, the full test output to $OUT/pytest_cuda.log and $OUT/pytest_pool.log.
#
# Needs python3 with torch + torchvision + pytest; the rest comes from build/gpu_wheels (tools/gpu_wheels.sh).
# Without the wheels, the older pure-Python Kornia copy still works: make it here with
#   mkdir -p build/gpu_deps/kornia_rs_stub/kornia_rs && cp -r .venv/lib/python3*/site-packages/kornia build/gpu_deps/ \
#     && touch build/gpu_deps/kornia_rs_stub/kornia_rs/__init__.py build/gpu_deps/kornia_rs_stub/kornia_rs/io.py
# (kornia imports kornia_rs only for image I/O) and add "build/gpu_deps" to carry.
# Here (no GPU), GPU_CHECK_CPU_OK=1 lets the preflight pass without CUDA (smoke tests of preflight and cpu16).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUTDIR=${OUT:-.}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
exec > >(tee -a "$OUTDIR/gpu_check.log") 2>&1
SECTIONS=${*:-tests decode augment}
for section in $SECTIONS; do
  case "$section" in
    preflight|tests|decode|augment|cpu16) ;;
    *) echo "unknown section '$section'; choose from: preflight tests decode augment cpu16"; exit 2 ;;
  esac
done
status=0

# ---------------------------------------------------------------------------------------------------- preflight
echo "== preflight =="
WHEELS=${GPU_WHEELS:-build/gpu_wheels}
SITE=${GPU_SITE:-build/gpu_site}
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    stamp=$(cd "$WHEELS" && ls -1 ./*.whl | sort | tr '\n' ' ')
    if [ "$(cat "$SITE/.wheels" 2>/dev/null)" != "$stamp" ]; then   # a warm machine keeps build/gpu_site: install once
        rm -rf "$SITE" && mkdir -p "$SITE"
        pkgs=$(cd "$WHEELS" && ls -1 ./*.whl | sed 's|^\./||; s|-.*||' | sort -u)
        t0=$SECONDS
        if "$PY" -m pip --version > /dev/null 2>&1; then
            # --no-deps: every dependency of these wheels is on that machine (tools/gpu_wheels.sh); no network
            # shellcheck disable=SC2086
            timeout 20 "$PY" -m pip install --isolated --no-index --find-links "$WHEELS" --no-deps --target "$SITE" \
                --disable-pip-version-check --quiet $pkgs \
                || { echo "PREFLIGHT FAILED: pip install --no-index from $WHEELS did not install: $(echo $pkgs)"; exit 3; }
        else   # no pip in that interpreter: a wheel is a zip of the importable tree
            for w in "$WHEELS"/*.whl; do
                "$PY" -m zipfile -e "$w" "$SITE" || { echo "PREFLIGHT FAILED: cannot unpack $w"; exit 3; }
            done
        fi
        echo "$stamp" > "$SITE/.wheels"
        echo "installed $(echo $pkgs) into $SITE in $((SECONDS - t0)) s"
    fi
    export PYTHONPATH="$PYTHONPATH:$(cd "$SITE" && pwd)"
elif [ -d build/gpu_deps ]; then   # the older carry: a pure-Python Kornia with a kornia_rs stub
    "$PY" -c "import kornia" 2>/dev/null || export PYTHONPATH="$PYTHONPATH:$PWD/build/gpu_deps:$PWD/build/gpu_deps/kornia_rs_stub"
else
    echo "no $WHEELS (tools/gpu_wheels.sh makes it here; carry it): using what $PY has"
fi
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || true
echo "CPUs: $(nproc), python: $PY"
# required imports fail the run in seconds with one line; kornia and torchcodec are optional and only reported
timeout 30 "$PY" - <<'EOF'
import importlib, os, sys, time
t0 = time.perf_counter()

def version(name):
    mod = importlib.import_module(name)
    return getattr(mod, "__version__", "?")

def fail(what):
    print(f"PREFLIGHT FAILED: {what}", flush=True)
    sys.exit(3)

found = {}
for name in ("torch", "torchvision", "numpy", "PIL", "fsspec", "webdataset", "braceexpand", "simplejpeg", "shardkit"):
    try:
        found[name] = version(name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the message
        fail(f"cannot import {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
import torch

cuda = torch.cuda.is_available()
if not cuda and os.environ.get("GPU_CHECK_CPU_OK") != "1":
    fail(f"torch {torch.__version__} sees no CUDA device (torch.version.cuda={torch.version.cuda})")
print("required:", ", ".join(f"{k} {v}" for k, v in found.items()))
if cuda:
    print(f"cuda: {torch.cuda.get_device_name(0)}, torch.version.cuda {torch.version.cuda}, {torch.cuda.device_count()} device(s)")
else:
    print("cuda: not available (GPU_CHECK_CPU_OK=1: CUDA sections will fail or skip)")
for name, use in (("kornia", "the Kornia column of augment"), ("torchcodec", "device decode through TorchCodec")):
    try:
        v = version(name)
        if name == "torchcodec":
            from torchcodec.decoders import decode_jpeg  # noqa: F401 - the entry point shardkit calls (>= 0.16)
        print(f"optional: {name} {v}")
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        print(f"optional: {name} not importable ({type(exc).__name__}: {first}): no {use}")
from shardkit.loader.decode.backend import default_backend

print(f"JPEG backend for decode_on='device': {default_backend()}; imports took {time.perf_counter() - t0:.1f} s")
EOF
rc=$?
if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] && echo "PREFLIGHT FAILED: the import check took over 30 s"
    exit 3
fi

# ---------------------------------------------------------------------------------------------------- sections
for section in $SECTIONS; do
  case "$section" in
    preflight) ;;
    tests)
      echo "== tests (CUDA parametrizations included) =="
      timeout 140 "$PY" -m pytest -q -p no:cacheprovider --noconftest -rsfEp tests/augment/test_ops.py tests/augment/test_randomness.py \
          tests/loader/test_prefetch.py tests/loader/test_gpu_path.py tests/loader/decode/test_device.py tests/loader/decode/test_backend.py \
          tests/loader/decode/test_device_views.py tests/augment/test_views.py > "$OUTDIR/pytest_cuda.log" 2>&1 || status=1
      tail -30 "$OUTDIR/pytest_cuda.log"   # the whole output stays in $OUT/pytest_cuda.log
      grep -E "^(PASSED|FAILED|ERROR|SKIPPED).*(decode_on|test_devicedecode)" "$OUTDIR/pytest_cuda.log" || true
      echo "== loader: pinned batches and the buffer pool (needs webdataset, simplejpeg, fsspec importable) =="
      timeout 50 "$PY" -m pytest -q -p no:cacheprovider --noconftest tests/loader/test_transport.py > "$OUTDIR/pytest_pool.log" 2>&1 || status=1
      tail -8 "$OUTDIR/pytest_pool.log"
      ;;
    decode)
      echo "== device decode: nvJPEG + batched crop + augmentation, batch 256, 256-px shards; loader with 2 workers =="
      timeout 170 "$PY" tools/bench_devicedecode.py --device cuda --batch 256 --images 2048 --repeats 3 \
          --e2e --workers 2 --e2e-batches 24 --resnet50 --json "$OUTDIR/bench_devicedecode_cuda.json" || status=1
      ;;
    augment)
      echo "== augmentation benchmark: 224^2, batch 256, cuda =="
      timeout 210 "$PY" tools/bench_augment.py --device cuda --batch 256 --size 224 --input-size 256 \
          --compile --half-compute --resnet50 --e2e --e2e-batches 20 --json "$OUTDIR/bench_augment_cuda.json" || status=1
      ;;
    cpu16)
      # sizes for a 16-core machine; CPU16_IMAGES=60 CPU16_CONVERT_WORKERS="1 2" CPU16_LOADER_WORKERS=2 is a smoke run
      images=${CPU16_IMAGES:-3000}
      cworkers=${CPU16_CONVERT_WORKERS:-1 2 4 8 16}
      lworkers=${CPU16_LOADER_WORKERS:-2,4,8,16}
      data=${CPU16_DATA:-/tmp/shardkit-cpu16-$images}
      echo "== cpu16: $images ImageNet-like JPEGs on $(nproc) cores: convert --workers $cworkers; loader at $lworkers workers =="
      # 1. data, once per machine: generated in parallel (8 classes), converted to shards of 250 on all cores
      # (python -c, not a heredoc on stdin: spawned worker processes re-run a main *file*, and "<stdin>" is none)
      code=$(cat <<'EOF'
import os, sys, time
sys.path.insert(0, "tools")
import bench_loader

t = time.perf_counter()
src, shards = bench_loader.make_data(sys.argv[1], int(sys.argv[2]), os.cpu_count() or 1)
print(f"data: {src} -> {shards} in {time.perf_counter() - t:.1f} s")
EOF
)
      timeout 40 "$PY" -c "$code" "$data" "$images" || { echo "cpu16: data generation did not finish"; status=1; continue; }
      # 2. convert scaling: one fresh `python -m shardkit convert SRC DEST --workers N --quiet` per N, start-up
      # included, timed by tools/bench_convert.py's own fresh_run. Not bench_convert.py's main: its plain-loop
      # baseline, untimed warm-up round and start-up variants would triple the time; the page cache is warm after
      # step 1 (it read every image). Start-up alone (10 images) is timed for the smallest and largest N.
      code=$(cat <<'EOF'
import json, os, shutil, sys, tempfile
sys.path.insert(0, "tools")
from bench_convert import fresh_run, limited_copy, list_files, shardkit_argv

src, out, workers = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3].split()]
work = tempfile.mkdtemp(prefix="cpu16-convert-")
dest, n = os.path.join(work, "out"), len(list_files(src, None))
small = limited_copy(src, os.path.join(work, "small"), 10)
res = {"images": n, "cpus": len(os.sched_getaffinity(0)), "runs": 1, "convert": [], "startup_10_images_s": {},
       "goal": "speedup_vs_w1 >= 0.8 x workers up to 8 workers, start-up included"}
for w in workers:  # the JSON is rewritten after each, so a timeout keeps what finished
    sec = fresh_run(shardkit_argv(src, dest, w), dest)
    base = res["convert"][0]["seconds"] if res["convert"] else sec
    row = {"workers": w, "seconds": round(sec, 3), "images_per_s": round(n / sec, 1),
           "speedup_vs_first": round(base / sec, 3), "efficiency": round(base / sec / (w / workers[0]), 3)}
    res["convert"].append(row)
    json.dump(res, open(out, "w"), indent=1)
    goal = "" if w == workers[0] or w > 8 else ("  (goal met)" if row["efficiency"] >= 0.8 else "  (below the 0.8 goal)")
    print(f"convert --workers {w:>2}: {sec:6.2f} s, {n / sec:6.0f} img/s, {row['speedup_vs_first']:5.2f}x over "
          f"--workers {workers[0]} = {row['efficiency']:.2f} of linear{goal}", flush=True)
for w in sorted({workers[0], workers[-1]}):
    res["startup_10_images_s"][w] = round(fresh_run(shardkit_argv(small, dest, w), dest), 3)
    json.dump(res, open(out, "w"), indent=1)
print("start-up (10 images, fresh process): " + ", ".join(f"{s:.2f} s with --workers {w}" for w, s in res["startup_10_images_s"].items()))
shutil.rmtree(work, ignore_errors=True)
EOF
)
      timeout 70 "$PY" -c "$code" "$data/imagefolder" "$OUTDIR/bench_convert_cpu16.json" "$cworkers" || status=1
      # 3. the CPU loader at each worker count against workers x the decode-only ceiling (one core, in process)
      code=$(cat <<'EOF'
import json, os, sys
from shardkit.ops.bench import bench

url, out, workers = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3].split(",")]
cores = len(os.sched_getaffinity(0))
res = {"url": url, "cpus": cores, "batch_size": 64, "preset": "train 224", "points": []}
for w in workers:  # one bench call per worker count: the JSON is rewritten after each, so a timeout keeps the rest
    r = bench(url, workers=[w], batches=30, max_s=6.0)
    p = r.points[0]
    res.update(decoder=r.decoder, decode_ceiling_per_core=r.decode_ceiling)
    ceiling = r.decode_ceiling * min(max(1, w), cores)
    res["points"].append({"workers": w, "images_per_s": p.images_per_s, "first_batch_s": p.first_batch_s,
                          "stable": p.stable, "stop": p.stop, "vs_ceiling_x_workers": p.images_per_s / ceiling if ceiling else None})
    json.dump(res, open(out, "w"), indent=1)
    print(f"loader {w:>2} workers: {p.images_per_s:7.0f} img/s, first batch {p.first_batch_s:.2f} s, "
          f"{p.images_per_s / ceiling:.2f} of {min(max(1, w), cores)} x the ceiling ({r.decode_ceiling:.0f} img/s/core, {r.decoder})"
          + ("" if p.stable else f" [not steady: {p.stop}]"), flush=True)
EOF
)
      timeout 45 "$PY" -c "$code" "$data/shards/train" "$OUTDIR/bench_loader_cpu16.json" "$lworkers" || status=1
      ;;
  esac
done
exit $status
