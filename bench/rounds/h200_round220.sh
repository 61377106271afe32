#!/usr/bin/env bash
# Device round 220 (session 45) (≈ 7 min): the 4K expert GEMM (BM 128, REP 2, eighths) on
# the producer-warp kernel with its weights in a ring of their own 6 stages ahead of the
# tokens' 2 (moe_gluon_w4a16_prefill_ws.WEIGHT_STAGES) against the one ring, and on two
# consumer warpgroups sharing the token ring (moe_gluon_w4a16_prefill_ws2: token rings 2 / 3,
# weight rings default 4 / 6), each also with its weights L2-resident (--l2-experts 1: whether
# the weights' HBM stream costs time); then the GPU bit checks of both (and of the pipeline's
# DOWN_TWO_CONSUMERS). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 128 \
  --w4a16-stages 2 --w4a16-wg 1 --w4a16-rep 2 --w4a16-parts 8 --w4a16-kernel ws \
  --ws-weight-stages 0 6 --l2-experts 1 --skip-triton >"$OUT/moe_ws.log" 2>&1
echo "moe_gluon_prefill ws rc=$?"; grep -E "^\||bit-identical" "$OUT/moe_ws.log" | cut -c1-150
timeout 150 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 128 \
  --w4a16-stages 2 3 --w4a16-wg 1 --w4a16-rep 2 --w4a16-parts 8 --w4a16-kernel ws2 \
  --ws-weight-stages 0 6 --l2-experts 1 --skip-triton >"$OUT/moe_ws2.log" 2>&1
echo "moe_gluon_prefill ws2 rc=$?"; grep -E "^\| [0-9]|bit-identical" "$OUT/moe_ws2.log" \
  | cut -c1-150
timeout 150 python3 -m pytest -q -p no:warnings -s tests/gpu/test_moe_gluon_gpu.py \
  -k "eighths_give or gated_swiglu_epilogue or ws2 or down_two" >"$OUT/gpu_moe.log" 2>&1
echo "moe tests rc=$?"; grep -E "FAILED|Error|passed|failed" "$OUT/gpu_moe.log" | cut -c1-150 | tail -8
rm -f "$OUT/install.log"
