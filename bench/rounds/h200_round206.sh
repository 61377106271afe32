#!/usr/bin/env bash
# Device round 206 (session 41) (≈ 6 min): the gated expert GEMM's SwiGLU epilogue with a
# group's features across a warp's lanes (round 205's first layout: bits equal, 16 % slower)
# — its GPU checks and timing against the two GEMMs and the SwiGLU apart, then the lone 4K
# prompt interleaved in one process, apart against fused (the check tokens should be equal).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s tests/gpu/test_moe_gluon_gpu.py \
  -k "gated_swiglu or w4a16_prefill_pipeline" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^\| w4a16 gated|^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" \
  | cut -c1-150 | tail -8
prefill_ab_4k 3 "apart=--w4a16-fused-swiglu 0" "fused=--w4a16-fused-swiglu 1"
rm -f "$OUT/install.log"
