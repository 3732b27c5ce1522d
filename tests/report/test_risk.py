"""The risk score: each factor scores what RISK_RULES says, caps hold, and the bands order the queue."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import report_fixtures as rf

from fasttrack.findings import Finding
from fasttrack.report.risk import HIGH_FROM, LOW_BELOW, RISK_RULES, Risk, assess, band_of
from fasttrack.verdict import EvalResult, SanitizerResult, Verdict


def risk(v: Verdict, max_age_days: int = 90) -> Risk:
    return assess(v, now=rf.NOW, max_age_days=max_age_days)


def points(r: Risk, factor: str) -> int:
    return sum(f.points for f in r.factors if f.factor == factor)


def test_clean_contribution_is_low_risk() -> None:
    r = risk(rf.passing())
    assert r.band == "low" and r.score < LOW_BELOW
    assert {f.factor for f in r.factors} <= {"change size"}  # 612 lines over 9 files: +1, nothing else


def test_every_scored_factor_is_documented() -> None:
    documented = {rule.factor for rule in RISK_RULES}
    for v in (rf.passing(), rf.failing(), rf.stale(), rf.missing(), rf.huge(), rf.hostile(), rf.wide()):
        r = risk(v)
        assert {f.factor for f in r.factors} <= documented
        caps = {rule.factor: rule.cap for rule in RISK_RULES}
        assert all(0 < f.points <= caps[f.factor] for f in r.factors)
        assert r.score == min(100, sum(f.points for f in r.factors))
        assert [f.points for f in r.factors] == sorted((f.points for f in r.factors), reverse=True)


def test_missing_evidence_scores_35() -> None:
    r = risk(rf.missing())
    assert points(r, "evidence missing") == 35
    assert points(r, "failed or skipped checks") == 3  # the FT300 error


def test_stale_evidence_and_age() -> None:
    r = risk(rf.stale())  # collected 120 days before NOW
    assert points(r, "evidence stale") == 20
    assert points(r, "evidence age") == 10
    assert "120 days old" in next(f.detail for f in r.factors if f.factor == "evidence age")
    assert points(risk(rf.stale(), max_age_days=200), "evidence age") == 4  # past half of 200 days
    assert points(risk(rf.stale(), max_age_days=365), "evidence age") == 0


def test_no_collection_date_scores_5() -> None:
    v = rf.passing()
    assert v.evidence is not None
    v = v.model_copy(update={"evidence": v.evidence.model_copy(update={"collected_at": None})})
    assert points(risk(v), "evidence age") == 5


@pytest.mark.parametrize(("valid", "expected"), [(True, 0), (None, 10), (False, 15)])
def test_unsigned_and_bad_signatures(valid: bool | None, expected: int) -> None:
    env = rf.envelope()
    v = rf.verdict(ev=rf.evidence(env, signature_valid=valid), env=env)
    assert points(risk(v), "unsigned evidence") == expected


def test_failing_contribution_scores_checks_evals_and_anti_gaming() -> None:
    r = risk(rf.failing())
    # 5 errors (15) + 1 warning (1) + racecheck errors (6) + 1 claim not holding (4) = 26, capped at 25
    assert points(r, "failed or skipped checks") == 25
    assert points(r, "evals") == 8  # greedy_token_agreement outside its threshold
    assert points(r, "anti-gaming") == 15  # FT311 (bandwidth above peak)
    assert points(r, "envelope coverage") == 2 + 1  # one failed point of 15
    assert r.band == "high" and r.score >= HIGH_FROM


def test_sanitizer_not_run_counts_as_skipped_check() -> None:
    v = rf.passing()
    assert v.evidence is not None
    ev = v.evidence.model_copy(update={"sanitizers": [SanitizerResult(tool="memcheck", ran=True, errors=0)]})
    r = risk(v.model_copy(update={"evidence": ev}))
    assert points(r, "failed or skipped checks") == 8  # racecheck and synccheck did not run
    assert "racecheck, synccheck" in next(
        f.detail for f in r.factors if f.factor == "failed or skipped checks"
    )


def test_tight_eval_margin() -> None:
    v = rf.passing()
    assert v.evidence is not None
    ev = v.evidence.model_copy(
        update={
            "evals": [
                EvalResult(
                    name="agreement", value=0.9902, threshold=0.99, direction="min", passed=True
                ),  # 2% of room
                EvalResult(name="diff", value=0.01, threshold=0.05, direction="max", passed=True),
            ]
        }
    )
    assert points(risk(v.model_copy(update={"evidence": ev})), "evals") == 2


def test_blast_radius_and_envelope_width() -> None:
    assert points(risk(rf.verdict(br=rf.blast(1, 2))), "blast radius") == 8 + 8
    assert points(risk(rf.verdict(br=rf.blast(10, 10))), "blast radius") == 30  # capped
    uncomputed = rf.verdict().model_copy(
        update={"blast_radius": rf.blast().model_copy(update={"computed": False})}
    )
    assert points(risk(uncomputed), "blast radius") == 15
    wide = risk(rf.wide())  # 2 kinds, 2 TP sizes, 2*2*4*3*2 = 96 grid points
    assert points(wide, "envelope width") == 4 + 2 + 1


def test_anti_gaming_warning_scores_less_than_error() -> None:
    warn = rf.verdict(findings=[Finding.warning("FT319", "the protocol omits the L2 flush")])
    err = rf.verdict(findings=[Finding.error("FT401", "the PR edits policies/vllm.toml")])
    assert points(risk(warn), "anti-gaming") == 5
    assert points(risk(err), "anti-gaming") == 15


def test_huge_pr_stays_at_100() -> None:
    r = risk(rf.huge(n_findings=900, n_files=2000))
    assert r.score == 100 and r.band == "high"


def test_no_manifest_no_evidence_factor() -> None:
    v = rf.verdict(env=None).model_copy(update={"envelope": None, "fallback": None, "evidence": None})
    assert points(risk(v), "evidence missing") == 0


def test_docs_print_the_same_rules() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text(encoding="utf-8")
    for rule in RISK_RULES:
        assert f"| {rule.factor} | {rule.rule} | {rule.cap} |" in doc, rule.factor
    assert f"**low** below {LOW_BELOW}" in doc and f"**high** from {HIGH_FROM}" in doc


def test_bands() -> None:
    assert band_of(0) == "low" and band_of(LOW_BELOW - 1) == "low"
    assert band_of(LOW_BELOW) == "medium" and band_of(HIGH_FROM - 1) == "medium"
    assert band_of(HIGH_FROM) == "high" and band_of(100) == "high"


def test_age_is_measured_from_the_build_time() -> None:
    v = rf.passing()
    assert points(risk(v), "evidence age") == 0  # 3 days old
    later = assess(v, now=rf.NOW + timedelta(days=100), max_age_days=90)
    assert points(later, "evidence age") == 10
