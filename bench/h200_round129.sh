#!/usr/bin/env bash
# Device round 129 (session 22): prefill attention over all sequences of a step at once
# (model/window_layout.py). The tiny model's GPU checks through the engine (16 prompts: batched
# prefill on the Triton / Gluon kernels against the reference); chunk_check with 8 prompts of
# 1,024 tokens (one step of 8 sequences; 512-token chunks: continuing sequences reading their
# rings) in this tree and in 6ef88e1's (carry ab-base.tar = `git archive 6ef88e1`): the JSONs'
# tokens and logprobs must be bit-identical; then 64 prompts of 128 tokens in one generate
# (prefill.py --batch-prompts) in both trees (≈ 6 min).
source "$(dirname "$0")/device_setup.sh"
case "${PART:-a}" in
a)
  ab_base_tree ab-base.tar || exit 1
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  mkdir -p "$OUT/new" "$OUT/base" /tmp/j
  timeout 100 python3 bench/chunk_check.py --prompt-len 1024 --prompts 8 --chunks 8192,512 \
    --tokens 4 --repeats 1 --out "$OUT/new" >"$OUT/chunk_new.log" 2>&1
  echo "chunk check new rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk_new.log" | grep "^| [0-9]"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 bench/chunk_check.py \
    --prompt-len 1024 --prompts 8 --chunks 8192,512 --tokens 4 --repeats 1 --out "$OUT/base" \
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
