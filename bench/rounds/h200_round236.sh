#!/usr/bin/env bash
# Device round 236 (session 47) (≈ 5 min): round 235 with the expert GEMM's register layout
# (group_layout) and the shared expert's stacked pair built once too, against ab-base.tar
# (771b582). GPU checks (linear_ss, the producer-warp expert GEMM, the shared expert, the tiny
# model against the reference); the lone 4K prompt (twins held), 7 repeats with host phases,
# base / new once each; 64 prompts of 128 tokens, base / new once. Carry ab-base.tar. Pass the
# commit hash literally.
source "$(dirname "$0")/../device_setup.sh"
ab_base_tree ab-base.tar || exit 1
TOPO=$(twins_topology)
echo "topology $TOPO"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_linear_ss_gpu.py \
  tests/gpu/test_moe_gluon_gpu.py tests/gpu/test_shared_expert_gpu.py tests/gpu/test_model_gpu.py \
  -k "linear_ss or row_stores or shared or model" >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; tail -2 "$OUT/gpu.log" | cut -c1-200
LONE=(--topology "$TOPO" --prompt-lens 4096 --repeats 7 --no-eager --no-profile --host-phases)
SHORT=(--topology "$TOPO" --prompt-lens 128 --batch-prompts 64 --repeats 3 --no-eager
       --no-profile)
run_tree() {  # run_tree TREE LOG ARGS...
  local tree=$1 log=$2; shift 2
  if [ "$tree" = base ]; then
    (cd "$AB_SRC" && PYTHONPATH=$AB_PYTHONPATH timeout 150 python3 bench/prefill.py "$@" \
      --out /tmp/j >"$OUT/$log" 2>&1)
  else
    timeout 150 python3 bench/prefill.py "$@" --out /tmp/j >"$OUT/$log" 2>&1
  fi
  echo "$tree rc=$?"
}
for i in 1; do
  for tree in base new; do
    run_tree $tree "lone_${tree}_$i.log" "${LONE[@]}"
    grep -E "^prefill 4096|inputs built|layer [12] enqueue|backbone enqueued|result collected" \
      "$OUT/lone_${tree}_$i.log" | tr -s ' ' | paste -sd' ' | cut -c1-220
  done
done
for tree in base new; do
  run_tree $tree "short_${tree}.log" "${SHORT[@]}"
  grep -E "^prefill 64 x" "$OUT/short_${tree}.log"
done
rm -f "$OUT/install.log"
