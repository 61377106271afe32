#!/usr/bin/env bash
# Device round 85 (session 17): the host side of a prefill chunk — ForwardBatch.build in numpy
# with one pinned asynchronous copy (was torch.tensor of lists and a pageable copy: a stream
# sync), the engram index pinned, the positions trusted on the GPU (no read-back), DecodeRows'
# slots pinned; and the expert GEMM pipelined per 32-K group (rounds 83 / 84).
#   PART=a (≈ 6 min): GPU checks (model, experts), the 4K prefill with its profile and host
#     syncs, decode 256 x 32K.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a)
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q tests/gpu/test_model_gpu.py \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a16 or model or engram or incremental" \
    >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "$OUT/tests.log" | tail -4
  timeout 170 python3 bench/prefill.py --prompt-lens 4096 --no-eager --sync-sites \
    --out "$OUT" >"$OUT/prefill.log" 2>&1
  echo "prefill rc=$?"; grep -E "^\| 4096|^host syncs" "$OUT/prefill.log"
  sed -n '/GPU idle/,/^$/p' "$OUT/prefill.log" | head -8
  timeout 120 python3 bench/decode.py --batches 256 --contexts 32768 --no-eager --no-profile \
    >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -E "^\| 256 \|" ;;
esac
rm -f "$OUT/install.log"
