#!/usr/bin/env bash
# Device round 167 (session 32; after round 166; round 167a ran its 4K half) (≈ 5 min):
#   * the prefill expert GEMM with session 31's EXTRACT (o and y as (v & sign) | ((v >> 4) &
#     e1e0m): 32 LOP3 fewer per 128-K step and thread in the REP 2 loops' sm_90 SASS, the same
#     bits) against session 30's (the tree in ab-base.tar: `git archive 98bc43c > ab-base.tar`,
#     named in the run's carry), trees interleaved twice, at the engine's 8K shape (base, two
#     warpgroups of one fragment; the 4K shape: round 167a, kept);
#   * decode 64 / 256 x 4K (sessions 29-30's launches fewer a step).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
MOE8=(--tokens 8192 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 2
      --w4a16-rep 1 --w4a16-kernel base --w4a16-parts 4)
ab_base_tree ab-base.tar || exit 1
mkdir -p /tmp/moe
for i in 1 2; do
  for tree in base new; do
    log="/tmp/moe/moe8k_${tree}_$i.log"
    if [ $tree = base ]; then
      (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 80 python3 \
        bench/moe_gluon_prefill.py "${MOE8[@]}" >"$log" 2>&1)
    else
      timeout 80 python3 bench/moe_gluon_prefill.py "${MOE8[@]}" >"$log" 2>&1
    fi
    echo "$tree 8K $i rc=$?"; grep -E "^\| [0-9]" "$log" | cut -d'|' -f2,3,7,8,11
  done
done
timeout 110 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
  --no-profile >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
rm -f "$OUT/install.log"
