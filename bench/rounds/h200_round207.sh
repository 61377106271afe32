#!/usr/bin/env bash
# Device round 207 (session 41) (≈ 6 min): the gated expert GEMM's SwiGLU epilogue run once
# per program after the partitions join (round 206: inside each part fill's loop, 8-9 %
# slower than apart on an H100) — its GPU checks and timing against the two GEMMs and the
# SwiGLU apart, then the lone 4K prompt interleaved in one process, apart against fused.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 300 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s tests/gpu/test_moe_gluon_gpu.py \
  -k "gated_swiglu or w4a16_prefill_pipeline or eighths" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^\| w4a16 gated|^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" \
  | cut -c1-150 | tail -8
prefill_ab_4k 3 "apart=--w4a16-fused-swiglu 0" "fused=--w4a16-fused-swiglu 1"
rm -f "$OUT/install.log"
