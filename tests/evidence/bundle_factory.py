"""Build evidence bundles programmatically for the verification tests (CPU only).

`BundleFixture` lays out a head tree in a tmp dir:

    head/kernels/demo/        a tiny contribution (fasttrack.toml, kernel.py, tests/test_kernel.py)
    head/evidence/demo/       statement.json, statement.json.sig, pytest.log
    head/policies/            allowed_signers (the throwaway key's line)

`data` is the statement as a plain dict: tests mutate it, then `write()` (and `sign()`), then build a
Context with `context()` and run rules with `run_rule()`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fasttrack.context import Context
from fasttrack.evidence.bundle import PREDICATE_TYPE, STATEMENT_TYPE
from fasttrack.evidence.digest import contribution_digest
from fasttrack.evidence.loader import load_evidence
from fasttrack.evidence.signing import sign_file
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import load_manifest
from fasttrack.policy import Policy
from fasttrack.rules import evidence as evidence_rules
from fasttrack.rules import yardstick as yardstick_rules

GPU = "NVIDIA H200"
HAVE_SSH_KEYGEN = shutil.which("ssh-keygen") is not None

MANIFEST = """\
schema_version = 1

[contribution]
name = "demo"
model = "demo"
target_path = "vllm/models/demo/nvidia/fast"

[envelope]
hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }]
tp = [1]
batch = { min = 1, max = 4 }
context = { min = 1, max = 128 }
dtypes = ["bfloat16"]
cuda_graph = "full"
grid_batches = [1, 2, 4]
grid_contexts = [1, 128]

[fallback]
metric = "demo_fallback_total"
stock_path = "demo.stock:forward"
guard = "demo.guard:decide"

[evidence]
kernel_tests = ["tests/test_kernel.py"]
point_tests = ["tests/test_kernel.py::test_matches"]
sanitizer_tests = ["tests/test_kernel.py::test_matches"]
benchmark = "demo.bench:case"
evals = "demo.evals:run"

[[claims]]
name = "fused-vs-stock-b1"
min_speedup = 1.5
gpu = "NVIDIA H200"
batch = 1
context = 128

