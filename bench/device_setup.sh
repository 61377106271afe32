# Sourced by the device-round scripts: strict mode, the compiled-kernel environment, $OUT (the
# folder the device machine sends back), and the package installed editable (no network there:
# no dependencies, no build isolation).
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { tail -20 "$OUT/install.log"; exit 1; }
