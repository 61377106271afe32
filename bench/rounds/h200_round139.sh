#!/usr/bin/env bash
# Device round 139 (session 24): what the prefill expert GEMM's weights cost — each bf16 GEMM
# (gated w1, down w2) at 1K / 4K / 8K tokens (the engine's BM 128, 2 stages, 2 warpgroups,
# parts 4), then the same launches with their blocks remapped onto 1 / 8 experts (weights
# L2-resident: no HBM weight streaming; bench/moe_gluon_prefill.py --l2-experts) (≈ 4 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
TRITON_INTERPRET=0 timeout 400 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 \
  --bm 128 --warpgroups 2 --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2 --w4a16-parts 4 \
  --l2-experts 1 8 --skip-triton >"$OUT/moe_l2.log" 2>&1
echo "moe rc=$?"; grep -E "^\||HBM" "$OUT/moe_l2.log" | head -40
rm -f "$OUT/install.log"
