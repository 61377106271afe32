#!/usr/bin/env bash
# Device round 61 (prepared in session 13, not run: device time spent). The paged index scores
# v3 (`indexer.PAGED_KERNEL = "v3"`: v2's tiles with the record loads left to Triton's software
# pipeline — cp.async into shared memory, PAGED_V3_STAGES tiles in flight, 165 registers: 3
# programs per SM against v2's 2 with one tile held in registers; CPU-checked only). Round 60:
# `_index_scores_paged_v2_kernel` 1.35 ms per 256 x 32K step (η ~0.28 in round 29's bench).
# Ran (PART=a) at commit 974b483 in session 14: v3 was slower than v2 at every shape and was
# removed after it (this script needs that commit).
# Carry the triton-cache parts.
#   PART=a (≈ 3 min): the GPU checks of the paged scores (v2, v3, v1 against the reference at
#     both decode shapes), then bench/index_decode.py at round 29's shapes over v2 and v3
#     tilings (v3:BT:PROGRAMS:WARPS:STAGES).
#   PART=b (≈ 3 min): decode 64 / 256 x 4K / 32K with --index-paged-kernel $INDEX_KERNEL (v2,
#     or v3[:STAGES] from PART=a's fastest) — compare round 60 (v2).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 120 python3 -m pytest -p no:cacheprovider -m gpu -rf -s \
    tests/gpu/test_attention_side_gpu.py -k "index_scores_paged" >"$OUT/index_tests.log" 2>&1
  echo "index GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|index_scores_paged" \
    "$OUT/index_tests.log" | tail -12
  timeout 240 python3 bench/index_decode.py --ratio 4 --heads 32 --width 65536 \
    --shapes 64:16384,256:16384,64:131072,256:131072 >"$OUT/index_decode.log" 2>&1
  echo "index_decode rc=$?"; grep -E "^\|" "$OUT/index_decode.log" | head -50 ;;
b)
  timeout 230 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096,32768 \
    --no-eager --profile-points 64x4096,256x32768 --gap-prompts 16 --gap-tokens 32 \
    --index-paged-kernel "${INDEX_KERNEL:-v3}" >"$OUT/decode.log" 2>&1
  echo "decode (--index-paged-kernel ${INDEX_KERNEL:-v3}) rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" \
    | grep -E "^\| (64|256) \||busy|_index|_w4a8|start-up|idle|target" | head -20 ;;
esac
rm -f "$OUT/install.log"
