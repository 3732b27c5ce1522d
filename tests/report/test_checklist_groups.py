"""Rule metadata lives in the catalogue and travels in the Verdict: every rule code belongs to a checklist
group, and the dashboard, SARIF and the GitHub output read groups and docs from the verdict they render."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from fasttrack.findings import Finding, Severity
from fasttrack.github.artifact import load_verdict
from fasttrack.github.markdown import Outcome
from fasttrack.github.markdown import render as github_render
from fasttrack.render.sarif import to_sarif
from fasttrack.report.model import OTHER_CHECK, build_checklist
from fasttrack.ruleinfo import GroupInfo, RuleDoc, RuleInfo, RulesInfo
from fasttrack.rules import all_rules, describe
from fasttrack.rules.catalogue import GROUPS, META
from fasttrack.verdict import Verdict

CONFINED = "Confined to one model's own code"


def _verdict(*codes: str, **kw: object) -> Verdict:
    """A verdict as the pipeline builds it: `rules_run` holds the rules' own codes (with their metadata)."""
    return Verdict(tool_version="t", verdict="fail" if codes else "pass", mode="range",
                   generated_at="2026-12-02T00:00:00Z", findings=[Finding.error(c, "x") for c in codes],
                   rules_run=[r.code for r in all_rules()], **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ the catalogue

def test_every_rule_code_belongs_to_a_checklist_group() -> None:
    info = describe(all_rules())
    rendered = {i.title for i in build_checklist(_verdict())}
    orphans = [r.code for r in all_rules() if r.info is None or info.group_of(r.code) is None
               or info.group_of(r.code).title not in rendered]  # type: ignore[union-attr]
    assert orphans == [], f"give these codes a group in fasttrack/rules/catalogue.py: {orphans}"
    assert {m.group for m in META.values()} <= set(GROUPS)


def test_a_rule_without_metadata_or_a_group_is_refused() -> None:
    doc = RuleDoc(what="w", why="y", example="e")
    with pytest.raises(pydantic.ValidationError, match="FT999 name a group that is not in groups"):
        RulesInfo(groups=GROUPS, rules=(RuleInfo(code="FT999", family="x", summary="s", group="nowhere",
                                                 severity=Severity.ERROR, doc=doc),))
    with pytest.raises(pydantic.ValidationError):
        RuleDoc(what="w", why="", example="e")


def test_every_rule_declares_why_and_an_example() -> None:
    for r in all_rules():
        assert r.info is not None and r.info.doc.why and r.info.doc.example, r.code
        assert r.info.doc.what == (r.doc or r.summary)


def test_the_pipeline_records_the_metadata_of_the_rules_that_ran() -> None:
    v = _verdict()
    assert v.catalogue is not None
    assert [r.code for r in v.catalogue.rules] == [r.code for r in all_rules()]
    # plain codes (a verdict read back from JSON, a hand-built one) carry nothing to record
    assert Verdict(tool_version="t", verdict="pass", mode="range", generated_at="x",
                   rules_run=["FT100"]).catalogue is None
    again = Verdict.model_validate_json(v.model_dump_json())
    assert again.catalogue == v.catalogue


# ------------------------------------------------------------------------------------ the dashboard

def test_a_monkeypatch_error_fails_the_confinement_item() -> None:
    # The bug the typed-core issue names: an FT120 error rendered "Confined to one model's own code: ok".
    items = {i.title: i for i in build_checklist(_verdict("FT120"))}
    assert items[CONFINED].state == "failed"
    assert items[CONFINED].codes == ("FT120",)


def test_honest_verdict_shows_the_confinement_item_ok() -> None:
    items = {i.title: i for i in build_checklist(_verdict())}
    assert items[CONFINED].state == "ok"
    assert OTHER_CHECK not in items


def test_yardstick_errors_fail_their_items() -> None:
    items = {i.title: i for i in build_checklist(_verdict("FT336", "FT345", "FT402"))}
    assert items["Performance claims hold"].state == "failed"
    assert items["Model-level evals within thresholds"].state == "failed"
    assert items["The judge is untouched"].state == "failed"


def test_an_error_no_item_claims_is_shown_failing() -> None:
    items = {i.title: i for i in build_checklist(_verdict("FT399"))}
    assert items[OTHER_CHECK].state == "failed" and items[OTHER_CHECK].codes == ("FT399",)


def _old_catalogue() -> RulesInfo:
    """Metadata as an older fasttrack declared it: other group titles, FT120 in a group of its own."""
    doc = RuleDoc(what="old what", why="old why", example="old example")
    return RulesInfo(
        groups=(GroupInfo(id="paths", title="Old: paths"),
                GroupInfo(id="patching", title="Old: no patching")),
        rules=(RuleInfo(code="FT101", family="confinement", summary="old summary 101", group="paths",
                        severity=Severity.ERROR, doc=doc),
               RuleInfo(code="FT120", family="escapes", summary="old summary 120", group="patching",
                        severity=Severity.ERROR, tags=("escape",), doc=doc)))


def _old_verdict(tmp_path: Path, catalogue: RulesInfo | None) -> Verdict:
    v = Verdict(tool_version="0.0.9", verdict="fail", mode="range", generated_at="2026-01-01T00:00:00Z",
                findings=[Finding.error("FT120", "Foo.forward = f")], rules_run=["FT101", "FT120"],
                catalogue=catalogue)
    path = tmp_path / "old.json"
    data = json.loads(v.model_dump_json())
    if catalogue is None:  # as a 1.0 verdict was written: no such field at all
        data.pop("catalogue")
        data["schema_version"] = "1.0"
    path.write_text(json.dumps(data))
    return load_verdict(path)


def test_an_old_verdict_renders_with_its_own_groups_and_docs(tmp_path: Path) -> None:
    v = _old_verdict(tmp_path, _old_catalogue())
    items = {i.title: i for i in build_checklist(v)}
    assert items["Old: no patching"].state == "failed" and items["Old: paths"].state == "ok"
    assert CONFINED not in items  # today's titles are not the judging run's
    sarif = to_sarif(v)["runs"][0]
    rules = {r["id"]: r for r in sarif["tool"]["driver"]["rules"]}
    assert set(rules) == {"FT101", "FT120"}
    assert rules["FT120"]["fullDescription"]["text"] == "old what"
    assert "old why" in rules["FT120"]["help"]["text"] and "old example" in rules["FT120"]["help"]["text"]
    assert rules["FT120"]["properties"]["group"] == "Old: no patching"
    assert "ruleMetadataNote" not in sarif["properties"]
    md = github_render(v, Outcome(eligible=False), limit=60000)
    assert "**Old: no patching** (FT120)" in md and "old summary 120 Why: old why" in md


def test_a_verdict_without_metadata_falls_back_and_says_so(tmp_path: Path) -> None:
    v = _old_verdict(tmp_path, None)
    assert v.catalogue is None and v.schema_version == "1.0"
    items = {i.title: i for i in build_checklist(v)}
    assert items[CONFINED].state == "failed"  # today's groups stand in: still never "ok"
    sarif = to_sarif(v)["runs"][0]
    assert "records no rule metadata" in sarif["properties"]["ruleMetadataNote"]
    md = github_render(v, Outcome(eligible=False), limit=60000)
    assert "records no rule metadata" in md and f"**{CONFINED}** (FT120)" in md


def test_a_broken_catalogue_in_a_verdict_file_is_a_clear_error(tmp_path: Path) -> None:
    from fasttrack.errors import InputError

    path = tmp_path / "v.json"
    data = json.loads(_verdict("FT120").model_dump_json())
    data["catalogue"]["rules"][0]["group"] = "nowhere"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_verdict(path)
    assert err.value.path == str(path) and "catalogue" in (err.value.field or "")
    assert "name a group that is not in groups" in err.value.message
