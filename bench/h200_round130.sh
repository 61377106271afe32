#!/usr/bin/env bash
# Device round 130 (prepared in session 22, not run: no device time left): the prefill top-k
# without scores for sequences of at most index_topk entries (runtime/model/indexer.py
# SHORT_PICKS, on by default; CPU-verified against the scored path). The tiny model's GPU
# checks; chunk_check 8 x 1,024 (chunks 8,192 / 512: ratio-2 layers take the short picks, ratio
# 1 score) in this tree and in 91d3cb0's (carry ab-base.tar = `git archive 91d3cb0`): tokens
# and logprobs must be bit-identical; 64 prompts of 128 tokens in one generate in both trees
# (91d3cb0: 325-411 ms in round 129a) (≈ 6 min). Pass the commit hash literally.
source "$(dirname "$0")/device_setup.sh"
case "${PART:-a}" in
a)
  ab_base_tree ab-base.tar || exit 1
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|^\.\.\." "$OUT/tests.log" | tail -4
  mkdir -p "$OUT/new" "$OUT/base" /tmp/j
  timeout 100 python3 bench/chunk_check.py --prompt-len 1024 --prompts 8 --chunks 8192,512 \
    --tokens 4 --repeats 3 --out "$OUT/new" >"$OUT/chunk_new.log" 2>&1
  echo "chunk check new rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk_new.log" | grep "^| [0-9]"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 bench/chunk_check.py \
    --prompt-len 1024 --prompts 8 --chunks 8192,512 --tokens 4 --repeats 3 --out "$OUT/base" \
    >"$OUT/chunk_base.log" 2>&1)
  echo "chunk check base rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk_base.log" | grep "^| [0-9]"
  python3 - "$OUT" <<'PY'
import glob, json, sys
new, base = (json.load(open(glob.glob(f"{sys.argv[1]}/{d}/*chunk_check.json")[0]))
             for d in ("new", "base"))
for a, b in zip(new["runs"], base["runs"]):
    same = a["tokens"] == b["tokens"] and a["logprobs"] == b["logprobs"]
    print(f"chunk {a['chunk']}: new vs base tokens and logprobs bit-identical: {same}")
PY
  timeout 90 python3 bench/prefill.py --prompt-lens 128 --batch-prompts 64 --repeats 2 \
    --no-eager --no-profile --out /tmp/j >"$OUT/prefill_new.log" 2>&1
  echo "prefill new rc=$?"; grep -E "^prefill 64" "$OUT/prefill_new.log"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 90 python3 bench/prefill.py \
    --prompt-lens 128 --batch-prompts 64 --repeats 2 --no-eager --no-profile --out /tmp/j \
    >"$OUT/prefill_base.log" 2>&1)
  echo "prefill base rc=$?"; grep -E "^prefill 64" "$OUT/prefill_base.log" ;;
esac
rm -f "$OUT/install.log"
