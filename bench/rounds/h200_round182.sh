#!/usr/bin/env bash
# Device round 182 (session 37) (≈ 4 min): the prefill expert GEMM's program shapes re-checked
# now that PARTS 8 is the default (the choices were made at PARTS 4, sessions 27-28):
#   * the lone 4K prompt: REP 2 on one warpgroup with its TMA on a producer warp (the default:
#     up to 64 pairs per expert, KERNEL auto -> ws), the same REP 2 programs on the base
#     kernel, and two warpgroups of one fragment (REP off), interleaved 4 rounds, tokens
#     compared;
#   * the same three shapes alone at the 4K shape (bench/moe_gluon_prefill.py, parts 8).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
prefill_ab_4k 4 "s36=--w4a16-rep-max-pairs 64 --w4a16-kernel auto" \
  "rep2base=--w4a16-rep-max-pairs 64 --w4a16-kernel base" \
  "rep0=--w4a16-rep-max-pairs 0 --w4a16-kernel auto"
MOE=(--tokens 4096 --bm 256 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-parts 8)
timeout 100 python3 bench/moe_gluon_prefill.py "${MOE[@]}" --w4a16-wg 1 --w4a16-rep 2 \
  --w4a16-kernel ws base ws base >"$OUT/moe4k_rep2.log" 2>&1
echo "moe 4K rep 2 rc=$?"; grep -E "^\| 4096 \| w4a16|bit-identical" "$OUT/moe4k_rep2.log" \
  | cut -c1-120 | head -12
timeout 80 python3 bench/moe_gluon_prefill.py "${MOE[@]}" --w4a16-wg 2 --w4a16-rep 1 \
  --w4a16-kernel base >"$OUT/moe4k_wg2.log" 2>&1
echo "moe 4K two warpgroups rc=$?"; grep -E "^\| 4096 \| w4a16|bit-identical" \
  "$OUT/moe4k_wg2.log" | cut -c1-120 | head -6
rm -f "$OUT/install.log"
