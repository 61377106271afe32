#!/usr/bin/env bash
# Device round 132 (session 23): where a lone prompt's prefill time goes. Lone 1K and 4K
# prompts (3 repeats), the kernel / idle profile of the 1K one, and the host's phases with each
# layer's enqueue start (bench/prefill.py --host-phases) at 1K and at 4K (≈ 3 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) for len in 1024 4096; do
     timeout 150 python3 bench/prefill.py --prompt-lens $len --repeats 3 --no-eager \
       --host-phases $([ $len = 4096 ] && echo --no-profile) --out "$OUT" \
       >"$OUT/prefill_$len.log" 2>&1
     echo "prefill $len rc=$?"; grep -E "^prefill [0-9]|^\| [0-9]+ \|" "$OUT/prefill_$len.log"
     sed -n '/^host phases/,/generate done/p' "$OUT/prefill_$len.log"
     grep -E "GPU busy" "$OUT/prefill_$len.log"
     grep -A7 "^GPU idle" "$OUT/prefill_$len.log" | cut -c1-160
   done ;;
esac
rm -f "$OUT/install.log"
