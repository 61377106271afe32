#!/usr/bin/env bash
# Device round 136 (session 24): cache records packed and unpacked by kernel ops
# (kernels/triton/records.py; a lone prefill step's model-code launches 527 -> ~150 on the tiny
# model). Base: 6103ddc (carry ab-base.tar = `git archive 6103ddc`).
# a: the records' GPU check, the tiny model's GPU checks, chunk_check 8 x 1,024 (chunks 8,192 /
#    512) in both trees with bits compared, 64 x 128-token prompts in both trees; the host cost
#    of one launch (bench/launch_overhead.py) (≈ 7 min).
# b: lone 1K / 4K prompts, both trees interleaved; the new tree's host phases at 1K (≈ 6 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
     tests/gpu/test_attention_side_gpu.py -k record >"$OUT/tests_records.log" 2>&1
   echo "records check rc=$?"; tail -1 "$OUT/tests_records.log"
   timeout 60 python3 bench/launch_overhead.py >"$OUT/launch.log" 2>&1
   echo "launch rc=$?"; grep "^|" "$OUT/launch.log"
   prefill_short_prompts_ab 3 ;;
b) prefill_ab_interleaved "--prompt-lens 1024,4096 --repeats 5 --no-eager --no-profile"
   lone_1k_host_phases ;;
esac
rm -f "$OUT/install.log"
