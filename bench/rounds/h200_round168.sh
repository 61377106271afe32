#!/usr/bin/env bash
# Device round 168 (session 32; after rounds 166 / 167) (≈ 6 min): what rounds 162 / 163 held
# besides those two —
#   * bench/moe_align.py: µs per call in CUDA graphs and host µs, the one-program and chunked
#     align paths against the torch version at 1 .. 32K tokens, MAX_PAIRS:CHUNK variants (set
#     moe_align.MAX_PAIRS / CHUNK from it: where the chunks should take over);
#   * 8 x 4K prompts in one generate (steps in flight: the host hidden) with the kernel table by
#     family, host phases and --op-stacks (the torch ops by own device time with the code that
#     issued them).
# Pass the commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
timeout 120 python3 bench/moe_align.py >"$OUT/moe_align.log" 2>&1
echo "moe_align rc=$?"; grep -E "^\|" "$OUT/moe_align.log" | cut -c1-110 | head -52
timeout 240 python3 bench/prefill.py --prompt-lens 4096 --batch-prompts 8 --repeats 2 \
  --no-eager --host-phases --op-stacks --out "$OUT" >"$OUT/prefill_8x4k.log" 2>&1
echo "prefill rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_8x4k.log"
sed -n '/^## prefill/,$p' "$OUT/prefill_8x4k.log" | grep -v "^USDT" | cut -c1-150 \
  | grep -E "^\| [0-9]|GPU busy|family|^\| (routed|dense|attention|indexer|rest)" | head -30
sed -n '/^torch ops of one prefill/,/^$/p' "$OUT/prefill_8x4k.log" | cut -c1-220 | head -14
rm -f "$OUT/install.log"
