# Sourced by the device-round scripts: strict mode, the compiled-kernel environment, $OUT (the
# folder the device machine sends back), and the package installed editable (no network there:
# no dependencies, no build isolation).
#
# Triton's kernel cache: a fresh machine starts cold (every kernel compiles in the first decode
# warm-up). With SAVE_TRITON_CACHE=1 a round leaves its cache in $OUT as
# triton-cache.tar.xz.partNN (≤ 15 MiB each; $OUT sends back at most 8 files: mind the logs);
# put them in the repo root (.gitignore ignores them) and name them in the run's
# `carry`, and the next round starts from that cache (a warm start: what a restart costs).
# The device copy's .git can be stale (it recorded an older HEAD once): run a round as
# `DEEPINFER_COMMIT=<hash> bash bench/rounds/h200_roundN.sh` so the results JSON names the right
# commit.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
mkdir -p "$TRITON_CACHE_DIR"
if compgen -G "triton-cache.tar.xz.part*" >/dev/null; then
  cat triton-cache.tar.xz.part* | tar -xJf - -C "$TRITON_CACHE_DIR" \
    && echo "triton cache restored: $(ls "$TRITON_CACHE_DIR" | wc -l) entries"
fi
# One save per round (a round script that runs another must not save twice: the second save
# would overwrite parts the first completed and can be cut off by the run's limit), written to
# a temporary name and renamed, multi-threaded xz at a low level (seconds, not minutes).
save_triton_cache() {
  rm -f "$OUT"/triton-cache.tar.xz.part*
  tar -cf - -C "$TRITON_CACHE_DIR" . 2>/dev/null | xz -T0 -2 \
    | split -b 15M -d - "$OUT/.triton-cache.tmp." \
    && for f in "$OUT"/.triton-cache.tmp.*; do mv "$f" "$OUT/triton-cache.tar.xz.part${f##*.}"; done
}
if [ "${SAVE_TRITON_CACHE:-0}" = 1 ] && [ -z "${TRITON_CACHE_SAVER:-}" ]; then
  export TRITON_CACHE_SAVER=$$
  trap save_triton_cache EXIT
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { tail -20 "$OUT/install.log"; exit 1; }
# Decode at 64 / 256 x 4K (no eager, no profile) with the fastest expert tiling of a
# bench/moe_decode.py log ($1) as --moe-config; prints the table.
decode_with_fastest_moe() {
  local cfg
  cfg=$(python3 bench/pick_fastest.py "$1" | grep x)
  echo "MOE_DECODE=$cfg"
  timeout 110 python3 bench/decode.py --out "$OUT" --batches 64,256 --contexts 4096 --no-eager \
    --no-profile ${cfg:+--moe-config $cfg} >"$OUT/decode.log" 2>&1
  echo "decode rc=$?"; sed -n '/^## decode/,$p' "$OUT/decode.log" | grep -v "^USDT" | head -9
}
# Nsight Compute: the binary ($NCU, empty if none) and the warp-stall metrics of rounds 53 / 55
# (cycles per issued instruction by reason, instructions, DRAM bytes, active warps).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_stall_metrics() {
  local m="" r
  for r in long_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle \
           short_scoreboard not_selected selected dispatch_stall sleeping membar \
           branch_resolving no_instruction drain tex_throttle imc_miss misc; do
    m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  echo "${m#,},smsp__inst_executed.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
}
# A/B against an older commit on the same machine (machines differ by several %): a round run
# with `carry: ["ab-base.tar"]` (made here by `git archive <commit> -o ab-base.tar`; .gitignore
# ignores it) gets that tree importable as `deepinfer` under $AB_PYTHONPATH, run from $AB_SRC
# (its bench/ scripts), with this round's built _C (the C++ must be the same).
ab_base_tree() {
  AB_SRC=/tmp/ab/src
  AB_PYTHONPATH=/tmp/ab/pkg
  rm -rf /tmp/ab && mkdir -p "$AB_SRC" "$AB_PYTHONPATH" && tar -xf "${1:-ab-base.tar}" -C "$AB_SRC" \
    && cp -r "$AB_SRC/csrc/deepinfer" "$AB_PYTHONPATH/deepinfer" \
    && cp csrc/deepinfer/_C*.so "$AB_PYTHONPATH/deepinfer/" \
    && for d in artifacts planner runtime kernels; do ln -s "$AB_SRC/$d" "$AB_PYTHONPATH/deepinfer/$d"; done \
    && (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH python3 -c \
      "import deepinfer.kernels as k, deepinfer._C; print('A/B base tree:', k.__file__)")
}
# The W4A8 decode GEMM's GPU checks, then its variants alone (bench/moe_gluon_decode.py
# --w4a8-variants "$@", 64 / 256 tokens): $1 = the pytest timeout, the rest the variants.
w4a8_decode_checks_and_gemms() {
  local limit=$1; shift
  timeout "$limit" python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_moe_gluon_gpu.py -k "w4a8 and not prefill or pipeline" >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -4
  timeout 300 python3 bench/moe_gluon_decode.py --tokens 64 256 \
    --w4a8-variants "$@" >"$OUT/moe.log" 2>&1
  echo "moe rc=$?"; grep -E "w4a8 (gated|down)|ceiling" "$OUT/moe.log" | head -20
}
# A prefill change on short prompts against the tree in ab-base.tar (rounds 129 / 130): the tiny
# model's GPU checks; chunk_check with 8 prompts of 1,024 tokens (chunks 8,192 / 512) in both
# trees, their tokens and logprobs compared bit for bit; 64 prompts of 128 tokens in one generate
# in both trees. $1: chunk_check's --repeats (lone-prompt timings).
prefill_short_prompts_ab() {
  local repeats=$1
  ab_base_tree ab-base.tar || return 1
  timeout 150 python3 -m pytest -p no:cacheprovider -m gpu -rf -q \
    tests/gpu/test_model_gpu.py >"$OUT/tests.log" 2>&1
  echo "GPU checks rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|^\.\.\." "$OUT/tests.log" | tail -4
  mkdir -p "$OUT/new" "$OUT/base" /tmp/j
  local args=(--prompt-len 1024 --prompts 8 --chunks 8192,512 --tokens 4 --repeats "$repeats")
  timeout 100 python3 bench/chunk_check.py "${args[@]}" --out "$OUT/new" \
    >"$OUT/chunk_new.log" 2>&1
  echo "chunk check new rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk_new.log" | grep "^| [0-9]"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 100 python3 bench/chunk_check.py \
    "${args[@]}" --out "$OUT/base" >"$OUT/chunk_base.log" 2>&1)
  echo "chunk check base rc=$?"; sed -n '/^## chunked/,$p' "$OUT/chunk_base.log" | grep "^| [0-9]"
  python3 - "$OUT" <<'PY'
