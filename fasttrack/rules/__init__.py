"""The rule catalogue. Codes are stable; families:

FT1xx confinement (paths, zones, hooks, blast radius, escapes) · FT2xx envelope · FT3xx evidence ·
FT4xx integrity (a PR may not edit its own judge).

Each family module registers its checks (code, summary, docstring); `fasttrack.rules.catalogue` declares
their metadata (checklist group, tags, default severity, why, example). `all_rules()` joins the two.
"""

from __future__ import annotations

import dataclasses

from fasttrack.ruleinfo import RuleCode, RuleDoc, RuleInfo, RulesInfo
from fasttrack.rules import (
    binding,
    blast,
    confinement,
    envelope,
    escapes,
    evidence,
    integrity,
    repo,
    source,
    trace,
    yardstick,
)
from fasttrack.rules.base import Catalogue, Rule
from fasttrack.rules.catalogue import GROUPS, META

CATALOGUES: tuple[Catalogue, ...] = (
    confinement.catalogue,
    blast.catalogue,
    escapes.catalogue,
    source.catalogue,
    repo.catalogue,
    trace.catalogue,
    envelope.catalogue,
    evidence.catalogue,
    yardstick.catalogue,
    binding.catalogue,
    integrity.catalogue,
)


def _with_metadata(r: Rule) -> Rule:
    meta = META.get(r.code)
    if meta is None:
        raise AssertionError(f"rule {r.code} has no metadata in fasttrack/rules/catalogue.py (META)")
    info = RuleInfo(code=r.code, family=r.family, summary=r.summary, group=meta.group.id,
                    severity=meta.severity, tags=meta.tags,
                    doc=RuleDoc(what=r.doc or r.summary, why=meta.why, example=meta.example))
    return dataclasses.replace(r, code=RuleCode(info, GROUPS), info=info, fixture_exempt=meta.fixture_exempt)


def _joined() -> tuple[Rule, ...]:
    rules = [r for c in CATALOGUES for r in c.rules]
    codes = [r.code for r in rules]
    dupes = {c for c in codes if codes.count(c) > 1}
    if dupes:
        raise AssertionError(f"duplicate rule codes across catalogues: {sorted(dupes)}")
    stray = sorted(set(META) - set(codes))
    if stray:
        raise AssertionError(f"fasttrack/rules/catalogue.py declares metadata for no rule: {stray}")
    return tuple(sorted((_with_metadata(r) for r in rules), key=lambda r: r.code))


def all_rules() -> list[Rule]:
    """Every rule with its catalogue metadata, ordered by code."""
    return list(_joined())


def describe(rules: list[Rule]) -> RulesInfo:
    """The metadata of `rules` and the checklist groups, as a Verdict records it."""
    return RulesInfo(groups=GROUPS, rules=tuple(r.info for r in rules if r.info is not None))
