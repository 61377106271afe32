#!/usr/bin/env bash
# Device round 164 (prepared in session 31, not run): the prefill expert GEMM with session 31's
# EXTRACT (o and y as (v & sign) | ((v >> 4) & e1e0m): 32 LOP3 fewer per 128-K step and thread
# in the REP 2 loops' sm_90 SASS, the same bits) against session 30's (the tree in ab-base.tar:
# `git archive 98bc43c > ab-base.tar`, untracked in the repository root), trees interleaved three
# times (≈ 4 min): the engine's 4K shape (ws, one warpgroup of two fragments, BM 128) and its 8K
# shape (base, two warpgroups of one fragment). Round 146 found an EXTRACT that moved ALU work
# onto the FMA pipe 4-6 % slower; this one only drops ALU instructions. Keep it if new <= base
# in every pair; otherwise revert 470e15e. Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
MOE4=(--tokens 4096 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
      --w4a16-rep 2 --w4a16-kernel ws --w4a16-parts 4)
MOE8=(--tokens 8192 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-kernel base --w4a16-parts 4)
ab_base_tree ab-base.tar || exit 1
timeout 100 python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_moe_gluon_gpu.py \
  -k "w4a16_prefill" >"$OUT/gpu.log" 2>&1
echo "gpu checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu.log" | tail -4
for i in 1 2 3; do
  for tree in base new; do
    for shape in 4 8; do
      if [ $shape = 4 ]; then args=("${MOE4[@]}"); else args=("${MOE8[@]}"); fi
      log="$OUT/moe${shape}k_${tree}_$i.log"
      if [ $tree = base ]; then
        (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 \
          bench/moe_gluon_prefill.py "${args[@]}" >"$log" 2>&1)
      else
        timeout 100 python3 bench/moe_gluon_prefill.py "${args[@]}" >"$log" 2>&1
      fi
      echo "$tree ${shape}K $i rc=$?"; grep -E "^\| [0-9]" "$log" | cut -d'|' -f2,3,7,8,11
    done
  done
done
rm -f "$OUT/install.log"
