# Shared by scripts/collect_evidence_h200.sh and scripts/collect_evidence_h200x2.sh (sourced, not run).
# Before sourcing: `out` (the output dir) and `budget` (seconds for the whole run). After sourcing, the
# caller defines `collect` (its `fasttrack collect ...` command line, extra arguments appended) and calls
# `run_all PHASE=SECONDS ...` (one collect run, each phase bounded inside it).
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
# One collect run over the named phases, each bounded inside the run (`--phase-limit PHASE=SECONDS`: the
# collector interrupts a phase at its limit and keeps what it finished). Evidence must come from one run:
# results resumed from an earlier run's work dir are FT349, so the run starts fresh. The whole run is also
# bounded by what is left of the budget.
run_all() {  # PHASE=SECONDS ...
  local args="" phases="" p
  for p in "$@"; do args="$args --phase-limit $p"; phases="$phases${phases:+,}${p%%=*}"; done
  local t; t=$(left)
  echo "== collect $phases in one run (limit ${t}s; phase limits: $*)"
  COLLECT_ARGS="${COLLECT_ARGS:-}" out="$out" timeout -k 30 --signal=INT "$t" \
    bash -c "$(declare -f collect); collect --fresh --phases $phases $args" || echo "== collect ended with $?"
}
