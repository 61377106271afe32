#!/usr/bin/env bash
# Device round 129 (session 22): prefill attention over all sequences of a step at once
# (model/window_layout.py). The tiny model's GPU checks through the engine (16 prompts: batched
# prefill on the Triton / Gluon kernels against the reference); chunk_check with 8 prompts of
# 1,024 tokens (one step of 8 sequences; 512-token chunks: continuing sequences reading their
# rings) in this tree and in 6ef88e1's (carry ab-base.tar = `git archive 6ef88e1`): the JSONs'
# tokens and logprobs must be bit-identical; then 64 prompts of 128 tokens in one generate
# (prefill.py --batch-prompts) in both trees (≈ 6 min).
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) prefill_short_prompts_ab 1 ;;
esac
rm -f "$OUT/install.log"
