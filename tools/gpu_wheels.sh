#!/usr/bin/env bash
# Fill build/gpu_wheels/ with the wheels the lent GPU machine lacks, for tools/gpu_check.sh's preflight.
#
#   tools/gpu_wheels.sh            # run HERE (needs PyPI), then carry the folder:
#   run(command="tools/gpu_check.sh tests decode", carry=["build/gpu_wheels"], timeout_s=430)
#
# The GPU machine: x86-64, CPython 3.12, torch 2.11.0+cu130, torchvision 0.26, no network. It already has numpy,
# pillow, fsspec, tqdm, pyyaml, packaging, pytest, hypothesis, lightning, timm, opencv; it lacks the packages below.
# Every wheel is downloaded without its dependencies (--no-deps): the dependencies of these wheels were checked by
# hand (Requires-Dist, printed below for each wheel), and all of them other than the ones listed are on that machine:
#   webdataset 1.0.2 -> braceexpand (here), numpy, pyyaml     simplejpeg 1.9.0 -> numpy
#   kornia 0.9.0     -> kornia-rs>=0.2 (here), numpy, torch     kornia_rs 0.2.0, braceexpand 0.1.7 -> (none)
#   torchcodec 0.17.0 (+cu130: bundles libnvjpeg 13; needs libcudart/libnvrtc 13, which torch cu130 brings) -> (none)
# TorchCodec: releases <= 0.11 are built for one torch each (0.11 <-> torch 2.11), but the image decoders shardkit calls
# (torchcodec.decoders.decode_jpeg, batched nvJPEG) only exist from 0.16 on (hence shardkit[gpu] = torchcodec>=0.16);
# from 0.12 on TorchCodec is built on torch's stable ABI and supports every torch >= 2.11 (README compatibility table:
# "0.12 | >=2.11"). So 0.16.x/0.17 is the pick for torch 2.11; the PyPI Linux wheel is the CUDA build.
# The import check in gpu_check.sh's preflight says whether it loads there; without it the device path falls back to
# torchvision's decode_jpeg, so a failure costs a figure, not the run.
# Total: about 18 MB (torchcodec 10, kornia_rs 5.3, kornia 1.9); build/ is git-ignored, and the folder travels only through carry.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-build/gpu_wheels}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
# Pinned to what this project's suite runs with here (webdataset, braceexpand, simplejpeg, torchcodec) or the
# newest release when written (kornia 0.9.0, kornia_rs 0.2.0); override with e.g. TORCHCODEC=torchcodec==0.16.0.
PKGS=(
    "${WEBDATASET:-webdataset==1.0.2}"
    "${BRACEEXPAND:-braceexpand==0.1.7}"
    "${SIMPLEJPEG:-simplejpeg==1.9.0}"
    "${KORNIA:-kornia==0.9.0}"
    "${KORNIA_RS:-kornia_rs==0.2.0}"
    "${TORCHCODEC:-torchcodec==0.17.0}"
)
mkdir -p "$DEST"
# a pip config with a constraints file or extra local indexes does not apply to another machine's wheels
PIP_CONSTRAINT= PIP_EXTRA_INDEX_URL= PIP_FIND_LINKS= "$PY" -m pip download --isolated --disable-pip-version-check \
    --dest "$DEST" --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any \
    "${PKGS[@]}"

# what came, with its size and declared dependencies (extras left out), and the total
"$PY" - "$DEST" <<'EOF'
import os, sys, zipfile
dest = sys.argv[1]
total = 0
for name in sorted(os.listdir(dest)):
    if not name.endswith(".whl"):
        continue
    path = os.path.join(dest, name)
    size = os.path.getsize(path)
    total += size
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        reqs = [l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
    reqs = [r for r in reqs if "extra ==" not in r]
    print(f"{size / 1e6:7.2f} MB  {name}\n            requires: {', '.join(reqs) or '-'}")
print(f"{total / 1e6:7.2f} MB  total in {dest}")
if total > 30e6:
    sys.exit(f"{dest} holds {total / 1e6:.1f} MB: more than the 30 MB this script is meant to fetch")
EOF
