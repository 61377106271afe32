#!/usr/bin/env bash
# Device round 225 (session 45, prepared) (≈ 4 min): round 224 (bench/wgmma_rate.py, the
# register-A wgmma's pace by N) and the fused gated expert GEMM at the 4K shape with and
# without its decode (bench/gated_swiglu.py, --probe-no-decode in a process of its own): round
# 223 found the single producer-warp GEMMs as fast without the decode while the pipeline was
# 8 % faster. Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 200 python3 bench/wgmma_rate.py >"$OUT/wgmma_rate.log" 2>&1
echo "wgmma_rate rc=$?"; grep -E "^\||ceiling" "$OUT/wgmma_rate.log" | cut -c1-120
for probe in "" "--probe-no-decode"; do
  timeout 120 python3 bench/gated_swiglu.py $probe >"$OUT/gated_swiglu${probe:+_nodecode}.log" 2>&1
  echo "gated_swiglu ${probe:-with the decode} rc=$?"
  grep -E "^\||PROBE" "$OUT/gated_swiglu${probe:+_nodecode}.log" | cut -c1-120
done
rm -f "$OUT/install.log"
