#!/usr/bin/env bash
# Device round 53 (session 12; one call, ≈ 1.5 min): the warp stall breakdown of the W4A8 Gluon
# decode GEMMs at 256 tokens (round 52: DRAM at 70-73 %, 4 / 7 blocks per SM by registers and
# shared memory, 7.5 / 9.8 warp cycles per issued instruction) — which stall dominates decides
# between deeper TMA prefetch, fewer instructions and more resident blocks. Carry the
# triton-cache parts.
source "$(dirname "$0")/../device_setup.sh"
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
M=$(ncu_stall_metrics)
timeout 150 "$NCU" --clock-control none --profile-from-start off -k regex:_w4a8_decode \
  --metrics "$M" python3 bench/ncu_probe.py experts-w4a8 --tokens 256 >"$OUT/ncu_stalls_256.log" 2>&1
echo "ncu rc=$?"
grep -E "_w4a8_decode_kernel|stalled|inst_executed|dram__bytes|warps_active" "$OUT/ncu_stalls_256.log" \
  | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -50
rm -f "$OUT/install.log"
