#!/usr/bin/env bash
# Device round 5 (issue 7, after the first measurement): the routed-expert kernel alone at the
# slice shapes (bench/moe_decode.py), one decode point with its kernel profile and the engine
# loop's idle gaps + CUDA API calls, one 4K prefill with its kernel profile. ≈ 3 min with a
# warm Triton cache; on a cold one deepinfer-run compiles every kernel first (≈ 4-5 min): run
# it with SAVE_TRITON_CACHE=1 under the run tool's 600 s limit, then carry the cache parts.
source "$(dirname "$0")/../device_setup.sh"
# issue 6's command line: compile the slice topology, run 64 prompts (token ids) with graphs
python3 - <<'PY' >/tmp/requests.jsonl
import json, sys
sys.path.insert(0, "bench")
from h200_slice_check import make_prompts
for i, ids in enumerate(make_prompts(64, 129280)):
    print(json.dumps({"id": f"p{i}", "prompt_token_ids": ids}))
PY
deepinfer-compile artifacts/topologies/v41-flash-slice-h200.yaml -o /tmp/slice-plan >/dev/null \
  && timeout ${RUN_TIMEOUT:-360} deepinfer-run /tmp/slice-plan --input /tmp/requests.jsonl \
     --output "$OUT/run.jsonl" --max-tokens 16 --stats 2>&1 | grep -v "decode bucket" | tail -12
echo "deepinfer-run rc=$? results: $(wc -l <"$OUT/run.jsonl" 2>/dev/null) lines"
timeout ${MOE_TIMEOUT:-60} python3 bench/moe_decode.py >"$OUT/moe_decode.log" 2>&1
echo "moe_decode rc=$?"; tail -30 "$OUT/moe_decode.log"
timeout ${DECODE_TIMEOUT:-90} python3 bench/decode.py --out "$OUT" --batches 64 --contexts 4096 \
  --no-eager --profile-points 64x4096 >"$OUT/decode.log" 2>&1
echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | tail -40
timeout ${PREFILL_TIMEOUT:-50} python3 bench/prefill.py --out "$OUT" --prompt-lens 4096 \
  --no-eager --repeats 2 >"$OUT/prefill.log" 2>&1
echo "prefill rc=$?"; sed -n '/^## prefill/,$p' "$OUT/prefill.log" | grep -v "^USDT" | tail -30
