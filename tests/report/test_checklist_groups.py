"""Every rule code belongs to a checklist item of the dashboard, and an error no item claims fails closed."""

from __future__ import annotations

from fasttrack.findings import Finding
from fasttrack.report.model import OTHER_CHECK, build_checklist, checklist_group
from fasttrack.rules import all_rules
from fasttrack.verdict import Verdict


def test_every_rule_code_belongs_to_a_checklist_item() -> None:
    orphans = [r.code for r in all_rules() if checklist_group(r.code) is None]
    assert orphans == [], f"add these codes to a checklist item in fasttrack/report/model.py: {orphans}"


def _verdict(*codes: str) -> Verdict:
    return Verdict(tool_version="t", verdict="fail", mode="range", generated_at="2026-12-02T00:00:00Z",
                   findings=[Finding.error(c, "x") for c in codes], rules_run=[r.code for r in all_rules()])


def test_a_monkeypatch_error_fails_the_confinement_item() -> None:
    # The bug the typed-core issue names: an FT120 error rendered "Confined to one model's own code: ok".
    items = {i.title: i for i in build_checklist(_verdict("FT120"))}
    assert items["Confined to one model's own code"].state == "failed"
    assert items["Confined to one model's own code"].codes == ("FT120",)


def test_yardstick_errors_fail_their_items() -> None:
    items = {i.title: i for i in build_checklist(_verdict("FT336", "FT345", "FT402"))}
    assert items["Performance claims hold"].state == "failed"
    assert items["Model-level evals within thresholds"].state == "failed"
    assert items["The judge is untouched"].state == "failed"


def test_an_error_no_item_claims_is_shown_failing() -> None:
    items = {i.title: i for i in build_checklist(_verdict("FT399"))}
    assert items[OTHER_CHECK].state == "failed" and items[OTHER_CHECK].codes == ("FT399",)
