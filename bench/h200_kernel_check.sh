#!/usr/bin/env bash
# One device round on the H200: install deepinfer there (no network: --no-deps, the image has
# torch/triton/pybind11), run every GPU kernel check against its torch reference, then the
# MoE FP4 choice benchmark. Full logs go to $OUT; the tables print last.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$OUT/versions.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { tail -20 "$OUT/install.log"; exit 1; }
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu 2>&1 | tee "$OUT/gpu_tests.log" | tail -80
status=${PIPESTATUS[0]}
if [ -f bench/moe_fp4_choice.py ]; then
  timeout 240 python3 bench/moe_fp4_choice.py 2>&1 | tee "$OUT/moe_fp4_choice.log" | tail -25
fi
exit "$status"
