#!/usr/bin/env bash
# Device round 167a (session 32; what ran of round 167 in the device time left after round
# 166, ~3 min, carry ab-base.tar = `git archive 98bc43c -o ab-base.tar`): a lone 4K prompt
# with --gated-swiglu 0 / 1 / 0 / 1, then the prefill expert GEMM at the engine's 4K shape (ws,
# one warpgroup of two fragments, BM 128) in the base tree (98bc43c: session 30's EXTRACT) and
# this one, base / new / base / new. The 8K shape and decode: not run (round 167). Ran at
# commit cee224a: the gated kernel (--gated-swiglu) was removed after it (its code: ea001a7).
source "$(dirname "$0")/../device_setup.sh"
i=0
for flag in 0 1 0 1; do
  i=$((i+1))
  timeout 70 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --no-profile \
    --gated-swiglu $flag --out /tmp/j >"$OUT/prefill_gated${flag}_$i.log" 2>&1
  echo "gated-swiglu $flag run $i rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_gated${flag}_$i.log"
done
ab_base_tree ab-base.tar || exit 1
A=(--tokens 4096 --bm 128 --skip-triton --w4a16-bm 128 --w4a16-stages 2 --w4a16-wg 1
   --w4a16-rep 2 --w4a16-kernel ws --w4a16-parts 4)
for tree in base new base new; do
  if [ $tree = base ]; then
    (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 60 python3 bench/moe_gluon_prefill.py \
      "${A[@]}" >/tmp/m.log 2>&1)
  else
    timeout 60 python3 bench/moe_gluon_prefill.py "${A[@]}" >/tmp/m.log 2>&1
  fi
  echo "$tree 4K rc=$?"; grep -E "^\| [0-9]" /tmp/m.log | cut -d'|' -f2,3,7,8,11
done
