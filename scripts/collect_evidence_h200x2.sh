#!/usr/bin/env bash
# Collect the TP-2 part of the reference contribution's evidence on the 2 x H200 box (one process per GPU).
# Usage (from the repo root, on the GPU box): bash scripts/collect_evidence_h200x2.sh OUT_DIR [BUDGET_S]
#
# Evidence in parts (docs/evidence-collection.md, "Collecting in parts"): part 1 is everything at TP 1 on one
# H200 (scripts/collect_evidence_h200.sh, which collects a full bundle when the envelope is TP [1], or pass
# COLLECT_ARGS="--tp 1"); part 2, this script, is the kernel tests and benchmarks of the TP-2 points
# (`--tp 2 --phases tests,bench`), written as OUT_DIR/statement.tp2.json + logs. Both parts must be
# collected under the same committed fasttrack.toml (FT321) and the same code (FT302); sign each with
# `fasttrack sign OUT_DIR/statement.tp2.json ...` and put both in evidence/kimi_k3/.
#
# Optional SMOKE=1 first runs kimi_k3.benchmarks.tp_smoke (development numbers only: symmetric-memory
# check, fused vs stock TP-2 timing at SMOKE_POINTS); it never edits the manifest.
set -uo pipefail
out=${1:?usage: collect_evidence_h200x2.sh OUT_DIR [BUDGET_S]}
budget=${2:-560}
source "$(dirname "$0")/_collect_lib.sh"
nvidia-smi topo -m || true
if [ "${SMOKE:-0}" = "1" ]; then
  timeout -k 10 "${SMOKE_S:-120}" torchrun --standalone --nproc-per-node 2 -m kimi_k3.benchmarks.tp_smoke \
    --out "$out/smoke" --fused --points ${SMOKE_POINTS:-1:32768 64:32768} --compile-points --ref-points \
    --iters 10 > "$out/smoke.log" 2>&1
  echo "== smoke rc=$?"; grep -E "^\[r0" "$out/smoke.log" | cut -c1-300
fi
collect() {
  python3 -m fasttrack collect kernels/kimi_k3 --tp 2 --out "$out" --bundle-name statement.tp2 \
    --work-dir .cache/fasttrack/collect/kimi_k3.tp2 ${COLLECT_ARGS:-} "$@"
}
run_all tests="${TESTS_S:-220}" bench="${BENCH_S:-280}"
ls -la "$out"