import glob, json, sys
new, base = (json.load(open(glob.glob(f"{sys.argv[1]}/{d}/*chunk_check.json")[0]))
             for d in ("new", "base"))
for a, b in zip(new["runs"], base["runs"]):
    same = a["tokens"] == b["tokens"] and a["logprobs"] == b["logprobs"]
    print(f"chunk {a['chunk']}: new vs base tokens and logprobs bit-identical: {same}")
PY
  local short=(--prompt-lens 128 --batch-prompts 64 --repeats 2 --no-eager --no-profile --out /tmp/j)
  timeout 90 python3 bench/prefill.py "${short[@]}" >"$OUT/prefill_new.log" 2>&1
  echo "prefill new rc=$?"; grep -E "^prefill 64" "$OUT/prefill_new.log"
  (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 90 python3 bench/prefill.py "${short[@]}" \
    >"$OUT/prefill_base.log" 2>&1)
  echo "prefill base rc=$?"; grep -E "^prefill 64" "$OUT/prefill_base.log"
}
# Lone and batched prefill timings of this tree and the one in ab-base.tar, interleaved
# (base, new, base, new: the first process on a fresh machine runs slower), $1 = the
# bench/prefill.py arguments in one string; prints each run's median lines.
prefill_ab_interleaved() {
  ab_base_tree ab-base.tar || return 1
  local args=($1) i tree
  for i in 1 2; do
    for tree in base new; do
      if [ $tree = base ]; then
        (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 140 python3 bench/prefill.py \
          "${args[@]}" --out /tmp/j >"$OUT/prefill_${tree}_$i.log" 2>&1)
      else
        timeout 140 python3 bench/prefill.py "${args[@]}" --out /tmp/j \
          >"$OUT/prefill_${tree}_$i.log" 2>&1
      fi
      echo "$tree $i rc=$?"; grep -E "^prefill [0-9]" "$OUT/prefill_${tree}_$i.log"
    done
  done
}
# A lone 1K prompt's host phases (prefill.py --host-phases: each layer's enqueue start) in this
# tree (rounds 136b / 137b).
lone_1k_host_phases() {
  timeout 100 python3 bench/prefill.py --prompt-lens 1024 --repeats 3 --no-eager --no-profile \
    --host-phases --out /tmp/j >"$OUT/prefill_phases.log" 2>&1
  echo "phases rc=$?"; grep -E "^prefill 1024" "$OUT/prefill_phases.log"
  sed -n '/^host phases/,/generate done/p' "$OUT/prefill_phases.log"
}
# The prefill expert GEMMs (bench/moe_gluon_prefill.py) with "$@" as its arguments, logged to
# $OUT/moe_$1.log: prints the rows and how many were bit-identical to their BM's first config
# (rounds 156-157).
moe_prefill_bench() {
  local name=$1; shift
  timeout 170 python3 bench/moe_gluon_prefill.py --skip-triton "$@" \
    >"$OUT/moe_$name.log" 2>&1
  echo "bench $name rc=$?"; grep -E "^\| [0-9]|False|Error|error" "$OUT/moe_$name.log" \
    | grep -v "all launches" | cut -d'|' -f2,3,4,5,6,7
  grep -c "bit-identical to this BM's first config: True" "$OUT/moe_$name.log"
}
# prefill_4k [KERNEL_REGEX]: the lone 4K prompt at the defaults (prefill.py, 3 repeats, its
# results JSON in $OUT), logged to $OUT/prefill_4k.log; prints the time, the families and the
# kernel-table rows matching KERNEL_REGEX (session 39's rounds).
prefill_4k() {
  timeout 200 python3 bench/prefill.py --prompt-lens 4096 --repeats 3 --no-eager --out "$OUT" \
    >"$OUT/prefill_4k.log" 2>&1
  echo "prefill 4K rc=$?"
  grep -E "^prefill 4096|GPU busy|^\| 4096|^\| (routed|dense|attention|indexer|rest)${1:+|$1}" \
    "$OUT/prefill_4k.log" | cut -c1-150 | head -20
}
# The slice topology holding the prefill bf16 twins on this card: on an H100 its `auto` leaves
# them out (too little room), so a copy sets `prefill_bf16_weights: on` and memory_fraction 0.97
# (rounds 231, 233); prints the topology's path.
twins_topology() {
  python3 - <<'PY'
import sys, torch
sys.path.insert(0, "bench")
import bench_common as bc
src = bc.slice_topology(torch.cuda.get_device_name())
if "H100" in torch.cuda.get_device_name():
    text = open(src).read()
    assert text.count("  memory_fraction: 0.9\n") == 1, src
    text = text.replace("  memory_fraction: 0.9\n",
                        "  memory_fraction: 0.97\n  prefill_bf16_weights: on\n")
    src = "/tmp/slice-twins.yaml"
    open(src, "w").write(text)
print(src)
PY
}
# prefill_tree TREE LOG ARGS...: bench/prefill.py ARGS in this tree (TREE new) or in the one
# ab_base_tree unpacked (TREE base), logged to $OUT/LOG (rounds 235-236).
prefill_tree() {
  local tree=$1 log=$2; shift 2
  if [ "$tree" = base ]; then
    (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 150 python3 bench/prefill.py "$@" \
      --out /tmp/j >"$OUT/$log" 2>&1)
  else
    timeout 150 python3 bench/prefill.py "$@" --out /tmp/j >"$OUT/$log" 2>&1
  fi
  echo "$tree rc=$?"
}
# A lone 4K prompt's kernel-override variants in one process (bench/prefill_ab.py: one load,
# the variants interleaved, 3 prefills each per round, the fixed prompt's bits compared):
# prefill_ab_4k ROUNDS "NAME=FLAGS" "NAME=FLAGS" ... (rounds 177-179; PREFILL_AB_TOPOLOGY: a
# topology other than the slice's), logged to
# $OUT/prefill_ab.log; prints each round's rows and the medians.
prefill_ab_4k() {
  local rounds=$1; shift
  local variants=()
  for v in "$@"; do variants+=(--variant "$v"); done
  local topo=()
  [ -n "${PREFILL_AB_TOPOLOGY:-}" ] && topo=(--topology "$PREFILL_AB_TOPOLOGY")
  timeout 200 python3 bench/prefill_ab.py --prompt-len 4096 --rounds "$rounds" --repeats 3 \
    "${topo[@]}" "${variants[@]}" --out "$OUT" >"$OUT/prefill_ab.log" 2>&1
  echo "prefill_ab rc=$?"; grep -E "^\| [a-z0-9]+ \| [0-9]|median|same|differ|tokens" \
    "$OUT/prefill_ab.log" | cut -c1-160 | tail -24
}
