# Sourced by the device-round scripts: strict mode, the compiled-kernel environment, $OUT (the
# folder the device machine sends back), and the package installed editable (no network there:
# no dependencies, no build isolation).
#
# Triton's kernel cache: a fresh machine starts cold (every kernel compiles in the first decode
# warm-up). With SAVE_TRITON_CACHE=1 a round leaves its cache in $OUT as
# triton-cache.tar.xz.partNN (≤ 15 MiB each; $OUT sends back at most 8 files: mind the logs);
# put them in the repo root (.gitignore ignores them) and name them in the run's
# `carry`, and the next round starts from that cache (a warm start: what a restart costs).
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
save_triton_cache() {
  tar -cJf - -C "$TRITON_CACHE_DIR" . 2>/dev/null \
    | split -b 15M -d - "$OUT/triton-cache.tar.xz.part"
}
if [ "${SAVE_TRITON_CACHE:-0}" = 1 ]; then trap save_triton_cache EXIT; fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { tail -20 "$OUT/install.log"; exit 1; }
