"""SARIF 2.1.0 output: the structure code scanning needs, one rule per FT code, every finding present."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fasttrack.findings import Finding, Severity
from fasttrack.render import sarif
from fasttrack.rules import all_rules
from fasttrack.verdict import Verdict

LEVELS = {"none", "note", "warning", "error"}


def check_sarif_structure(log: dict[str, Any]) -> None:
    """The required properties of SARIF 2.1.0 (sarif-schema-2.1.0) for the objects fasttrack emits."""
    assert (
        log["version"] == "2.1.0" and isinstance(log["runs"], list) and log["$schema"].startswith("https://")
    )
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        ids = [r["id"] for r in driver["rules"]]
        assert len(ids) == len(set(ids))
        for r in driver["rules"]:
            assert isinstance(r["id"], str)
            for key in ("shortDescription", "fullDescription"):
                assert isinstance(r[key]["text"], str)
        for res in run["results"]:
            assert isinstance(res["message"]["text"], str) and res["message"]["text"]
            assert res["level"] in LEVELS
            assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
            for loc in res["locations"]:
                phys = loc["physicalLocation"]
                assert isinstance(phys["artifactLocation"]["uri"], str)
                assert not phys["artifactLocation"]["uri"].startswith("/")
                if "region" in phys:
                    assert isinstance(phys["region"]["startLine"], int) and phys["region"]["startLine"] >= 1
            for v in res.get("partialFingerprints", {}).values():
                assert isinstance(v, str)


def _verdict(findings: list[Finding]) -> Verdict:
    return Verdict(
        tool_version="0.1.0",
        verdict="fail",
        mode="range",
        head="a" * 40,
        findings=findings,
        generated_at="2026-01-05T12:00:00Z",
    )


FINDINGS = [
    Finding.error("FT101", "touches sampling", path="vllm/v1/sample/sampler.py", line=12, fix="move it"),
    Finding.warning("FT102", "file-level", path="vllm/model_executor/models/kimi_k3/x.py"),
    Finding.info("FT301", "evidence note", evidence_file="evidence/kimi_k3/bundle.json"),
    Finding.error("FT201", "envelope unbounded", point={"gpu": "H200", "tp": 8}),
]


def test_every_finding_is_a_result_with_its_place() -> None:
    log = json.loads(sarif.render(_verdict(FINDINGS)))
    check_sarif_structure(log)
    results = log["runs"][0]["results"]
    assert len(results) == len(FINDINGS)
    assert [r["ruleId"] for r in results] == [f.code for f in FINDINGS]
    assert [r["level"] for r in results] == ["error", "warning", "note", "error"]
    first = results[0]["locations"][0]["physicalLocation"]
    assert (
        first["artifactLocation"]["uri"] == "vllm/v1/sample/sampler.py" and first["region"]["startLine"] == 12
    )
    assert "Fix: move it" in results[0]["message"]["text"]
    assert "region" not in results[1]["locations"][0]["physicalLocation"]
    assert (
        results[2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        == "evidence/kimi_k3/bundle.json"
    )
    assert results[3]["locations"] == [] and results[3]["properties"]["point"] == {"gpu": "H200", "tp": 8}
    assert len({r["partialFingerprints"]["fasttrackFinding/v1"] for r in results}) == len(results)


def test_one_rule_per_catalogue_code() -> None:
    log = sarif.to_sarif(_verdict([]))
    check_sarif_structure(log)
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    catalogue = all_rules()
    assert set(rules) == {r.code for r in catalogue}
    for r in catalogue:
        assert rules[r.code]["shortDescription"]["text"] == r.summary
        assert rules[r.code]["fullDescription"]["text"] == (r.doc or r.summary)


@pytest.mark.parametrize(
    "sev,level", [(Severity.ERROR, "error"), (Severity.WARNING, "warning"), (Severity.INFO, "note")]
)
def test_levels(sev: Severity, level: str) -> None:
    log = sarif.to_sarif(_verdict([Finding(code="FT999", severity=sev, message="m")]))
    check_sarif_structure(log)
    assert log["runs"][0]["results"][0]["level"] == level


def test_the_structure_check_is_not_vacuous() -> None:
    log = sarif.to_sarif(_verdict(FINDINGS))
    broken = json.loads(json.dumps(log))
    del broken["runs"][0]["results"][0]["message"]
    with pytest.raises(KeyError):
        check_sarif_structure(broken)
    broken = json.loads(json.dumps(log))
    broken["runs"][0]["results"][0]["ruleIndex"] = 10_000
    with pytest.raises(IndexError):
        check_sarif_structure(broken)
