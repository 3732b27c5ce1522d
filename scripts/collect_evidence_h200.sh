#!/usr/bin/env bash
# Collect the reference contribution's evidence on one H200 (the device machine of this workplace).
# Usage (from the repo root, on the GPU box): bash scripts/collect_evidence_h200.sh OUT_DIR [BUDGET_S]
# Each phase is bounded so that a slow phase cannot eat the whole lease; every phase resumes from the work
# dir, and the last step (`--assemble-only`) writes the bundle from what the phases recorded (nothing is
# made up: what a phase did not finish is missing from the bundle, and `fasttrack verify` says so).
set -uo pipefail
out=${1:?usage: collect_evidence_h200.sh OUT_DIR [BUDGET_S]}
budget=${2:-560}
source "$(dirname "$0")/_collect_lib.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
# COLLECT_ARGS: extra options, e.g. "--iterations 24 --sanitizer-timeout 60".
collect() { python3 -m fasttrack collect kernels/kimi_k3 --out "$out" --work-dir .cache/fasttrack/collect/kimi_k3 ${COLLECT_ARGS:-} "$@"; }
run_phase tests "${TESTS_S:-200}"
run_phase bench "${BENCH_S:-200}"
run_phase evals "${EVALS_S:-60}"
run_phase sanitizer "${SANITIZER_S:-90}"
echo "== assemble from the work dir (runs nothing; $(left)s left)"
collect --phases tests,bench,evals,sanitizer --assemble-only || echo "== assemble ended with $?"
ls -la "$out"
