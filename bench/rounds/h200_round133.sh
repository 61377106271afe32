#!/usr/bin/env bash
# Device round 133 (session 23): the experts at 1K-2K tokens. Round 132a: a lone 1K prompt's
# experts run the decode pipeline (num_pairs <= 16 * experts) at 33.1 ms of its 47 ms GPU time.
# The whole pipelines as CUDA graphs at 1,024 / 2,048 tokens: the decode pipeline, the bf16
# prefill pipeline (BM 64 / 128, parts 4: blocks run a quarter, half, ... of BM) and the FP8
# prefill pipeline (BM 32), each one's bits against the decode pipeline's (≈ 4 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 500 python3 bench/moe_gluon_prefill.py --tokens 1024 2048 --bm 32 --warpgroups 1 \
     --w4a16-bm 64 128 --w4a16-stages 2 --w4a16-parts 4 --graphs >"$OUT/moe.log" 2>&1
   echo "moe rc=$?"; grep -E "all launches|bit-identical|HBM" "$OUT/moe.log" ;;
esac
rm -f "$OUT/install.log"
