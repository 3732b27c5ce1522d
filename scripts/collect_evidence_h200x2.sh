#!/usr/bin/env bash
# Collect the reference contribution's evidence on the 2 x H200 box (TP 1 on one GPU, TP 2 on both).
# Usage (from the repo root, on the GPU box): bash scripts/collect_evidence_h200x2.sh OUT_DIR [BUDGET_S]
#
# Step 1, before anything is collected: a short TP-2 timing of fused vs stock at the envelope's lower context
# edge (kimi_k3.benchmarks.tp_smoke, CUDA graphs, L2 flushed, max over ranks), which also compiles the TP
# kernels into Triton's on-disk cache for the phases after it. The manifest's rule for the lower edge
# (kernels/kimi_k3/fasttrack.toml): if fused is not >= 1.03x stock at EVERY smoke batch at context 16384 at
# TP 2, the envelope's context range becomes 32768..32768 (grid_contexts [32768]) before collection, so
# the evidence is collected for the envelope that is then committed; otherwise it stays 16384..32768. The
# collected samples, not this smoke, are what fasttrack verify judges (FT310 at every point).
# Step 2: scripts/collect_evidence_h200.sh (phase-bounded collect + --assemble-only). The final manifest is
# copied to OUT_DIR/fasttrack.toml: commit exactly that file with the bundle.
set -uo pipefail
out=${1:?usage: collect_evidence_h200x2.sh OUT_DIR [BUDGET_S]}
budget=${2:-560}
start=$(date +%s)
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
mkdir -p "$out"
timeout -k 10 "${SMOKE_S:-110}" torchrun --standalone --nproc-per-node 2 -m kimi_k3.benchmarks.tp_smoke \
  --out "$out/smoke" --fused --points ${SMOKE_POINTS:-8:16384 32:16384 64:16384} --compile-points --ref-points \
  --iters 10 > "$out/smoke.log" 2>&1
echo "== smoke rc=$?"; grep -E "^\[r0" "$out/smoke.log" | cut -c1-300
python3 - "$out/smoke/tp_smoke.json" kernels/kimi_k3/fasttrack.toml <<'PY'
import json, sys
smoke, manifest = sys.argv[1], sys.argv[2]
try:
    doc = json.load(open(smoke))
    rows = [t for t in doc.get("timing", []) if t.get("context") == 16384]
    ratios = {t["batch"]: t["stock"]["median_us"] / t["fused"]["median_us"] for t in rows}
except Exception as exc:  # no smoke numbers: keep the manifest as committed, say so
    print(f"== context rule: no smoke timing ({exc!r}); manifest unchanged")
    sys.exit(0)
print("== context rule: TP-2 fused/stock at 16384:", {b: round(r, 3) for b, r in ratios.items()})
if not ratios:  # the smoke timed nothing (e.g. it ran out of time compiling): no data, no change
    print("== context rule: no TP-2 timing at 16384; manifest unchanged")
    sys.exit(0)
if min(ratios.values()) >= 1.03:
    print("== context rule: keep 16384..32768")
    sys.exit(0)
text = open(manifest).read()
old_c, old_g = "context = { min = 16384, max = 32768 }", "grid_contexts = [16384, 32768]"
assert old_c in text and old_g in text, "manifest lines the rule edits not found"
open(manifest, "w").write(text.replace(old_c, "context = { min = 32768, max = 32768 }").replace(old_g, "grid_contexts = [32768]"))
print("== context rule: envelope context set to 32768..32768")
PY
cp kernels/kimi_k3/fasttrack.toml "$out/fasttrack.toml"
left=$(( budget - ($(date +%s) - start) ))
echo "== collect with ${left}s left"
bash scripts/collect_evidence_h200.sh "$out/bundle" "$left"
