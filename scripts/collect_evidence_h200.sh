#!/usr/bin/env bash
# Collect the reference contribution's evidence on one H200 (the device machine of this workplace).
# Usage (from the repo root, on the GPU box): bash scripts/collect_evidence_h200.sh OUT_DIR [BUDGET_S]
# The box has torch + triton but no pydantic: wheels carried in .whl/ are installed to /tmp/site first.
# Each phase is bounded so that a slow phase cannot eat the whole lease; every phase resumes from the work
# dir, and the last step (`--assemble-only`) writes the bundle from what the phases recorded (nothing is
# made up: what a phase did not finish is missing from the bundle, and `fasttrack verify` says so).
set -uo pipefail
out=${1:?usage: collect_evidence_h200.sh OUT_DIR [BUDGET_S]}
budget=${2:-560}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
# COLLECT_ARGS: extra options, e.g. "--iterations 24 --sanitizer-timeout 60".
collect() { python3 -m fasttrack collect kernels/kimi_k3 --out "$out" --work-dir .cache/fasttrack/collect/kimi_k3 ${COLLECT_ARGS:-} "$@"; }
run_phase() {  # phase, max seconds
  local t; t=$(left); [ "$t" -gt "$2" ] && t=$2
  if [ "$t" -lt 20 ]; then echo "== skip phase $1: budget spent"; return; fi
  echo "== phase $1 (limit ${t}s)"; COLLECT_ARGS="${COLLECT_ARGS:-}" out="$out" timeout -k 15 --signal=INT "$t" bash -c "$(declare -f collect); collect --phases $1" || echo "== phase $1 ended with $?"
}
run_phase tests "${TESTS_S:-200}"
run_phase bench "${BENCH_S:-200}"
run_phase evals "${EVALS_S:-60}"
run_phase sanitizer "${SANITIZER_S:-90}"
echo "== assemble from the work dir (runs nothing; $(left)s left)"
collect --phases tests,bench,evals,sanitizer --assemble-only || echo "== assemble ended with $?"
ls -la "$out"
