#!/usr/bin/env bash
# Device round 111 (session 20): the W4A8 decode expert GEMM with the padding slots' activation
# codes and scales not loaded (masked loads; Nsight Compute in round 110a: L2 at 95 % / 88 % of
# its peak in the gated / down GEMM, DRAM at 82 / 72 %; a block's 8 slots read 1 KB of codes
# per K step, an eighth (gated) or a quarter (down) of its weight bytes, and at decode sizes
# most slots are padding) beside the kernel without the masks (kernels/triton/
# moe_gluon_w4a8_old.py, a copy for this A/B), and on step tiles of 64 rows.
#   PART=a (≈ 3 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 400 python3 bench/moe_gluon_decode.py --tokens 64 256 --bm 8 --stages \
    --w4a8-variants module=moe_gluon_w4a8_old default tiled64 module=moe_gluon_w4a8_old \
    default >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8|ceiling|Error|error" "$OUT/moe.log" | head -40 ;;
esac
rm -f "$OUT/install.log"
