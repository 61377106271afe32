#!/usr/bin/env bash
# Device round 131 (session 23): a prefill step's entry appends for all sequences at once
# (model/group_layout.py, Compressor.emit), the paged rings and entries written and read for
# all sequences in one op (WindowLayout.pool_rows, append_entries_many, entries_many), and the
# score-free top-k of candidate consumers and reusing layers over all rows. Base: 683bc91
# (carry ab-base.tar = `git archive 683bc91`).
# a: the tiny model's GPU checks, the batch-invariance checks; chunk_check 8 x 1,024 (chunks
#    8,192 / 512) in both trees, bits compared; 64 x 128-token prompts in one generate (≈ 6 min).
# b: lone 1K / 4K prompts and 8 x 1K in one generate, both trees interleaved (≈ 8 min).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
case "${PART:-a}" in
a) prefill_short_prompts_ab 3
   timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
     tests/gpu/test_batch_invariance_gpu.py >"$OUT/tests_invariance.log" 2>&1
   echo "invariance checks rc=$?"; tail -2 "$OUT/tests_invariance.log" ;;
b) prefill_ab_interleaved "--prompt-lens 1024,4096 --batch-prompts 8 --repeats 5 --no-eager --no-profile" ;;
esac
rm -f "$OUT/install.log"