[[claims]]
name = "fused-vs-compile-b1"
baseline = "compile"
min_speedup = 1.3
gpu = "NVIDIA H200"
batch = 1
context = 128
"""
# A claim at a TP-2 point of MANIFEST with tp = [1, 2] (the evidence-in-parts and tensor-parallel tests).
TP2_CLAIM = '''
[[claims]]
name = "fused-vs-stock-tp2-b1"
min_speedup = 1.5
gpu = "NVIDIA H200"
gpus = 2
tp = 2
batch = 1
context = 128
'''


POLICY: dict[str, Any] = {
    "schema_version": 1,
    "engine": "vllm",
    "engine_version": "0.33.0",
    "models": {"local_roots": ["vllm/models/{model}/**"], "package": "vllm.models.{model}",
               "packages_dir": "vllm/models"},
    "zones": [],
    "envelope": {"max_hardware_kinds": 4, "known_hardware": {GPU: "9.0", "NVIDIA B200": "10.0"},
                 "tp_sizes": [1, 2, 4, 8], "nvlink_domain": 8, "max_batch": 256, "max_context": 1 << 20,
                 "dtypes": ["bfloat16"], "cuda_graph_modes": ["full", "none"]},
    "evidence": {"allowed_signers": "policies/allowed_signers", "min_samples": 20,
                 "bootstrap_resamples": 400, "confidence": 0.95, "max_plausible_speedup": 10.0,
                 "peak_bandwidth": {GPU: 4.8e12}, "sanitizer_not_run": "warning", "max_age_days": 90,
                 "tolerance_caps": {"bfloat16": {"atol": 0.1, "rtol": 0.05, "record": 0.03}},
                 "eval_bounds": {"logit_max_abs_diff": {"max": 0.1},
                                 "greedy_token_agreement": {"min": 0.95}}},
    # The engine side's baseline for the demo model (head/baselines/demo, written by the fixture).
    "baselines": {"demo": {
        "root": "baselines/demo", "case": "baselines.demo.case:baseline_case",
        "stages": [{"stage": "mla_decode", "compute_capability": "9.0",
                    "accepted": [{"name": "FLASHINFER_MLA",
                                  "kernel_patterns": ["*BatchMLAPageAttention*"]}],
                    "rejected": [{"name": "TRITON_MLA", "kernel_patterns": ["*_decode_stage1_kernel*"]}]}],
    }},
}
BASELINE_CASE = "def baseline_case(point):\n    return None  # the demo engine's stock (not imported here)\n"
# Profiled kernel names (one replay): stock runs FlashInfer's FA3 MLA, the engine's sm90 choice.
STOCK_KERNELS = {"flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<128>": 20.0,
                 "cutlass_80_wmma_tensorop_bf16_s161616gemm": 55.0, "rms_norm_kernel": 5.0,
                 "fused_moe_kernel": 18.0}
FUSED_KERNELS = {"flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<128>": 20.0,
                 "demo_fused_gemv": 28.0}

GRID_BATCHES = (1, 2, 4)
GRID_CONTEXTS = (1, 128)
TEST_FUNCTIONS = ("tests/test_kernel.py::test_matches", "tests/test_kernel.py::test_edges")


def samples(center: float, n: int = 30, spread: float = 0.02) -> list[float]:
    """Deterministic, slightly spread timing samples around `center` microseconds."""
    return [round(center * (1 + spread * (((i * 7919) % 13) - 6) / 6), 4) for i in range(n)]


def point(batch: int, context: int, gpu: str = GPU, tp: int = 1) -> dict[str, Any]:
    return {"gpu": gpu, "tp": tp, "batch": batch, "context": context, "dtype": "bfloat16"}


def protocol() -> dict[str, Any]:
    return {"graph_replay": True, "l2_flush_bytes": 256 << 20, "persisting_l2_reset": True,
            "fresh_inputs": True, "orders": [["stock", "fused", "compile"], ["compile", "fused", "stock"]],
            "iterations": 30, "warmup": 5, "streams_synchronized": True, "timer": "cuda-event"}


def benchmark(batch: int, context: int = 128, stock: float = 100.0, fused: float = 50.0,
              compile_: float = 80.0) -> dict[str, Any]:
    acc = {"max_abs_error": 1e-3, "max_rel_error": 1e-2, "atol": 2e-2, "rtol": 2e-2, "ok": True,
           "checked": 30}
    oracle = {"max_abs_error": 2e-3, "atol": 0.1, "rtol": 0.05, "ok": True}
    return {
        "point": point(batch, context),
        "protocol": protocol(),
        "variants": {
            "stock": {"samples_us": samples(stock), "kernels_per_step": 12, "bytes_moved": 2.0e8, "gpus": 1,
                      "origin": "engine", "kernel_times_us": dict(STOCK_KERNELS)},
            "fused": {"samples_us": samples(fused), "kernels_per_step": 3, "bytes_moved": 2.0e8, "gpus": 1,
                      "origin": "contribution", "kernel_times_us": dict(FUSED_KERNELS)},
            "compile": {"samples_us": samples(compile_), "kernels_per_step": 6, "bytes_moved": 2.0e8,
                        "gpus": 1, "origin": "engine"},
        },
        "accuracy": {"fused": dict(acc), "compile": dict(acc)},
        "oracle": {"stock": dict(oracle), "fused": dict(oracle), "compile": dict(oracle)},
        "backends": {"mla_decode": "FLASHINFER_MLA"},
        "layers": 1,
        # stock timed alone by the engine's own pass (`variants`) and beside the candidates (FT347)
        "separation": "engine-process",
        "stock_beside": {"samples_us": samples(stock * 1.01), "gpus": 1, "origin": "engine"},
    }


def kernel_tests() -> list[dict[str, Any]]:
    out = []
    for b in GRID_BATCHES:
        for c in GRID_CONTEXTS:
            for fn in TEST_FUNCTIONS:
                out.append({"nodeid": f"{fn}[{GPU}-tp1-b{b}-c{c}-bfloat16]", "point": point(b, c),
                            "outcome": "passed", "max_error": 1e-3, "tolerance": 2e-2, "duration_s": 0.5})
    return out


class BundleFixture:
    def __init__(self, root: Path, key: Path) -> None:
        self.root = root
        self.head = root / "head"
        self.contrib = self.head / "kernels" / "demo"
        self.bundle = self.head / "evidence" / "demo"
        self.policies = self.head / "policies"
        self.baseline = self.head / "baselines" / "demo"
        self.key = key
        self.policy_data: dict[str, Any] = copy.deepcopy(POLICY)
        self._write_contribution()
        self.policies.mkdir(parents=True, exist_ok=True)
        self.allow_key(key, "alice@example.com")
        self.data = self.good_statement()

    # ------------------------------------------------------------------ the tree
    def _write_contribution(self) -> None:
        (self.contrib / "tests").mkdir(parents=True, exist_ok=True)
        (self.contrib / "fasttrack.toml").write_text(MANIFEST)
        (self.contrib / "kernel.py").write_text("def fused(x):\n    return x * 2\n")
        (self.contrib / "tests" / "test_kernel.py").write_text("def test_matches():\n    assert True\n")
        self.baseline.mkdir(parents=True, exist_ok=True)
        (self.baseline / "case.py").write_text(BASELINE_CASE)

    def set_manifest(self, text: str) -> None:
        (self.contrib / "fasttrack.toml").write_text(text)

    def allow_key(self, key: Path, principal: str, namespace: str = "fasttrack-evidence",
                  extra: str = "") -> None:
        pub = key.with_name(key.name + ".pub").read_text().split()
        line = f'{principal} namespaces="{namespace}"{extra} {pub[0]} {pub[1]}\n'
        (self.policies / "allowed_signers").write_text(line)

    # ------------------------------------------------------------------ the statement
    def good_statement(self) -> dict[str, Any]:
        dig = contribution_digest(self.contrib)
        base = contribution_digest(self.baseline)
        log = b"===== 12 passed in 3.2s =====\n"
        self.bundle.mkdir(parents=True, exist_ok=True)
        (self.bundle / "pytest.log").write_bytes(log)
        return {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "demo", "digest": {"sha256": dig.sha256}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "contribution": "demo",
                "model": "demo",
                "manifest_sha256": hashlib.sha256((self.contrib / "fasttrack.toml").read_bytes()).hexdigest(),
                "files": dig.files,
                "collected_at": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
                "collector": {"fasttrack_version": "0.1.0", "command": "fasttrack collect kernels/demo",
                              "hostname": "gpu-box",
                              "custody": {"environment": "this-run", "tests": "this-run", "bench": "this-run",
                                          "evals": "this-run", "sanitizer": "this-run"}},
                "environment": {
                    "gpu_name": GPU, "gpu_count": 1, "compute_capability": "9.0", "driver": "570.86",
                    "cuda": "12.8", "torch": "2.13.0", "triton": "3.6.0", "python": "3.11.9",
                    "clocks": {"sm_mhz": 1980, "mem_mhz": 3201}, "interconnect": None,
                    "l2_bytes": 60 << 20, "copy_bandwidth_bytes_per_s": 4.0e12,
                },
                "kernel_tests": kernel_tests(),
                "benchmarks": [benchmark(1), benchmark(2), benchmark(4)],
                "evals": [{"name": "logit_max_abs_diff", "value": 0.01, "threshold": 0.05,
                           "direction": "max"},
                          {"name": "greedy_token_agreement", "value": 0.999, "threshold": 0.99,
                           "direction": "min"}],
                "lm_eval": [],
                "sanitizer": [{"tool": t, "ran": True, "errors": 0, "summary": "ERROR SUMMARY: 0 errors",
                               "tests": ["tests/test_kernel.py::test_matches"]}
                              for t in ("memcheck", "racecheck", "synccheck")],
                "logs": {"pytest.log": hashlib.sha256(log).hexdigest()},
                "baseline": {"model": "demo", "root": "baselines/demo",
                             "case": "baselines.demo.case:baseline_case", "digest": base.sha256,
                             "files": base.files},
            },
        }

    @property
    def pred(self) -> dict[str, Any]:
        p: dict[str, Any] = self.data["predicate"]
        return p

    def write(self, raw: bytes | None = None) -> Path:
        self.bundle.mkdir(parents=True, exist_ok=True)
        path = self.bundle / "statement.json"
        path.write_bytes(raw if raw is not None else
                         (json.dumps(self.data, indent=2, sort_keys=True) + "\n").encode())
        return path

    def sign(self, key: Path | None = None, namespace: str = "fasttrack-evidence") -> Path:
        return sign_file(self.bundle / "statement.json", key or self.key, namespace)

    def write_and_sign(self) -> None:
        self.write()
        if HAVE_SSH_KEYGEN:
            self.sign()

    # ------------------------------------------------------------------ rules
    def policy(self) -> Policy:
        return Policy.model_validate(self.policy_data)

    def context(self, *, with_manifest: bool = True, evidence: bool = True) -> Context:
        manifest = load_manifest(self.contrib) if with_manifest else None
        return Context(
            policy=self.policy(),
            policy_path=self.policies / "vllm.toml",
            mode="contribution",
            head_dir=self.head,
            changes=(),
            model="demo",
            manifest=manifest,
            manifest_path="kernels/demo/fasttrack.toml" if with_manifest else None,
            contribution_dir="kernels/demo" if with_manifest else None,
            evidence=load_evidence(self.bundle) if evidence else None,
            evidence_dir=self.bundle,
        )


def make_key(directory: Path, name: str = "id_ed25519") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    return key


@functools.lru_cache(maxsize=4)
def session_key(name: str = "id_ed25519") -> Path:
    """A throwaway ed25519 key, made once per test process."""
    return make_key(Path(tempfile.mkdtemp(prefix="fasttrack-test-key-")), name)


def new_fixture(tmp_path: Path, *, signed: bool = True) -> BundleFixture:
    fx = BundleFixture(tmp_path, session_key())
    if signed:
        fx.write_and_sign()
    else:
        fx.write()
    return fx



def run_rule(code: str, ctx: Context) -> list[Finding]:
    """Run one evidence rule the way the pipeline does; a crash is a test failure, not a finding."""
    rules = [*evidence_rules.catalogue.rules, *yardstick_rules.catalogue.rules]
    matches = [r for r in rules if r.code == code]
    assert matches, f"no evidence rule {code}"
    found = matches[0].run(gather_facts(ctx))
    crashed = [f for f in found if "crashed" in f.message]
    assert not crashed, crashed
    return found


def run_all(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for r in [*evidence_rules.catalogue.rules, *yardstick_rules.catalogue.rules]:
        out.extend(run_rule(r.code, ctx))
    return out


def errors(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity is Severity.ERROR]


def codes(found: list[Finding], severity: Severity | None = None) -> set[str]:
    return {f.code for f in found if severity is None or f.severity is severity}


Mutator = Callable[[BundleFixture], None]


def edit(fn: Callable[[BundleFixture], object]) -> Callable[[BundleFixture], None]:
    """Mutate the statement data, then write and sign it again (a 'legitimately' signed bad bundle)."""
    def run(fx: BundleFixture) -> None:
        fn(fx)
        fx.write_and_sign()
    return run


def manifest(old: str, new: str) -> Callable[[BundleFixture], None]:
    """Replace `old` (which must be in MANIFEST) by `new` in the fixture's fasttrack.toml."""
    def run(fx: BundleFixture) -> None:
        assert old in MANIFEST
        fx.set_manifest(MANIFEST.replace(old, new))
    return run
