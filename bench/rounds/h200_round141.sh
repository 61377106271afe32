#!/usr/bin/env bash
# Ran at 0ac127f; that EXTRACT was reverted in session 26 (round 146: 4-6 % slower at 4K tokens
# against 7e7734f, three interleaved runs); check 0ac127f out to rerun this round.
# Device round 141 (session 25): the prefill expert GEMM's decode with 11 instead of 16
# integer-pipe instructions per word (mxfp4_w4a8_bf16 EXTRACT: shifts on the multiply pipe;
# round 140b: the integer pipe throttles the kernel) against the tree in ab-base.tar.
#   PART=a (≈ 5 min): the kernel's GPU checks, then each GEMM and the whole pipeline at 1K /
#     4K / 8K tokens, base and new trees interleaved (base, new, base, new).
#   PART=b (≈ 3 min): this tree's kernel at 4K tokens over BM 64 / 128, 1 / 2 warpgroups and
#     2 / 3 token stages (more programs per SM with fewer registers or less shared memory).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
MOE=(--bm 128 --warpgroups 2 --w4a16-wg 2 --w4a16-parts 4 --skip-triton)
case "${PART:-a}" in
a)
  timeout 200 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a16_prefill" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  ab_base_tree ab-base.tar || exit 1
  for i in 1 2; do
    for tree in base new; do
      if [ $tree = base ]; then
        (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 150 python3 bench/moe_gluon_prefill.py \
          --tokens 1024 4096 8192 --w4a16-bm 128 --w4a16-stages 2 "${MOE[@]}" \
          >"$OUT/moe_${tree}_$i.log" 2>&1)
      else
        timeout 150 python3 bench/moe_gluon_prefill.py --tokens 1024 4096 8192 --w4a16-bm 128 \
          --w4a16-stages 2 "${MOE[@]}" >"$OUT/moe_${tree}_$i.log" 2>&1
      fi
      echo "$tree $i rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_${tree}_$i.log" | cut -d'|' -f2,3,7,8,11
    done
  done ;;
b)
  timeout 300 python3 bench/moe_gluon_prefill.py --tokens 4096 --w4a16-bm 64 128 \
    --w4a16-stages 2 3 --bm 128 --warpgroups 2 --w4a16-wg 1 2 --w4a16-parts 4 --skip-triton \
    >"$OUT/moe_sweep.log" 2>&1
  echo "moe rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_sweep.log" | cut -d'|' -f2-8,11 ;;
esac
rm -f "$OUT/install.log"
