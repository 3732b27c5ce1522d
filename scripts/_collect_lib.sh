# Shared by scripts/collect_evidence_h200.sh and scripts/collect_evidence_h200x2.sh (sourced, not run).
# Before sourcing: `out` (the output dir) and `budget` (seconds for the whole run). After sourcing, the
# caller defines `collect` (its `fasttrack collect ...` command line, extra arguments appended) and calls
# `run_phase PHASE MAX_SECONDS` per phase, then `collect ... --assemble-only`.
# The box has torch + triton but no pydantic: wheels carried in .whl/ are installed to /tmp/site first.
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD:$PWD/kernels${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
mkdir -p "$out"
# One phase under a time limit (the smaller of MAX_SECONDS and what is left of the budget), interrupted with
# SIGINT so the collector records what it finished; every phase resumes from the work dir.
run_phase() {  # phase, max seconds
  local t; t=$(left); [ "$t" -gt "$2" ] && t=$2
  if [ "$t" -lt 20 ]; then echo "== skip phase $1: budget spent"; return; fi
  echo "== phase $1 (limit ${t}s)"
  COLLECT_ARGS="${COLLECT_ARGS:-}" out="$out" timeout -k 15 --signal=INT "$t" \
    bash -c "$(declare -f collect); collect --phases $1" || echo "== phase $1 ended with $?"
}
