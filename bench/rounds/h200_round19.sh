#!/usr/bin/env bash
# Device round 19 (one call, ≈ 6 min): the decode expert GEMMs after round 18's Nsight Compute
# reading (2 programs per SM, gated kernel issue-bound, down kernel prologue-bound): GPU checks
# of the vouched one-multiply loop (W_ONE_MUL=2, bit-identical to the two-multiply unpack), the
# decode tilings incl. register caps and a separate down tiling at 64 and 256 tokens, the
# vouched loop at a 4K prefill chunk, then decode 64 / 256 x 4K with the fastest at 64.
source "$(dirname "$0")/../device_setup.sh"
timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf tests/gpu/test_gemm_side_gpu.py \
  -k "moe" >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -6
for n in 64 256; do
  timeout 200 python3 bench/moe_decode.py --tokens --config-tokens $n >"$OUT/moe_$n.log" 2>&1
  echo "moe $n rc=$?"; grep -A17 "W4A16 tilings" "$OUT/moe_$n.log"
done
timeout 60 python3 bench/moe_decode.py --tokens --config-tokens 4096 --configs \
  64x64x128:1:4:4:0:1:1,64x64x128:1:4:4:0:1:2 >"$OUT/moe_4096.log" 2>&1
echo "moe 4096 rc=$?"; grep -A4 "W4A16 tilings" "$OUT/moe_4096.log"
decode_with_fastest_moe "$OUT/moe_64.log"
rm -f "$OUT/install.log"
