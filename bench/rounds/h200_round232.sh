#!/usr/bin/env bash
# Device round 232 (session 46) (≈ 4 min): the producer-warp expert GEMM's ROW_STORES (the down
# GEMM's output converted to 16-byte stores, each thread 8 consecutive features of one token,
# instead of 2-byte stores from the wgmma layout — linear_ss's lesson): its GPU bit checks, then
# the 4K expert GEMMs and pipeline, ws against wsr (bench/moe_gluon_prefill.py, BM 128, REP 2,
# eighths), twice in alternation. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_moe_gluon_gpu.py \
  -k row_stores >"$OUT/gpu_row_stores.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu_row_stores.log" | cut -c1-200
timeout 200 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 128 --w4a16-stages 2 \
  --w4a16-wg 1 --w4a16-rep 2 --w4a16-parts 8 --w4a16-kernel ws wsr ws wsr --skip-triton \
  >"$OUT/moe_row_stores.log" 2>&1
echo "moe_gluon_prefill rc=$?"; grep -E "^\| [0-9]|bit-identical" "$OUT/moe_row_stores.log" \
  | cut -c1-150
rm -f "$OUT/install.log"
