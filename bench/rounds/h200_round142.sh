#!/usr/bin/env bash
# Device round 142 (session 25): what the prefill expert GEMM costs without its integer decode
# (bench/moe_gluon_prefill.py --probe-no-decode: the weight words scaled as they are, wrong
# values) against the kernel itself, 1K / 4K / 8K tokens, interleaved (real, probe, real,
# probe; ≈ 3 min). Rounds 140a / 141a: neither one group in flight (PIPE) nor 30 % fewer
# integer instructions moved it. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
MOE=(--tokens 1024 4096 8192 --bm 128 --warpgroups 2 --w4a16-bm 128 --w4a16-stages 2
     --w4a16-wg 2 --w4a16-parts 4 --skip-triton)
for i in 1 2; do
  for kind in real probe; do
    timeout 120 python3 bench/moe_gluon_prefill.py "${MOE[@]}" \
      $([ $kind = probe ] && echo --probe-no-decode) >"$OUT/moe_${kind}_$i.log" 2>&1
    echo "$kind $i rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_${kind}_$i.log" | grep -v "all launches" \
      | cut -d'|' -f2,3,7,8,11
  done
done
rm -f "$OUT/install.log"
