#!/usr/bin/env bash
# Device round 202 (session 40) (≈ 5 min): the shared expert's gate and up projections as one
# GEMM of 4,608 outputs at prefill rows (weights packed on load: Expert.pack_gate_up,
# quantized.stacked_rows; shared_expert.PACKED_MIN_ROWS) — its GPU checks (the same bits as
# the separate GEMMs at 1,024 / 4,096 rows, both timed), then the lone 4K prompt in one
# process (prefill_ab: packed against apart, the check tokens should be equal). Pass the commit
# hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q -s \
  tests/gpu/test_shared_expert_gpu.py >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^\| shared|^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -12
prefill_ab_4k 3 "apart=--launch-constant shared_expert.PACKED_MIN_ROWS=1000000" \
  "packed=--launch-constant shared_expert.PACKED_MIN_ROWS=1024"
rm -f "$OUT/install.log"
