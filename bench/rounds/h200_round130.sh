#!/usr/bin/env bash
# Device round 130 (prepared in session 22, not run: no device time left): the prefill top-k
# without scores for sequences of at most index_topk entries (runtime/model/indexer.py
# SHORT_PICKS, on by default; CPU-verified against the scored path), every sequence's at once
# (Attention._short_selection), and each KV source's entries unpacked once per forward
# (Published.entries). The tiny model's GPU
# checks; chunk_check 8 x 1,024 (chunks 8,192 / 512: ratio-2 layers take the short picks, ratio
# 1 score) in this tree and in 91d3cb0's (carry ab-base.tar = `git archive 91d3cb0`): tokens
# and logprobs must be bit-identical; 64 prompts of 128 tokens in one generate in both trees
# (91d3cb0: 325-411 ms in round 129a) (≈ 6 min). Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) prefill_short_prompts_ab 3 ;;
esac
rm -f "$OUT/install.log"
