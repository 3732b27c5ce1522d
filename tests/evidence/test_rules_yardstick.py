"""The engine-yardstick rules FT335-FT349 (fasttrack/rules/yardstick.py): one attack per hole, each failing
with its code, while the honest fixture passes every rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from bundle_factory import (
    MANIFEST,
    BundleFixture,
    edit,
    errors,
    manifest,
    new_fixture,
    run_all,
    run_rule,
    samples,
    session_key,
)

from fasttrack.findings import Severity
from fasttrack.rules import yardstick

pytestmark = pytest.mark.skipif(__import__("shutil").which("ssh-keygen") is None, reason="needs ssh-keygen")


@pytest.fixture
def fx(tmp_path: Path) -> BundleFixture:
    return new_fixture(tmp_path)


def _bench(fx: BundleFixture, batch: int) -> dict[str, object]:
    return next(b for b in fx.pred["benchmarks"] if b["point"]["batch"] == batch)


def _variant(fx: BundleFixture, batch: int, name: str) -> dict[str, object]:
    v = _bench(fx, batch)["variants"]
    assert isinstance(v, dict)
    out = v[name]
    assert isinstance(out, dict)
    return out




@dataclass
class Case:
    code: str
    mutate: Callable[[BundleFixture], None]
    expect: str
    severity: Severity = Severity.ERROR


def _stock_kernels(names: dict[str, float]) -> Callable[[BundleFixture], None]:
    def run(fx: BundleFixture) -> None:
        for b in fx.pred["benchmarks"]:
            b["variants"]["stock"]["kernel_times_us"] = dict(names)
    return edit(run)


def _claim_against_own_stock(fx: BundleFixture) -> None:
    # The contribution adds a slow "stock" of its own under another name and claims against it.
    for b in fx.pred["benchmarks"]:
        b["variants"]["mystock"] = {**b["variants"]["stock"], "origin": "contribution",
                                    "samples_us": samples(400.0)}
    fx.write_and_sign()
    fx.set_manifest(MANIFEST.replace('name = "fused-vs-stock-b1"\n', 'name = "fused-vs-stock-b1"\n'
                                     'baseline = "mystock"\n'))


def _recording_only(fx: BundleFixture) -> None:
    # the point test only records a tolerance, never the error it measured
    for t in fx.pred["kernel_tests"]:
        if t["nodeid"].startswith("tests/test_kernel.py::test_matches") and t["point"]["batch"] == 2:
            t["max_error"] = None


def _maintainer_key(fx: BundleFixture) -> Path:
    """bob@example.com, a second allowed signer (an audit by the statement's own signer does not count)."""
    key = session_key("maintainer_ed25519")
    pub = key.with_name(key.name + ".pub").read_text().split()
    with (fx.policies / "allowed_signers").open("a") as fh:
        fh.write(f'bob@example.com namespaces="fasttrack-evidence" {pub[0]} {pub[1]}\n')
    return key


def _write_audit(agreed: bool, signed: bool = True) -> Callable[[BundleFixture], None]:
    """A maintainer's audit record of the fixture's statement (what `fasttrack audit` writes)."""
    def run(fx: BundleFixture) -> None:
        import hashlib

        from fasttrack.evidence.audit import AuditedStatement, AuditPoint, AuditRecord, write_record
        from fasttrack.evidence.bundle import Point
        from fasttrack.evidence.signing import sign_file

        raw = (fx.bundle / "statement.json").read_bytes()
        pt = Point.model_validate(_bench(fx, 1)["point"])
        rec = AuditRecord(
            statement=AuditedStatement(file="statement.json", sha256=hashlib.sha256(raw).hexdigest()),
            audited_at="2026-12-02T00:00:00Z", median_tolerance=0.1, ratio_tolerance=0.08,
            points=[AuditPoint(point=pt, agreed=agreed,
                               reasons=[] if agreed else ["fused: stock/fused 2x recorded, 0.98x re-run"])],
            agreed=agreed)
        path = write_record(fx.bundle, rec, "audit-1")
        if signed:  # a maintainer's key, not the contributor's who signed the statement
            sign_file(path, _maintainer_key(fx))
    return run


CASES = [
    # FT335: the engine baseline the statement was measured against
    Case("FT335", edit(lambda fx: fx.pred.pop("baseline")), "records no engine baseline"),
    Case("FT335", lambda fx: (fx.baseline / "case.py").write_text("def baseline_case(p):\n    return 1\n"),
         "the engine baseline changed since it was collected (case.py)"),
    Case("FT335", edit(lambda fx: fx.pred["baseline"].update(case="demo.bench:my_stock")),
         "the policy names baselines.demo.case:baseline_case"),
    Case("FT335", lambda fx: fx.policy_data.pop("baselines"), "the policy has no engine baseline"),
    # FT336: stock ran a backend the engine would not pick on that GPU
    Case("FT336", _stock_kernels({"_decode_stage1_kernel": 900.0, "flashinfer::BatchMLAPageAttention": 1.0}),
         "runs TRITON_MLA for mla_decode"),
    Case("FT336", _stock_kernels({"_decode_stage1_kernel": 900.0, "gemv": 10.0}),
         "runs TRITON_MLA for mla_decode"),
    Case("FT336", _stock_kernels({"my_own_attention": 90.0}), "shows no kernel of an accepted mla_decode"),
    Case("FT336", edit(lambda fx: _variant(fx, 2, "stock").update(kernel_times_us=None)),
         "were not profiled"),
    Case("FT336", edit(lambda fx: _bench(fx, 4).update(backends={"mla_decode": "FLASH_ATTN_MLA"})),
         "records mla_decode backend 'FLASH_ATTN_MLA'"),
    # FT337: a claim against a stock of the contribution's own, a stock not from the engine
    Case("FT337", _claim_against_own_stock, "which the engine did not supply"),
    Case("FT337", edit(lambda fx: _variant(fx, 2, "stock").update(origin="contribution")),
         "is not recorded as the engine's baseline"),
    Case("FT337", edit(lambda fx: _variant(fx, 1, "fused").update(origin="engine")),
         "is not the contribution's variant"),
    # FT338: tolerances above the policy's cap
    Case("FT338", edit(lambda fx: fx.pred["kernel_tests"][0].update(tolerance=1e9)),
         "records tolerance 1e+09 for bfloat16, above the cap 0.03"),
    Case("FT338", edit(lambda fx: _bench(fx, 2)["accuracy"]["fused"].update(atol=1.0)),
         "timed accuracy at NVIDIA H200 tp=1 batch=2 context=128 bfloat16 used atol 1"),
    Case("FT338", edit(lambda fx: _bench(fx, 4)["oracle"]["fused"].update(rtol=0.5)),
         "oracle check at NVIDIA H200 tp=1 batch=4"),
    Case("FT338", lambda fx: fx.policy_data["evidence"].update(tolerance_caps={}), "above no cap"),
    # FT339: the harness's own oracle comparison
    Case("FT339", edit(lambda fx: _bench(fx, 1)["oracle"].pop("fused")),
         "fused at NVIDIA H200 tp=1 batch=1 context=128 bfloat16 was not checked against the engine's "
         "oracle"),
    Case("FT339", edit(lambda fx: _bench(fx, 2)["oracle"]["stock"].update(ok=False, max_abs_error=0.7)),
         "stock at NVIDIA H200 tp=1 batch=2 context=128 bfloat16 differs from the fp32 oracle"),
    # FT340: the named per-point tests
    Case("FT340", manifest('point_tests = ["tests/test_kernel.py::test_matches"]\n', ""),
         "the manifest names no point_tests"),
    Case("FT340", edit(_recording_only), "passed without recording the error it measured"),
    Case("FT340", manifest('point_tests = ["tests/test_kernel.py::test_matches"]',
                           'point_tests = ["tests/test_kernel.py::test_matches", '
                           '"tests/test_kernel.py::test_x"]'),
         "tests/test_kernel.py::test_x did not run at NVIDIA H200 tp=1 batch=1 context=1"),
    # FT341: a point left untimed by the contribution
    Case("FT341", edit(lambda fx: fx.pred["benchmarks"].append({
        "point": {**_bench(fx, 1)["point"], "context": 1}, "not_run": "candidates entry returned nothing",
        "not_run_by": "contribution"})), "was not timed (contribution)"),
    # FT343: a slow yardstick at a claimed point (warning; an error where the policy says so)
    Case("FT343", edit(lambda fx: [v.update(bytes_moved=2e7) for v in _bench(fx, 1)["variants"].values()]),
         "stock reaches 5% of the measured roofline", Severity.WARNING),
    # FT344: byte counts
    Case("FT344", edit(lambda fx: _variant(fx, 2, "fused").update(bytes_moved=None)),
         "fused at NVIDIA H200 tp=1 batch=2 context=128 bfloat16 record no bytes_moved"),
    Case("FT344", edit(lambda fx: [v.update(bytes_moved=1.0) for v in _bench(fx, 4)["variants"].values()]),
         "bytes_moved at NVIDIA H200 tp=1 batch=4 context=128 bfloat16 is implausibly small"),
    # FT345: eval thresholds the contributor picked
    Case("FT345", edit(lambda fx: fx.pred["evals"][0].update(threshold=5.0)),
         "threshold 5 is above the policy's max 0.1"),
    Case("FT345", edit(lambda fx: fx.pred["evals"][1].update(threshold=0.1)),
         "threshold 0.1 is below the policy's min 0.95"),
    Case("FT345", edit(lambda fx: fx.pred["evals"].append({"name": "my_metric", "value": 0.0,
                                                           "threshold": 1.0, "direction": "max"})),
         "eval 'my_metric' has no bound in the policy"),
    # FT346: a maintainer's signed re-run that did not reproduce the contributor's figures
    Case("FT346", _write_audit(agreed=False), "1 did not reproduce (NVIDIA H200|tp1|b1|c128|bfloat16: fused"),
    Case("FT346", _write_audit(agreed=False, signed=False), "audit-1.json is unsigned: it is not counted",
         Severity.WARNING),
    Case("FT346", lambda fx: (_write_audit(agreed=True)(fx),
                              edit(lambda f: f.pred["evals"][0].update(value=0.02))(fx)),
         "audits a statement no longer in the bundle", Severity.WARNING),
    Case("FT346", lambda fx: ((fx.bundle / "audits").mkdir(),
                              (fx.bundle / "audits" / "x.json").write_text("{")),
         "audits/x.json: not an audit record", Severity.WARNING),
    # FT347: stock timed only in the contribution's own process, or a stock the contribution's process slowed
    Case("FT347", edit(lambda fx: _bench(fx, 2).update(separation=None, stock_beside=None)),
         "stock at NVIDIA H200 tp=1 batch=2 context=128 bfloat16 was not timed by the engine's own pass"),
    Case("FT347", edit(lambda fx: _bench(fx, 1).pop("stock_beside")),
         "was not timed by the engine's own pass"),
    Case("FT347", edit(lambda fx: _bench(fx, 4)["stock_beside"].update(samples_us=samples(115.0))),
         "beside the candidates but 99.83 us alone in the engine's own pass, 15.0% apart"),
    Case("FT347", edit(lambda fx: _bench(fx, 4)["stock_beside"].update(samples_us=samples(80.0))),
         "% apart (the policy allows 5.0%)"),
    Case("FT347", lambda fx: fx.policy_data["evidence"].update(separation={"stock_agreement": 0.001}),
         "1.0% apart (the policy allows 0.1%)"),
    # FT348: the policy requires a maintainer's audit
    Case("FT348", lambda fx: fx.policy_data["evidence"].setdefault("audit", {}).update(required=1),
         "requires 1 agreeing maintainer audit(s) of the evidence; it has 0"),
    Case("FT348", lambda fx: (fx.policy_data["evidence"].setdefault("audit", {}).update(required=1),
                              _write_audit(agreed=True, signed=False)(fx)), "it has 0"),
    # FT349: results resumed from an earlier collect run's work dir, or no custody recorded
    Case("FT349", edit(lambda fx: fx.pred["collector"]["custody"].update(tests="resumed", bench="resumed")),
         "bench, tests resumed from an earlier collect run's work dir"),
    Case("FT349", edit(lambda fx: fx.pred["collector"].pop("custody")), "records no custody of its results"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.code}-{i}" for i, c in enumerate(CASES)])
def test_yardstick_rule_fails_on_the_attack(tmp_path: Path, case: Case) -> None:
    fx = new_fixture(tmp_path)
    assert run_rule(case.code, fx.context()) == []  # the honest bundle passes the same rule
    case.mutate(fx)
    found = run_rule(case.code, fx.context())
    matching = [f for f in found if case.expect in f.message]
    assert matching, [f.message for f in found]
    assert matching[0].severity is case.severity
    assert matching[0].fix


def test_every_yardstick_rule_has_an_attack() -> None:
    assert {c.code for c in CASES} == {r.code for r in yardstick.catalogue.rules}


def test_the_honest_bundle_passes_every_evidence_rule(fx: BundleFixture) -> None:
    found = run_all(fx.context())
    assert found == [], [(f.code, f.message) for f in found]


def test_slow_stock_is_an_error_where_the_policy_says_so(fx: BundleFixture) -> None:
    fx.policy_data["evidence"]["slow_stock"] = "error"
    edit(lambda f: [v.update(bytes_moved=2e7) for v in _bench(f, 1)["variants"].values()])(fx)
    assert [f.code for f in errors(run_rule("FT343", fx.context()))] == ["FT343"]


def test_a_wide_interval_does_not_excuse_a_slower_median(fx: BundleFixture) -> None:
    # fused 1% slower than stock, with noise wide enough that the CI reaches 1: an error, not a warning
    edit(lambda f: _variant(f, 2, "fused").update(samples_us=samples(101.0, spread=0.08)))(fx)
    found = run_rule("FT310", fx.context())
    assert found and all(f.severity is Severity.ERROR for f in found)


def test_verify_outputs_say_where_the_gain_comes_from(fx: BundleFixture) -> None:
    """The claimed point's stock and candidate kernels side by side, in the verdict's rows, the text and the
    Markdown report: here the candidate saves stock's GEMM, norm and MoE kernels and spends its own."""
    from fasttrack.evidence.summary import summarize
    from fasttrack.render import gain
    from fasttrack.render.markdown import gain_section
    from fasttrack.verdict import Verdict

    summary = summarize(fx.context())
    assert summary is not None
    [row] = [r for r in summary.benchmarks if r.claimed]
    assert row.point["batch"] == 1 and row.backends == {"mla_decode": "FLASHINFER_MLA"}
    saved = {g.name: g.saved_us for g in row.gain_from["fused"]}
    assert saved["cutlass_80_wmma_tensorop_bf16_s161616gemm"] == 55.0
    assert saved["demo_fused_gemv"] == -28.0  # the candidate's own kernel counts against it
    assert saved["flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<128>"] == 0.0
    assert row.roofline_fraction["stock"] == pytest.approx(2e8 / 100e-6 / 4e12, rel=0.05)
    v = Verdict(tool_version="t", verdict="pass", mode="contribution", evidence=summary,
                generated_at="2026-12-02T00:00:00Z")
    lines = gain.text_lines(v)
    assert lines[0].startswith("tp1 b1 c128 bfloat16: stock") and "mla_decode: FLASHINFER_MLA" in lines[0]
    assert "+55.0 us  cutlass_80_wmma_tensorop_bf16_s161616gemm" in lines[1]
    section = gain_section(v)
    assert section is not None
    md = "\n".join(section.lines())
    assert "+55.0 us <code>cutlass\\_80\\_wmma" in md and "FLASHINFER\\_MLA" in md


def test_an_agreeing_signed_audit_is_shown(fx: BundleFixture) -> None:
    from fasttrack.evidence.summary import summarize

    _write_audit(agreed=True)(fx)
    found = run_rule("FT346", fx.context())
    assert [(f.severity, f.message) for f in found] == [
        (Severity.INFO, "audits/audit-1.json: bob@example.com re-ran 1 point(s) of statement.json and they "
                        "agreed")]
    summary = summarize(fx.context())
    assert summary is not None
    [a] = summary.audits
    assert a.auditor == "bob@example.com" and a.agreed and a.statement == "statement.json"


def test_an_agreeing_signed_maintainer_audit_meets_the_policys_requirement(fx: BundleFixture) -> None:
    # the honest twin of FT348: with the audit the policy asks for, no finding
    fx.policy_data["evidence"].setdefault("audit", {})["required"] = 1
    _write_audit(agreed=True)(fx)
    assert run_rule("FT348", fx.context()) == []
