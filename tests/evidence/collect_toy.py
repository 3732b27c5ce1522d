"""A toy contribution that follows fasttrack's contract, for the collect tests (CPU and GPU).

Its manifest declares two hardware kinds: the one under test (`cpu` on CI, the GPU on a GPU box) and an
NVIDIA B200, which is never present, so its points must be recorded as not collected. Environment
variables steer the toy's benchmark for the resume tests (TOY_LOG, TOY_CRASH_ONCE, TOY_NO_CASE_AT_MAX).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fasttrack.evidence.collect import CollectOptions

MANIFEST = """\
schema_version = 1

[contribution]
name = "toy"
model = "toy"
target_path = "vllm/models/toy"

[envelope]
hardware = [
  { name = "@HW_NAME@", compute_capability = "@HW_CC@" },
  { name = "NVIDIA B200", compute_capability = "10.0" },
]
tp = [1]
batch = { min = 1, max = 4 }
context = { min = 8, max = 16 }
dtypes = ["float32"]
cuda_graph = "none"

[fallback]
metric = "toy_fallback_total"
stock_path = "toy.bench:stock"
guard = "toy.bench:guard"

[evidence]
kernel_tests = ["tests/test_toy.py"]
point_tests = ["tests/test_toy.py::test_fused_matches_stock"]
sanitizer_tests = ["tests/test_toy.py"]
benchmark = "toy.bench:candidates"
evals = "toy.evals:run_evals"
lm_eval_results = ["lm_eval/results.json"]
"""

BENCH = '''\
import os
from pathlib import Path

import torch


def candidates(baseline, point):
    """The toy's one candidate, built on the engine baseline's state (baselines/selftest)."""
    log = os.environ.get("TOY_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{point['batch']}x{point['context']}\\n")
    crash = os.environ.get("TOY_CRASH_ONCE")
    if crash and point["batch"] == 2 and point["context"] == 16 and not Path(crash).exists():
        Path(crash).write_text("crashed")
        os._exit(3)  # a kernel that takes the process down
    if point["batch"] == 4 and os.environ.get("TOY_NO_CASE_AT_MAX"):
        return None
    s = baseline.state

    def fused(inputs):
        y = s.reduce(torch.mm(inputs["x"][:, s.lo:s.hi], s.weight))
        return (y + s.bias).clamp_min_(0)

    return {"fused": fused}
'''

EVALS = '''\
from fasttrack.evidence.selftest import MatmulReluCase


def run_evals(device):
    case = MatmulReluCase(device=device, m=4, k=16, n=8)
    worst = 0.0
    for seed in range(5):
        x = case.make_inputs(seed)
        worst = max(worst, float((case.fused(x) - case.stock(x)).abs().max()))
    return [{"name": "toy_max_abs_error", "value": worst, "threshold": 1e-4, "direction": "max",
             "detail": {"seeds": 5, "device": device}}]
'''

TESTS = '''\
import torch

from fasttrack.evidence.selftest import MatmulReluCase

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_fused_matches_stock(envelope_point, fasttrack_record):
    case = MatmulReluCase(device=DEVICE, m=envelope_point["batch"], k=envelope_point["context"], n=8)
    x = case.make_inputs(3)
    err = float((case.fused(x) - case.stock(x)).abs().max())
    fasttrack_record(max_error=err, tolerance=1e-4, rows=envelope_point["batch"])


def test_not_parametrized():
    assert MatmulReluCase().layers == 1
'''

LM_EVAL = {
    "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.91,
                          "exact_match_stderr,strict-match": 0.008, "note": "text is dropped",
                          "bad": float("nan")}},
    "config": {"model": "vllm", "model_args": "pretrained=toy"},
    "versions": {"gsm8k": 3}, "n-shot": {"gsm8k": 5}, "task_hashes": {"gsm8k": "ab" * 32},
}


def make_toy(root: Path, hw_name: str = "cpu", hw_cc: str = "0.0") -> Path:
    """Write the toy contribution under `root`; its first hardware kind is (hw_name, hw_cc)."""
    toy = root / "toy"
    (toy / "tests").mkdir(parents=True)
    (toy / "lm_eval").mkdir()
    manifest = MANIFEST.replace("@HW_NAME@", hw_name).replace("@HW_CC@", hw_cc)
    (toy / "fasttrack.toml").write_text(manifest, encoding="utf-8")
    (toy / "__init__.py").write_text("", encoding="utf-8")
    (toy / "bench.py").write_text(BENCH, encoding="utf-8")
    (toy / "evals.py").write_text(EVALS, encoding="utf-8")
    (toy / "tests" / "test_toy.py").write_text(TESTS, encoding="utf-8")
    (toy / "lm_eval" / "results.json").write_text(json.dumps(LM_EVAL), encoding="utf-8")
    return toy


REPO = Path(__file__).resolve().parents[2]
TOY_BASELINE = """
[baselines.toy]
root = "baselines/selftest"
case = "baselines.selftest.case:baseline_case"
"""


def toy_baseline_spec() -> dict[str, Any]:
    """The bench worker's `baseline` spec for the toy (what `fasttrack collect` passes it)."""
    return {"case": "baselines.selftest.case:baseline_case", "search_dir": str(REPO),
            "caps": {"float32": {"atol": 1e-4, "rtol": 1e-4, "record": 1e-4},
                     "bfloat16": {"atol": 0.1, "rtol": 0.05, "record": 0.03}}}


def toy_policy(tmp: Path, extra: str = "") -> Path:
    """The vLLM policy plus the engine-side baseline of the toy model (baselines/selftest)."""
    path = tmp / "policies" / "toy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (REPO / "policies" / "vllm.toml").read_text(encoding="utf-8")
    path.write_text(text + TOY_BASELINE + extra, encoding="utf-8")
    return path


def options(tmp: Path, toy: Path, **kw: Any) -> CollectOptions:
    """CollectOptions for a quick CPU collection of `toy` into tmp (keyword arguments override)."""
    base: dict[str, Any] = {"contribution": toy, "out": tmp / "evidence" / "toy", "work_dir": tmp / "work",
                            "iterations": 4, "warmup": 1, "flush_bytes": 1 << 20, "measure_bandwidth": False,
                            "command": "fasttrack collect (test)", "policy": toy_policy(tmp),
                            "engine_root": REPO}
    base.update(kw)
    return CollectOptions(**base)
