#!/usr/bin/env bash
# Device round 215 (session 43; ran as three direct calls at aa04560 on an H100 — its steps with
# shorter filters; results bench/results/2026-12-05-session43/) (≈ 7 min): round 212's checks and timings plus the persistent
# gated kernel (moe_gluon_gated_persistent: the SwiGLU epilogue on warps of its own, overlapping
# the next work item's K loop). In order, each under its own timeout (a hang in the new kernel
# loses only its own step): the one-block fused epilogue's GPU bit checks (lane / quad / octet
# layouts); bench/gated_swiglu.py at the 4K shape (apart, the fused forms at chunk 32, then the
# persistent kernel's rows); the persistent kernel's GPU bit checks, and the pipeline with
# FUSED_SWIGLU (one-block, then FUSED_PERSISTENT) against apart. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -p no:warnings -s tests/gpu/test_moe_gluon_gpu.py \
  -k gated_swiglu_epilogue >"$OUT/gpu_epilogue.log" 2>&1
echo "epilogue tests rc=$?"; grep -E "passed|failed|gated \+ swiglu" "$OUT/gpu_epilogue.log" | tail -10
timeout 200 python3 bench/gated_swiglu.py --tokens 4096 --chunks 32 \
  >"$OUT/gated_swiglu.log" 2>&1
echo "gated_swiglu rc=$?"; tail -12 "$OUT/gated_swiglu.log"
timeout 120 python3 -m pytest -q -p no:warnings -x tests/gpu/test_moe_gluon_gpu.py \
  -k "gated_persistent or fused_swiglu_same_bits" >"$OUT/gpu_persistent.log" 2>&1
echo "persistent tests rc=$?"; grep -E "passed|failed|Error|assert" "$OUT/gpu_persistent.log" | tail -6
rm -f "$OUT/install.log"
