"""The review risk score: how much a maintainer has to worry about one contribution, 0 (none) to 100.

The score is a sum of capped factors, each computed from the Verdict alone, so two people looking at the
same verdict get the same number and the same reasons. It orders the queue *within* a verdict (ready ones
first, then blocked ones); it never turns a failing verdict into a passing one. `RISK_RULES` is the
documentation the dashboard and docs/report.md print, and the code below implements exactly those lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from fasttrack.findings import Severity
from fasttrack.render.catalogue import rules_of
from fasttrack.report.facts import (
    REQUIRED_SANITIZERS,
    anti_gaming,
    eval_margin,
    evidence_age_days,
    grid_size,
)
from fasttrack.verdict import PointStatus, Verdict

Band = Literal["low", "medium", "high"]
LOW_BELOW: Final = 20
HIGH_FROM: Final = 50
TIGHT_EVAL_MARGIN: Final = 0.05  # an eval within 5% of its threshold is "tight"


@dataclass(frozen=True)
class RiskRule:
    factor: str
    rule: str
    cap: int


RISK_RULES: Final[tuple[RiskRule, ...]] = (
    RiskRule(
        "blast radius",
        "8 per other model unit and 4 per shared module that imports the changed code, "
        "4 per changed hub module; 15 when the blast radius could not be computed",
        30,
    ),
    RiskRule("change size", "1 per 500 changed lines plus 1 per 25 changed files", 10),
    RiskRule(
        "envelope width", "4 per hardware kind and 2 per TP size beyond the first, 1 per 64 grid points", 15
    ),
    RiskRule("evidence missing", "35 when there is no readable evidence bundle", 35),
    RiskRule("evidence stale", "20 when the code changed since the evidence was collected", 20),
    RiskRule("unsigned evidence", "15 for an invalid signature, 10 for none", 15),
    RiskRule(
        "evidence age", "10 past the policy's max age, 4 past half of it, 5 with no collection date", 10
    ),
    RiskRule(
        "envelope coverage",
        "2 per failed point, plus up to 10 for the share of points without passing tests",
        15,
    ),
    RiskRule(
        "failed or skipped checks",
        "3 per error and 1 per warning finding, 4 per required sanitizer "
        "that did not run, 6 per sanitizer that found errors, 4 per claim that does not hold",
        25,
    ),
    RiskRule("evals", "8 per eval outside its threshold, 2 per eval within 5% of it", 16),
    RiskRule(
        "anti-gaming",
        "15 per error and 5 per warning from the rules the verdict's catalogue tags anti-gaming "
        "(a harness gamed, the judge edited)",
        30,
    ),
)
_CAP = {r.factor: r.cap for r in RISK_RULES}


@dataclass(frozen=True)
class RiskFactor:
    factor: str
    points: int
    detail: str


@dataclass(frozen=True)
class Risk:
    score: int
    band: Band
    factors: tuple[RiskFactor, ...]  # only the factors that scored, largest first


def band_of(score: int) -> Band:
    if score < LOW_BELOW:
        return "low"
    return "medium" if score < HIGH_FROM else "high"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _blast(v: Verdict) -> tuple[int, str]:
    br = v.blast_radius
    if not br.computed:
        return 15, "not computed: its reach is unknown"
    models = max(br.models_total, len(br.models))
    shared = max(br.shared_total, len(br.shared))
    hubs = len(br.hubs_changed)
    pts = 8 * models + 4 * shared + 4 * hubs
    return pts, (
        f"{_plural(models, 'other model unit')}, {_plural(shared, 'shared module')}"
        + (f", {_plural(hubs, 'hub module')} changed" if hubs else "")
    )


def _size(v: Verdict) -> tuple[int, str]:
    lines = sum((f.added_lines or 0) + (f.removed_lines or 0) for f in v.changed_files)
    files = len(v.changed_files)
    return lines // 500 + files // 25, f"{_plural(files, 'file')}, {_plural(lines, 'changed line')}"


def _width(v: Verdict) -> tuple[int, str]:
    if not isinstance(v.envelope, dict):
        return 0, ""
    hw = v.envelope.get("hardware")
    tp = v.envelope.get("tp")
    kinds = len(hw) if isinstance(hw, list) else 1
    tps = len(tp) if isinstance(tp, list) else 1
    points = grid_size(v)
    pts = 4 * max(0, kinds - 1) + 2 * max(0, tps - 1) + points // 64
    return (
        pts,
        f"{_plural(kinds, 'hardware kind')}, {_plural(tps, 'TP size')}, {_plural(points, 'grid point')}",
    )


def assess(v: Verdict, *, now: datetime, max_age_days: int) -> Risk:
    """Score one verdict. `now` is the report's build time (evidence age is measured against it)."""
    raw: list[RiskFactor] = []

    def add(factor: str, points: int, detail: str) -> None:
        if points > 0:
            raw.append(RiskFactor(factor, min(points, _CAP[factor]), detail))

    add("blast radius", *_blast(v))
    add("change size", *_size(v))
    add("envelope width", *_width(v))

    ev = v.evidence
    has_contribution = v.envelope is not None or ev is not None
    if has_contribution and (ev is None or not ev.present):
        add("evidence missing", 35, "no readable evidence bundle")
    elif ev is not None:
        if ev.fresh is False:
            changed = len(ev.changed_since)
            add(
                "evidence stale",
                20,
                "the code changed since collection" + (f" ({_plural(changed, 'file')})" if changed else ""),
            )
        if ev.signature_valid is False:
            add(
                "unsigned evidence",
                15,
                "the signature does not verify" + (f" for {ev.signer}" if ev.signer else ""),
            )
        elif ev.signature_valid is None:
            add("unsigned evidence", 10, "the bundle is not signed")
        age = evidence_age_days(ev, now)
        if age is None:
            add("evidence age", 5, "no collection date")
        elif age > max_age_days:
            add("evidence age", 10, f"{age:.0f} days old, over the {max_age_days}-day limit")
        elif age > max_age_days / 2:
            add("evidence age", 4, f"{age:.0f} days old, past half the {max_age_days}-day limit")
        if ev.points:
            failed = sum(1 for p in ev.points if p.status is PointStatus.FAILED)
            unproven = sum(1 for p in ev.points if p.status is not PointStatus.PASSED)
            share = unproven / len(ev.points)
            add(
                "envelope coverage",
                2 * failed + math.ceil(10 * share),
                f"{unproven} of {len(ev.points)} points without passing tests"
                + (f", {failed} failed" if failed else ""),
            )

    errors = [f for f in v.findings if f.severity is Severity.ERROR]
    warnings = [f for f in v.findings if f.severity is Severity.WARNING]
    checks = 3 * len(errors) + len(warnings)
    notes = []
    if errors or warnings:
        notes.append(f"{_plural(len(errors), 'error')}, {_plural(len(warnings), 'warning')}")
    if ev is not None and ev.present:
        ran = {s.tool for s in ev.sanitizers if s.ran}
        skipped = sorted(REQUIRED_SANITIZERS - ran)
        dirty = [s.tool for s in ev.sanitizers if s.ran and (s.errors or 0) > 0]
        broken = [c.name for c in ev.claims if not c.holds]
        checks += 4 * len(skipped) + 6 * len(dirty) + 4 * len(broken)
        if skipped:
            notes.append(f"sanitizer not run: {', '.join(skipped)}")
        if dirty:
            notes.append(f"sanitizer errors: {', '.join(sorted(dirty))}")
        if broken:
            notes.append(f"{_plural(len(broken), 'claim')} not holding")
    add("failed or skipped checks", checks, "; ".join(notes))

    if ev is not None and ev.evals:
        failed_evals = [e.name for e in ev.evals if not e.passed]
        tight = [e.name for e in ev.evals if e.passed and eval_margin(e) < TIGHT_EVAL_MARGIN]
        parts = []
        if failed_evals:
            parts.append(f"outside threshold: {', '.join(failed_evals)}")
        if tight:
            parts.append(f"within 5% of threshold: {', '.join(tight)}")
        add("evals", 8 * len(failed_evals) + 2 * len(tight), "; ".join(parts))

    gaming = anti_gaming(v.findings, rules_of(v).info)
    if gaming:
        g_err = sum(1 for f in gaming if f.severity is Severity.ERROR)
        add(
            "anti-gaming",
            15 * g_err + 5 * (len(gaming) - g_err),
            f"{_plural(len(gaming), 'finding')}: {', '.join(sorted({f.code for f in gaming}))}",
        )

    factors = tuple(sorted(raw, key=lambda f: (-f.points, f.factor)))
    score = min(100, sum(f.points for f in factors))
    return Risk(score=score, band=band_of(score), factors=factors)
