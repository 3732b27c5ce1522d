#!/bin/bash
# One device run: GPU tests on a few envelope points, then the measurement batch. Writes under $OUT.
# Usage (device tool, carry [".whl"]): bash kernels/kimi_k3/benchmarks/run_h200.sh [measure args...]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/smi.txt"
timeout ${PYTEST_TIMEOUT:-150} python3 -m pytest -q -p fasttrack.evidence.pytest_plugin -p no:cacheprovider \
  kernels/kimi_k3/tests/test_gpu_layer.py --fasttrack-grid kernels/kimi_k3/benchmarks/grid_smoke.json \
  --fasttrack-results "$OUT/gpu_tests.jsonl" -rs --durations=15 2>&1 | tail -60 | tee "$OUT/gpu_tests.txt"
timeout ${MEASURE_TIMEOUT:-230} python3 -m kimi_k3.benchmarks.measure --out "$OUT" "$@" 2>&1 | tee "$OUT/measure.log" | tail -80
