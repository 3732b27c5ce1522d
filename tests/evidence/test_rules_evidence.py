"""Every FT3xx rule with a passing bundle and a failing one (bundles built in tmp, signed with a test key)."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bundle_factory import (
    GPU,
    HAVE_SSH_KEYGEN,
    MANIFEST,
    BundleFixture,
    edit,
    make_key,
    manifest,
    new_fixture,
    run_all,
    run_rule,
    samples,
)

from fasttrack.evidence.stats import median
from fasttrack.evidence.summary import summarize
from fasttrack.findings import Severity
from fasttrack.rules import all_rules
from fasttrack.rules import evidence as evidence_rules
from fasttrack.verdict import PointStatus

pytestmark = pytest.mark.skipif(not HAVE_SSH_KEYGEN, reason="needs ssh-keygen (openssh-client)")

CODES = sorted(r.code for r in evidence_rules.catalogue.rules)


@pytest.fixture
def fx(tmp_path: Path) -> BundleFixture:
    return new_fixture(tmp_path)


# ------------------------------------------------------------------------------------------ the good bundle

def test_catalogue_is_complete_and_documented() -> None:
    assert [f"FT{n}" for n in range(300, 323)] == CODES
    listed = {r.code for r in all_rules()}
    for r in evidence_rules.catalogue.rules:
        assert r.code in listed
        assert r.summary.endswith(".") and len(r.doc) > len(r.summary), r.code


def test_good_bundle_passes_every_rule(fx: BundleFixture) -> None:
    found = run_all(fx.context())
    assert found == [], [(f.code, f.message) for f in found]


@pytest.mark.parametrize("code", CODES)
def test_no_manifest_means_no_evidence_findings(tmp_path: Path, code: str) -> None:
    fx = new_fixture(tmp_path)
    fx.write(b"{broken")
    assert run_rule(code, fx.context(with_manifest=False)) == []
    assert summarize(fx.context(with_manifest=False)) is None


# ------------------------------------------------------------------------------------------ failing cases

@dataclass(frozen=True)
class Case:
    code: str
    mutate: Callable[[BundleFixture], None]
    expect: str  # a substring of one finding's message
    severity: Severity = Severity.ERROR




def policy(section: str, key: str, value: object) -> Callable[[BundleFixture], None]:
    def run(fx: BundleFixture) -> None:
        fx.policy_data[section][key] = value
    return run


def bench(fx: BundleFixture, batch: int) -> dict[str, object]:
    for b in fx.pred["benchmarks"]:
        if b["point"]["batch"] == batch:
            return b  # type: ignore[no-any-return]
    raise AssertionError(batch)


def variant(fx: BundleFixture, batch: int, name: str) -> dict[str, object]:
    return bench(fx, batch)["variants"][name]  # type: ignore[index,no-any-return]


def other_key_signs(fx: BundleFixture) -> None:
    fx.sign(make_key(fx.root / "other", "mallory"))


def remove_point(fx: BundleFixture) -> None:
    fx.pred["kernel_tests"] = [t for t in fx.pred["kernel_tests"]
                               if not (t["point"]["batch"] == 4 and t["point"]["context"] == 1)]


def skip_point(fx: BundleFixture) -> None:
    for t in fx.pred["kernel_tests"]:
        if t["point"]["batch"] == 2 and t["point"]["context"] == 128:
            t["outcome"] = "skipped"


def drop_function_at_point(fx: BundleFixture) -> None:
    fx.pred["kernel_tests"] = [t for t in fx.pred["kernel_tests"] if not (
        t["point"]["batch"] == 1 and t["point"]["context"] == 1 and "test_edges" in t["nodeid"])]


def add_file(fx: BundleFixture) -> None:
    (fx.contrib / "new_kernel.py").write_text("x = 1\n")


def set_path(path: str, value: object) -> Callable[[BundleFixture], None]:
    """Set a dotted path (`predicate.kernel_tests.0.outcome`) in the statement data."""
    def run(fx: BundleFixture) -> None:
        node: object = fx.data
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]  # type: ignore[index]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value  # type: ignore[index]
    return run


def both(*fns: Callable[[BundleFixture], None]) -> Callable[[BundleFixture], None]:
    def run(fx: BundleFixture) -> None:
        for fn in fns:
            fn(fx)
    return run


def days_ago(n: int) -> str:
    return (datetime.now(UTC) - timedelta(days=n)).replace(microsecond=0).isoformat()


def second_part(fx: BundleFixture, **environment: object) -> None:
    """A second statement part (statement.tp2.json) with no records, collected on another environment."""
    data = copy.deepcopy(fx.data)
    data["predicate"].update(kernel_tests=[], benchmarks=[], evals=[], sanitizer=[])
    data["predicate"]["environment"].update(environment)
    (fx.bundle / "statement.tp2.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


CASES = [
    # FT300 no bundle
    Case("FT300", lambda fx: shutil.rmtree(fx.bundle), "no evidence directory"),
    Case("FT300", lambda fx: (fx.bundle / "statement.json").unlink(), "no statement.json"),
    # FT301 schema
    Case("FT301", lambda fx: fx.write(b'{"_type": "https://in-toto.io/Statement/v1", "subj'),
         "not valid JSON"),
    Case("FT301", edit(set_path("predicate.kernel_tests.0.outcome", 3)), "kernel_tests[0].outcome"),
    Case("FT301", edit(set_path("predicate.bogus", 1)), "predicate.bogus: unknown field"),
    Case("FT301", edit(lambda fx: fx.data.pop("predicate")), "predicate: missing"),
    Case("FT301", edit(lambda fx: fx.pred.pop("environment")), "predicate.environment: missing"),
    Case("FT301", lambda fx: fx.write(fx.data and (fx.bundle / "statement.json").read_bytes().replace(
        b'"max_error": 0.001', b'"max_error": NaN', 1)), "NaN is not a JSON number"),
    Case("FT301", lambda fx: fx.write((fx.bundle / "statement.json").read_bytes().replace(
        b'"max_error": 0.001', b'"max_error": 1e999', 1)), "finite number"),
    Case("FT301", lambda fx: fx.write((fx.bundle / "statement.json").read_bytes().replace(
        b'"gpu_count": 1', b'"gpu_count": ' + b"9" * 5000, 1)), "not valid JSON"),
    Case("FT301", edit(set_path("predicate.environment.gpu_count", 10**30)), "environment.gpu_count"),
    Case("FT301", edit(set_path("predicateType", "https://slsa.dev/provenance/v1")), "predicateType"),
    Case("FT301", edit(set_path("predicate.collected_at", "2026-11-30T12:00:00")), "timezone"),
    Case("FT301", edit(set_path("predicate.benchmarks.0.variants.stock.samples_us", [1.0, -2.0])),
         "samples must be positive"),
    Case("FT301", edit(set_path("predicate.benchmarks.0.variants.stock.note", "x")), "only samples_*"),
    Case("FT301", lambda fx: fx.write(b"[1, 2, 3]"), "must hold a JSON object"),
    Case("FT301", lambda fx: fx.write(b"\xff\xfe{}"), "not UTF-8"),
    Case("FT301", lambda fx: fx.write(b"[" * 200 + b"]" * 200), "nests 200 levels"),
    # FT321 identity
    Case("FT321", edit(set_path("predicate.contribution", "other")), "predicate.contribution is 'other'"),
    Case("FT321", edit(set_path("predicate.manifest_sha256", "0" * 64)), "different fasttrack.toml"),
    # FT302 stale
    Case("FT302", lambda fx: (fx.contrib / "kernel.py").write_text("def fused(x):\n    return x * 3\n"),
         "changed: kernel.py"),
    Case("FT302", add_file, "added: new_kernel.py"),
    Case("FT302", lambda fx: (fx.contrib / "tests" / "test_kernel.py").unlink(),
         "removed: tests/test_kernel.py"),
    Case("FT302", edit(lambda fx: fx.pred["files"].update({"kernel.py": "1" * 64})),
         "does not hash to its subject"),
    Case("FT302", edit(lambda fx: fx.data.pop("subject")), "no subject digest"),
    # FT303 signature
    Case("FT303", lambda fx: (fx.bundle / "statement.json.sig").unlink(), "statement.json.sig is missing"),
    Case("FT303", other_key_signs, "is not in allowed_signers"),
    Case("FT303", lambda fx: fx.sign(namespace="git"), "namespace 'git'"),
    Case("FT303", lambda fx: fx.write(json.dumps(fx.data).encode()), "does not verify"),  # re-serialised
    Case("FT303", lambda fx: (fx.policies / "allowed_signers").unlink(), "cannot be read"),
    # FT320 logs
    Case("FT320", lambda fx: (fx.bundle / "pytest.log").write_text("12 passed (edited)\n"), "does not match"),
    Case("FT320", lambda fx: (fx.bundle / "pytest.log").unlink(), "missing from the bundle"),
    Case("FT320", lambda fx: (fx.bundle / "notes.txt").write_text("hi\n"), "not bound", Severity.WARNING),
    Case("FT320", edit(lambda fx: fx.pred.update(logs={})), "binds no raw logs", Severity.WARNING),
    # FT304 coverage
    Case("FT304", edit(remove_point), "batch=4 context=1 bfloat16: no kernel test ran"),
    Case("FT304", edit(skip_point), "batch=2 context=128 bfloat16: kernel tests were only skipped"),
    Case("FT304", edit(drop_function_at_point),
         "not every test function passed: tests/test_kernel.py::test_edges"),
    Case("FT304", edit(lambda fx: fx.pred.update(kernel_tests=[])),
         "none of the 6 envelope points on NVIDIA H200 has a passing kernel test"),
    # FT305 batch 1 and 2
    Case("FT305", edit(lambda fx: fx.pred["benchmarks"].remove(bench(fx, 2))),
         "no accepted timed benchmark at batch 2"),
    Case("FT305", edit(lambda fx: bench(fx, 1).update(not_run="no GPU")),
         "no accepted timed benchmark at batch 1"),
    Case("FT305", manifest('benchmark = "demo.bench:case"\n', ""), "declares no benchmark"),
    # FT306 hardware
    Case("FT306", manifest('hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }]',
                           'hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }, '
                           '{ name = "NVIDIA B200", compute_capability = "10.0" }]'),
         "declares NVIDIA B200 (sm 10.0) but the bundle was collected on NVIDIA H200"),
    Case("FT306", edit(set_path("predicate.environment.compute_capability", "8.0")),
         "compute capability 8.0"),
    Case("FT306", edit(lambda fx: [t.update(outcome="failed") for t in fx.pred["kernel_tests"]]),
         "no kernel test passed on it"),
    # FT307 failures
    Case("FT307", edit(both(set_path("predicate.kernel_tests.3.outcome", "failed"),
                            set_path("predicate.kernel_tests.3.message", "AssertionError: mismatch\nmore"))),
         "failed at NVIDIA H200 tp=1 batch=1 context=128 bfloat16 (max error 0.001, tolerance 0.02): "
         "AssertionError: mismatch"),
    Case("FT307", edit(set_path("predicate.kernel_tests.0.outcome", "error")), " error at "),
    Case("FT307", edit(set_path("predicate.kernel_tests.0.max_error", 0.5)), "exceeds its tolerance"),
    # FT308 claims
    Case("FT308", manifest("min_speedup = 1.5", "min_speedup = 2.5"),
         "claim 'fused-vs-stock-b1' (fused vs stock >= 2.5x) does not hold: median ratio 2x"),
    Case("FT308", manifest("min_speedup = 1.3", "min_speedup = 1.61"), "'fused-vs-compile-b1'"),
    Case("FT308", manifest("batch = 1\ncontext = 128\n\n[[claims]]", "batch = 4\ncontext = 1\n\n[[claims]]"),
         "cannot be recomputed: no timed benchmark at NVIDIA H200 tp=1 batch=4 context=1"),
    Case("FT308", edit(lambda fx: variant(fx, 1, "compile").update(samples_us=[80.0])),
         "fewer than 2 samples"),
    Case("FT308", edit(lambda fx: bench(fx, 1)["variants"].pop("compile")), "has no 'compile' variant"),
    Case("FT308", edit(lambda fx: bench(fx, 1).update(rejected=["fused changed its inputs"])),
         "the timing protocol rejected the measurement at NVIDIA H200 tp=1 batch=1 context=128 bfloat16: "
         "fused changed its inputs"),
    # FT309 like with like
    Case("FT309", edit(lambda fx: variant(fx, 4, "fused").update(gpus=2)),
         "fused ran on 2 x NVIDIA H200 but stock on 1"),
    Case("FT309", edit(lambda fx: variant(fx, 4, "fused").update(gpu="NVIDIA B200")),
         "ran on 1 x NVIDIA B200"),
    Case("FT309", manifest("batch = 1\ncontext = 128\n\n[[claims]]", "batch = 1\ncontext = 128\ngpus = 2\n\n"
                                                                     "[[claims]]"),
         "says gpus=2; stock ran on 1 GPUs"),
    # FT310 slower
    Case("FT310", edit(lambda fx: variant(fx, 4, "fused").update(samples_us=samples(120.0))),
         "fused is slower than stock at NVIDIA H200 tp=1 batch=4"),
    # a median below stock is an error even when the noisy interval reaches 1 (the engine-yardstick issue)
    Case("FT310", edit(lambda fx: variant(fx, 4, "fused").update(samples_us=samples(100.5, spread=0.05))),
         "the interval reaches 1, but the median is below it"),
    # FT311 implausible
    Case("FT311", edit(lambda fx: variant(fx, 2, "fused").update(bytes_moved=1e12)),
         "TB/s at NVIDIA H200 tp=1 batch=2 context=128 bfloat16, above the 4.00 TB/s measured on that "
         "machine"),
    Case("FT311", edit(lambda fx: variant(fx, 2, "stock").update(samples_us=samples(1500.0))),
         "fused is 30x faster than stock"),
    Case("FT311", lambda fx: (edit(set_path("predicate.environment.copy_bandwidth_bytes_per_s", None))(fx),
                              policy("evidence", "peak_bandwidth", {})(fx)),
         "no peak bandwidth for NVIDIA H200", Severity.WARNING),
    # with no bandwidth measured in the run, the vendor peak is all there is: a weaker check, said so
    Case("FT311", edit(set_path("predicate.environment.copy_bandwidth_bytes_per_s", None)),
         "checked against the vendor peak only", Severity.WARNING),
    Case("FT311", lambda fx: (edit(set_path("predicate.environment.copy_bandwidth_bytes_per_s", None))(fx),
                              edit(lambda f: variant(f, 2, "fused").update(bytes_moved=1e12))(fx)),
         "above the NVIDIA H200 peak of 4.80 TB/s"),
    # FT312 samples
    Case("FT312", edit(lambda fx: variant(fx, 1, "fused").update(samples_us=samples(50.0, n=5))),
         "fused has 5 samples at NVIDIA H200 tp=1 batch=1 context=128 bfloat16; at least 20"),
    # FT313 timed accuracy
    Case("FT313", edit(lambda fx: bench(fx, 2)["accuracy"]["fused"].update(ok=False, max_abs_error=0.3)),
         "fused's timed outputs at NVIDIA H200 tp=1 batch=2 context=128 bfloat16 differ from stock's"),
    Case("FT313", edit(lambda fx: bench(fx, 2)["accuracy"].pop("fused")), "were not checked against stock"),
    Case("FT313", edit(lambda fx: bench(fx, 2)["accuracy"]["compile"].update(checked=0)),
         "compile's timed outputs"),
    # FT319 protocol
    Case("FT319", edit(lambda fx: bench(fx, 1)["protocol"].update(graph_replay=False)),
         "not timed as CUDA-graph"),
    Case("FT319", edit(lambda fx: bench(fx, 1)["protocol"].update(orders=[["stock", "fused", "compile"]])),
         "fused and stock not interleaved in both orders"),
    Case("FT319", edit(lambda fx: bench(fx, 1)["protocol"].update(l2_flush_bytes=1 << 20)),
         "L2 flush of 1048576"),
    Case("FT319",
         edit(lambda fx: bench(fx, 1)["protocol"].update(fresh_inputs=False, persisting_l2_reset=False)),
         "persisting-L2 window not reset; inputs reused"),
    Case("FT319", edit(lambda fx: bench(fx, 4).update(rejected=["the timer was replaced"])),
         "rejected by the collector: the timer was replaced"),
    Case("FT305", edit(lambda fx: bench(fx, 2).update(rejected=["outputs reused"])),
         "no accepted timed benchmark at batch 2"),
    # FT314 evals
    Case("FT314", edit(set_path("predicate.evals.0.value", 0.1)),
         "eval 'logit_max_abs_diff' = 0.1, must be <= 0.05"),
    Case("FT314", edit(set_path("predicate.evals.1.value", 0.9)), "must be >= 0.99"),
    Case("FT314", edit(lambda fx: fx.pred.update(evals=[])),
         "declares evals (demo.evals:run) but the bundle has none"),
    # FT315 sanitizer errors
    Case("FT315",
         edit(lambda fx: fx.pred["sanitizer"][1].update(errors=2, summary="RACECHECK SUMMARY: 2 hazards")),
         "racecheck reported 2 errors: RACECHECK SUMMARY: 2 hazards"),
    Case("FT315", edit(lambda fx: fx.pred["sanitizer"][0].update(errors=None)),
         "an unknown number of errors"),
    # FT316 sanitizer not run
    Case("FT316", edit(lambda fx: fx.pred["sanitizer"][2].update(ran=False, errors=None,
                                                                 reason="compute-sanitizer not found")),
         "synccheck did not run (compute-sanitizer not found)", Severity.WARNING),
    Case("FT316",
         both(edit(lambda fx: fx.pred.update(sanitizer=[])),
         policy("evidence", "sanitizer_not_run", "error")),
         "memcheck did not run"),
    Case("FT316", manifest('sanitizer_tests = ["tests/test_kernel.py::test_matches"]\n', ""),
         "declares no sanitizer_tests", Severity.WARNING),
    # FT317 environment
    Case("FT317", edit(set_path("predicate.environment.driver", None)), "environment.driver is missing"),
    Case("FT317", edit(set_path("predicate.kernel_tests.0.point.gpu", "NVIDIA B200")),
         f"points name NVIDIA B200 but the bundle was collected on {GPU}"),
    Case("FT317", edit(set_path("predicate.environment.gpu_count", 0)),
         "points at tp=1 but the machine has 0 GPUs"),
    Case("FT317", edit(both(set_path("predicate.kernel_tests.0.point.tp", 2),
                            set_path("predicate.environment.gpu_count", 2))), "how the GPUs are linked"),
    Case("FT317", edit(set_path("predicate.environment.compute_capability", "8.9")),
         "the policy knows it as 9.0"),
    Case("FT317", edit(set_path("predicate.environment", None)), "records no environment"),
    # FT318 age
    Case("FT318", edit(set_path("predicate.collected_at", days_ago(200))), "collected 200 days ago",
         Severity.WARNING),
    Case("FT318", edit(set_path("predicate.collected_at", days_ago(-10))), "is in the future",
         Severity.WARNING),
    # FT322 parts on one stack
    Case("FT322", lambda fx: second_part(fx, torch="2.11.0+cu130"),
         "different software: torch is 2.13.0 in statement.json but 2.11.0+cu130 in statement.tp2.json",
         Severity.WARNING),
    Case("FT322", lambda fx: second_part(fx, gpu_name="NVIDIA B200", compute_capability="10.0"),
         "different hardware: gpu_name is NVIDIA H200 in statement.json but NVIDIA B200 in "
         "statement.tp2.json",
         Severity.WARNING),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.code}-{i}" for i, c in enumerate(CASES)])
def test_rule_fails_on_bad_bundle(tmp_path: Path, case: Case) -> None:
    fx = new_fixture(tmp_path)
    assert run_rule(case.code, fx.context()) == []  # the same rule passes before the mutation
    case.mutate(fx)
    found = run_rule(case.code, fx.context())
    matching = [f for f in found if case.expect in f.message]
    assert matching, [f.message for f in found]
    assert matching[0].severity is case.severity
    assert matching[0].fix, "every finding says what to do"
    assert matching[0].evidence_file or matching[0].path


def test_every_rule_has_a_failing_case() -> None:
    assert {c.code for c in CASES} == set(CODES)


def test_a_gpu_without_evidence_is_one_coverage_finding(fx: BundleFixture) -> None:
    fx.set_manifest(MANIFEST.replace(
        'hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }]',
        'hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }, '
        '{ name = "NVIDIA B200", compute_capability = "10.0" }]'))
    found = run_rule("FT304", fx.context())
    want = "none of the 6 envelope points on NVIDIA B200 has a passing kernel test"
    assert [f.message for f in found] == [want]


def test_findings_carry_the_envelope_point(fx: BundleFixture) -> None:
    edit(remove_point)(fx)
    found = run_rule("FT304", fx.context())
    assert [f.point for f in found] == [{"gpu": GPU, "tp": 1, "batch": 4, "context": 1, "dtype": "bfloat16"}]
    assert found[0].evidence_file == "evidence/demo/statement.json"
    assert "fasttrack collect kernels/demo" in (found[0].fix or "")


def test_points_recorded_as_not_run_elsewhere_do_not_contradict_the_environment(fx: BundleFixture) -> None:
    # The collector records other hardware's points as not run; that is FT306's business, not FT317's.
    other = {"gpu": "NVIDIA B200", "tp": 8, "batch": 1, "context": 128, "dtype": "bfloat16"}
    fx.pred["benchmarks"].append({"point": other, "not_run": "not this machine's hardware"})
    fx.pred["kernel_tests"].append({"nodeid": "tests/test_kernel.py::test_matches[b200]", "point": other,
                                    "outcome": "skipped", "message": "not this machine's hardware"})
    fx.write_and_sign()
    assert run_rule("FT317", fx.context()) == []
    fx.pred["kernel_tests"][-1]["outcome"] = "passed"
    fx.write_and_sign()
    messages = [f.message for f in run_rule("FT317", fx.context())]
    assert any("points name NVIDIA B200" in m for m in messages)
    assert any("tp=8 but the machine has 1 GPUs" in m for m in messages)


def test_stale_finding_points_at_the_changed_file(fx: BundleFixture) -> None:
    (fx.contrib / "kernel.py").write_text("changed\n")
    add_file(fx)
    [f] = run_rule("FT302", fx.context())
    assert f.path == "kernels/demo/kernel.py"
    assert "changed: kernel.py" in f.message and "added: new_kernel.py" in f.message


def test_flood_of_findings_is_capped(fx: BundleFixture) -> None:
    def fail_many(fx: BundleFixture) -> None:
        extra = [dict(t, nodeid=t["nodeid"] + f"-{i}") for i in range(2) for t in fx.pred["kernel_tests"]]
        fx.pred["kernel_tests"] = [dict(t, outcome="failed") for t in fx.pred["kernel_tests"] + extra]

    edit(fail_many)(fx)
    found = run_rule("FT307", fx.context())
    assert len(found) == evidence_rules.MAX_FINDINGS_PER_RULE + 1
    assert found[-1].message == "and 11 more like the above"
    assert found[-1].severity is Severity.ERROR


def test_salvaged_bundle_still_gets_other_rules(fx: BundleFixture) -> None:
    # One broken kernel test record: FT301 reports it, the record is dropped, the rest is still judged.
    edit(set_path("predicate.kernel_tests.0.point.batch", "one"))(fx)
    ctx = fx.context()
    assert ctx.evidence is not None and ctx.evidence.salvaged
    found = run_all(ctx)
    # the dropped record was the point's point test, so FT340 says it did not run there
    assert {f.code for f in found} == {"FT301", "FT304", "FT340"}, [(f.code, f.message) for f in found]
    [cov] = [f for f in found if f.code == "FT304"]
    assert "batch=1 context=1" in cov.message


def test_bundle_from_another_contribution_dir_name_is_still_fresh(tmp_path: Path) -> None:
    # The digest covers content only, so the same files at another path (range mode) are fresh.
    fx = new_fixture(tmp_path)
    moved = fx.head / "vllm" / "models" / "demo"
    shutil.copytree(fx.contrib, moved)
    ctx = fx.context()
    from dataclasses import replace

    ctx = replace(ctx, contribution_dir="vllm/models/demo", manifest_path="vllm/models/demo/fasttrack.toml")
    assert run_rule("FT302", ctx) == []


# ------------------------------------------------------------------------------------------ summary

def test_summary_of_good_bundle(fx: BundleFixture) -> None:
    s = summarize(fx.context())
    assert s is not None and s.present and s.fresh and s.signature_valid
    assert s.signer == "alice@example.com"
    assert s.bundle_path == "evidence/demo"
    assert len(s.points) == 6 and all(p.status is PointStatus.PASSED for p in s.points)
    by_name = {c.name: c for c in s.claims}
    assert by_name["fused-vs-stock-b1"].holds
    assert by_name["fused-vs-stock-b1"].median_ratio == pytest.approx(2.0, rel=1e-3)
    low, high = by_name["fused-vs-stock-b1"].ci_low, by_name["fused-vs-stock-b1"].ci_high
    assert low is not None and high is not None and low <= 2.0 <= high
    row = s.benchmarks[0]
    assert row.median_us["stock"] == pytest.approx(100.0, rel=1e-2)
    assert row.speedup["fused"] == pytest.approx(2.0, rel=1e-3)
    assert row.kernels_per_layer == {"compile": 6.0, "fused": 3.0, "stock": 12.0}
    fused_median_s = median(samples(50.0)) * 1e-6
    assert row.bandwidth_fraction["fused"] == pytest.approx(2e8 / fused_median_s / 4e12, rel=1e-9)
    assert [e.passed for e in s.evals] == [True, True]
    assert [x.tool for x in s.sanitizers] == ["memcheck", "racecheck", "synccheck"]
    assert s.environment["gpu_name"] == GPU and s.environment["clock_sm_mhz"] == 1980


def test_summary_kernels_per_layer_of_a_multi_layer_case(fx: BundleFixture) -> None:
    """The collector records kernels per layer (graph kernels / layers); the summary must not divide again."""
    for b in fx.pred["benchmarks"]:
        b["layers"] = 4
    fx.write_and_sign()
    s = summarize(fx.context())
    assert s is not None
    assert s.benchmarks[0].kernels_per_layer == {"compile": 6.0, "fused": 3.0, "stock": 12.0}


def test_summary_of_stale_and_missing_bundles(fx: BundleFixture) -> None:
    (fx.contrib / "kernel.py").write_text("changed\n")
    s = summarize(fx.context())
    assert s is not None and s.fresh is False and s.changed_since == ["kernel.py"]
    assert all(p.status is PointStatus.STALE for p in s.points)
    assert not any(c.holds for c in s.claims)
    shutil.rmtree(fx.bundle)
    s = summarize(fx.context())
    assert s is not None and not s.present and s.bundle_path == "evidence/demo"


def test_manifest_sha_matches_head_manifest(fx: BundleFixture) -> None:
    want = hashlib.sha256((fx.contrib / "fasttrack.toml").read_bytes()).hexdigest()
    assert fx.pred["manifest_sha256"] == want


def test_fasttrack_rules_lists_the_evidence_codes() -> None:
    from typer.testing import CliRunner

    from fasttrack.cli import app

    out = CliRunner().invoke(app, ["rules"])
    assert out.exit_code == 0, out.output
    for code in CODES:
        assert code in out.output
    doc = CliRunner().invoke(app, ["rules", "FT302"])
    assert "content digest" in doc.output and "[evidence]" in doc.output
