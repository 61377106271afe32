#!/usr/bin/env bash
# Device round 212 (session 42) (≈ 3 min): the SwiGLU epilogue in the quad layout
# (moe_swiglu_epilogue.MODE 3: a token's group on four lanes, eight adjacent output columns a
# lane — 2,432 epilogue instructions in the sm_90 SASS against the lane layout's 4,304): its GPU
# bit checks against the two GEMMs + SwiGLU, then bench/gated_swiglu.py at the 4K shape (lane
# and quad layouts, passes of 32 / 64 tokens). Session 43 added the octet layout (MODE 4: one
# 16-byte shared load of g and of u a lane, two 8-byte stores) to both. Pass the commit hash
# literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 -m pytest -q -p no:warnings -s tests/gpu/test_moe_gluon_gpu.py \
  -k gated_swiglu_epilogue >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|gated \+ swiglu" "$OUT/gpu_tests.log" | tail -8
timeout 240 python3 bench/gated_swiglu.py --tokens 4096 --chunks 32,64 \
  >"$OUT/gated_swiglu.log" 2>&1
echo "gated_swiglu rc=$?"; tail -12 "$OUT/gated_swiglu.log"
rm -f "$OUT/install.log"
