#!/usr/bin/env bash
# Device round 114 (session 20): the W4A8 decode GEMM's K loop unrolled by 2 (DECODE_UNROLL:
# each x slot and its wgmma descriptors a constant; down 216 -> 192 instructions a step in the
# sm_90 SASS, gated 349 -> 313, at the price of 8 / 24 B of spills under the 128 / 80 caps)
# against the loop of round 113 — its GPU checks, the GEMMs alone interleaved (≈ 3 min).
# Ran at commit 1a8ba91 (PART=a only): unrolled was slower (gated 1.393 / 1.484 vs 1.341 /
# 1.394 ms at 256 tokens), the code is removed, so this script needs that commit.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  w4a8_decode_checks_and_gemms 150 unroll=0 unroll=1 unroll=0 unroll=1 ;;
b)
  for v in 1 0 1; do
    DI_UNROLL=$v timeout 150 python3 -c "
import runpy, sys
from deepinfer.kernels.triton import moe_gluon_w4a8
moe_gluon_w4a8.DECODE_UNROLL = $v == 1
sys.argv = ['bench/decode.py', '--batches', '64,256', '--contexts', '32768', '--no-eager',
            '--no-profile', '--out', '/tmp/unroll$v']
runpy.run_path('bench/decode.py', run_name='__main__')" >"$OUT/decode_unroll$v.log" 2>&1
    echo "decode unroll=$v rc=$?"
    sed -n '/^## decode/,$p' "$OUT/decode_unroll$v.log" | grep -E "^\| (64|256) \|"
  done ;;
esac
rm -f "$OUT/install.log"
