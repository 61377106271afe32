#!/usr/bin/env bash
# Ran at a072ab1 / 046e287: the PIPE loop and its flags (--w4a16-pipe, ncu_probe --w4a16-pipe)
# were removed after these rounds (no gain, session 26); check that commit out to rerun it.
# Device round 144 (session 25): the prefill expert GEMM at 4K tokens, with and without its
# integer decode (--probe-no-decode), each over the K loop's waits (PIPE 0 / 1) and 1 / 2
# warpgroups per program (≈ 3 min): whether the loop's skeleton (round 142: ~1.2 ms of the
# ~1.45 ms at 1K without the decode) is the wgmma wait latency (PIPE would help the probe).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
MOE=(--tokens 1024 4096 --bm 128 --warpgroups 2 --w4a16-bm 128 --w4a16-stages 2
     --w4a16-wg 1 2 --w4a16-parts 4 --w4a16-pipe 0 1 --skip-triton)
for kind in real probe; do
  timeout 200 python3 bench/moe_gluon_prefill.py "${MOE[@]}" \
    $([ $kind = probe ] && echo --probe-no-decode) >"$OUT/moe_${kind}.log" 2>&1
  echo "$kind rc=$?"; grep -E "^\| [0-9]" "$OUT/moe_${kind}.log" | grep -v "all launches" \
    | cut -d'|' -f2,3,6,7,8,11
done
rm -f "$OUT/install.log"
