"""The rule metadata a renderer uses for one Verdict: the verdict's own (`Verdict.catalogue`), never today's.

A verdict written before schema 1.1 records none: then the installed catalogue stands in for it, and the
renderer shows the note this returns, so nobody mistakes today's groups and docs for the judging run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import fasttrack
from fasttrack.findings import Severity
from fasttrack.ruleinfo import RulesInfo
from fasttrack.verdict import Verdict


@dataclass(frozen=True)
class VerdictRules:
    info: RulesInfo
    note: str | None = None  # set when `info` is not the verdict's own


def rules_of(v: Verdict) -> VerdictRules:
    if v.catalogue is not None:
        return VerdictRules(v.catalogue)
    from fasttrack.rules import all_rules, describe

    ran = set(v.rules_run)
    rules = [r for r in all_rules() if not ran or r.code in ran]
    return VerdictRules(describe(rules), note=(
        f"this verdict (schema {v.schema_version}, fasttrack {v.tool_version}) records no rule metadata; "
        f"checklist groups and rule docs are those of the installed fasttrack {fasttrack.__version__}"))


def failing_groups(v: Verdict, rules: RulesInfo) -> list[tuple[str, tuple[str, ...]]]:
    """(checklist group title, its error codes) for every group an error fails, in the catalogue's order,
    then (UNGROUPED, codes) for errors of codes the catalogue does not hold (fail closed: never dropped)."""
    errors = sorted({f.code for f in v.findings if f.severity is Severity.ERROR})
    out = []
    for g in rules.groups:
        codes = tuple(c for c in errors if (grp := rules.group_of(c)) is not None and grp.id == g.id)
        if codes:
            out.append((g.title, codes))
    stray = tuple(c for c in errors if rules.group_of(c) is None)
    if stray:
        out.append((UNGROUPED, stray))
    return out


UNGROUPED = "Rules the verdict's catalogue does not hold"
