#!/usr/bin/env bash
# Device round 178 (session 36) (≈ 8 min): the rule for linear_wide's MMA_FIRST (a step's
# wgmmas before its barrier and TMA refill; round 177 at 4,096 rows on two warpgroups: wo_b
# 588 -> 540 µs, wq_b 546 -> 520, shared w1/w3 223 -> 193, wq_a 101 -> 64 against its
# one-warpgroup default) and the new defaults end to end —
#   * tests/gpu/test_linear_wide_gpu.py whole (every launch class with MMA_FIRST: the same
#     bits; REP 2 against REP 1 with the split fixed);
#   * gemm_decode at 4,096 rows: wide_config's launch with MMA_FIRST off / on (gl0 / glf), and
#     two / one warpgroups explicitly, each order; at the decode sizes 64 / 128 / 256: gl0 / glf;
#   * the base prefill expert kernel (the 8K steps' shape) with its MMA_FIRST, base / +first
#     twice, bits against the first row;
#   * the lone 4K prompt, old defaults (PARTS 4, MMA_FIRST off) against new (PARTS 8 — on since
#     round 177's bit checks — and MMA_FIRST on), 4 rounds interleaved, bits compared.
# Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu -s -rf \
  tests/gpu/test_linear_wide_gpu.py >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|[0-9]+ passed|[0-9]+ failed" "$OUT/gpu.log" | tail -6
timeout 120 python3 bench/gemm_decode.py --rows 4096 --variants \
  gl0,glf,gl:2:256:64:4:w1,gl:2:256:64:4:w1:first,gl:1:256:64:3:w1,gl:1:256:64:3:w1:first,gl0,glf \
  >"$OUT/gemm4k.log" 2>&1
echo "gemm 4096 rc=$?"; grep -E "^\|" "$OUT/gemm4k.log" | cut -c1-150 | tail -64
timeout 100 python3 bench/gemm_decode.py --rows 64 128 256 --variants gl0,glf,gl0,glf \
  >"$OUT/gemm_decode.log" 2>&1
echo "gemm decode sizes rc=$?"; grep -E "^\|" "$OUT/gemm_decode.log" | cut -c1-150 | tail -16
# the base expert kernel (8K steps: two warpgroups of one fragment) with MMA_FIRST: bits and ms
MOE8=(--tokens 8192 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-parts 8 --w4a16-kernel base base+first base base+first)
timeout 100 python3 bench/moe_gluon_prefill.py "${MOE8[@]}" >"$OUT/moe8k_first.log" 2>&1
echo "moe 8K first rc=$?"; grep -E "^\| 8192 \| w4a16|bit-identical" "$OUT/moe8k_first.log" \
  | cut -c1-120 | head -16
timeout 200 python3 bench/prefill_ab.py --prompt-len 4096 --rounds 4 --repeats 3 \
  --variant "old=--w4a16-prefill-parts 4 --linear-wide-mma-first 0" \
  --variant "new=--w4a16-prefill-parts 8 --linear-wide-mma-first 1" \
  --out "$OUT" >"$OUT/prefill_ab.log" 2>&1
echo "prefill_ab rc=$?"; grep -E "^\| [a-z0-9]+ \| [0-9]|median|same|differ|tokens" \
  "$OUT/prefill_ab.log" | cut -c1-160 | tail -14
rm -f "$OUT/install.log"
