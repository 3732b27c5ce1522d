#!/usr/bin/env bash
# Collect the reference contribution's evidence on one H200 (the device machine of this workplace).
# Usage (from the repo root, on the GPU box): bash scripts/collect_evidence_h200.sh OUT_DIR [BUDGET_S]
# One collect run (evidence must come from one run: FT349); each phase is bounded inside it so that a slow
# phase cannot eat the whole lease (nothing is made up: what a phase did not finish is missing from the
# bundle, and `fasttrack verify` says so).
set -uo pipefail
out=${1:?usage: collect_evidence_h200.sh OUT_DIR [BUDGET_S]}
budget=${2:-560}
source "$(dirname "$0")/_collect_lib.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
# COLLECT_ARGS: extra options, e.g. "--iterations 24 --sanitizer-timeout 60".
collect() { python3 -m fasttrack collect kernels/kimi_k3 --out "$out" --work-dir .cache/fasttrack/collect/kimi_k3 ${COLLECT_ARGS:-} "$@"; }
run_all tests="${TESTS_S:-200}" bench="${BENCH_S:-200}" evals="${EVALS_S:-60}" sanitizer="${SANITIZER_S:-90}"
ls -la "$out"
