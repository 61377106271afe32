#!/usr/bin/env bash
# Device round 178 (session 36) (≈ 5 min): the rule for linear_wide's MMA_FIRST (a step's
# wgmmas before its barrier and TMA refill; round 177 at 4,096 rows on two warpgroups: wo_b
# 588 -> 540 µs, wq_b 546 -> 520, shared w1/w3 223 -> 193, wq_a 101 -> 64 against its
# one-warpgroup default) and the new defaults end to end, most needed first —
#   * gemm_decode at 4,096 rows: wide_config's launch with MMA_FIRST off / on (gl0 / glf), and
#     one warpgroup with it / two without it explicitly; then the decode sizes 64 / 128 / 256,
#     gl0 / glf (the "rel diff vs default" column: 0 = the same bits as the first variant);
#   * the lone 4K prompt, old defaults (PARTS 4, MMA_FIRST off) against new (PARTS 8 — on since
#     round 177's bit checks — and MMA_FIRST on), 3 rounds interleaved, bits compared;
#   * the base prefill expert kernel (the 8K steps' shape) with its MMA_FIRST, base / +first
#     twice, bits against the first row.
# (tests/gpu/test_linear_wide_gpu.py's MMA_FIRST checks: the next round with device time.)
# Ran in session 36 at commit bf68298 (an H100). The base expert kernel's MMA_FIRST (base+first)
# was removed after it (level at 8K): rerun at that commit.
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 100 python3 bench/gemm_decode.py --rows 4096 --variants \
  gl0,glf,gl:1:256:64:3:w1:first,gl:2:256:64:4:w1,gl0,glf >"$OUT/gemm4k.log" 2>&1
echo "gemm 4096 rc=$?"; grep -E "^\|" "$OUT/gemm4k.log" | cut -c1-150 | tail -52
timeout 70 python3 bench/gemm_decode.py --rows 64 128 256 --variants gl0,glf,gl0,glf \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm decode sizes rc=$?"; grep -E "^\| [0-9]+ \| gl" "$OUT/gemm_decode.log" | cut -c1-150
grep -E "^\| [a-z]" "$OUT/gemm_decode.log" | awk -F'|' '$8 !~ /0.0e\+00/' | head -8
prefill_ab_4k 3 "old=--w4a16-prefill-parts 4 --linear-wide-mma-first 0" \
  "new=--w4a16-prefill-parts 8 --linear-wide-mma-first 1"
MOE8=(--tokens 8192 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-parts 8 --w4a16-kernel base base+first base base+first)
timeout 90 python3 bench/moe_gluon_prefill.py "${MOE8[@]}" >"$OUT/moe8k_first.log" 2>&1
echo "moe 8K first rc=$?"; grep -E "^\| 8192 \| w4a16|bit-identical" "$OUT/moe8k_first.log" \
  | cut -c1-120 | head -16
rm -f "$OUT/install.log"
