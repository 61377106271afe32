#!/usr/bin/env bash
# Device round 146 (session 26): the prefill expert GEMM with the 11-instruction EXTRACT
# (0ac127f) against the 16-instruction one (the tree in ab-base.tar: `git archive 7e7734f`),
# both on the shipped K loop, at 1K / 4K tokens, trees interleaved three times (≈ 3 min): is
# round 145's 1.82 ms per 4K call (round 137b: 1.73) the EXTRACT or the machine?
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
MOE=(--tokens 1024 4096 --bm 128 --warpgroups 2 --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
     --w4a16-parts 4 --skip-triton)
ab_base_tree ab-base.tar || exit 1
for i in 1 2 3; do
  for tree in base new; do
    if [ $tree = base ]; then
      (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 bench/moe_gluon_prefill.py \
        "${MOE[@]}" >"$OUT/moe_${tree}_$i.log" 2>&1)
    else
      timeout 100 python3 bench/moe_gluon_prefill.py "${MOE[@]}" >"$OUT/moe_${tree}_$i.log" 2>&1
    fi
    echo "$tree $i rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_${tree}_$i.log" | cut -d'|' -f2,3,7,8,11
  done
done
rm -f "$OUT/install.log"
