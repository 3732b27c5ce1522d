"""Small facts the dashboard derives from a Verdict: the declared envelope, evidence age, eval margins and the
one finding that blocks a contribution. Pure functions of the Verdict (and the build time)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import pydantic

from fasttrack.domain import REFERENCE_VARIANTS as REFERENCE_VARIANTS
from fasttrack.domain import Variant
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import Envelope
from fasttrack.ruleinfo import ANTI_GAMING, CUSTODY, PRESENCE, RulesInfo
from fasttrack.verdict import EvalResult, EvidenceSummary, Verdict

REQUIRED_SANITIZERS: Final = frozenset({"memcheck", "racecheck", "synccheck"})
STOCK_VARIANT: Final = Variant.STOCK.value
COMPILE_VARIANT: Final = Variant.COMPILE.value

# What to fix first when several errors block (from the verdict's own rule metadata): the judge, then
# confinement, then whether evidence exists and belongs to this code, then cheating, then the envelope, then
# the remaining rules, then codes the verdict's catalogue does not hold.
_BLOCKER_GROUPS: Final = ("judge", "confined")
_BLOCKER_TAGS: Final = (PRESENCE, CUSTODY, ANTI_GAMING)


def declared_envelope(v: Verdict) -> Envelope | None:
    """The manifest's envelope as the verdict recorded it (None if absent or not a valid envelope)."""
    if v.envelope is None:
        return None
    try:
        return Envelope.model_validate(v.envelope)
    except pydantic.ValidationError:
        return None


def grid_size(v: Verdict) -> int:
    env = declared_envelope(v)
    if env is not None:
        return len(env.hardware) * len(env.tp) * len(env.batches()) * len(env.contexts()) * len(env.dtypes)
    return len(v.evidence.points) if v.evidence else 0


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 timestamp (a trailing Z allowed) as an aware datetime; naive ones are taken as UTC."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def evidence_age_days(ev: EvidenceSummary, now: datetime) -> float | None:
    collected = parse_time(ev.collected_at)
    if collected is None:
        return None
    return max(0.0, (now - collected).total_seconds() / 86400)


def eval_margin(e: EvalResult) -> float:
    """How far an eval is inside its threshold, as a share of the room it has (negative: outside).

    "max" evals (value <= threshold): (threshold - value) / |threshold|. "min" evals (value >= threshold):
    for a rate threshold in (0, 1) such as token agreement, the room is 1 - threshold; otherwise |threshold|.
    A zero threshold measures the absolute distance.
    """
    if e.direction == "max":
        room = abs(e.threshold)
        delta = e.threshold - e.value
    else:
        room = 1.0 - e.threshold if 0.0 < e.threshold < 1.0 else abs(e.threshold)
        delta = e.value - e.threshold
    return delta / room if room > 0 else delta


def _blocker_rank(code: str, rules: RulesInfo) -> int:
    info = rules.rule(code)
    if info is None:
        return len(_BLOCKER_GROUPS) + len(_BLOCKER_TAGS) + 2
    if info.group in _BLOCKER_GROUPS:
        return _BLOCKER_GROUPS.index(info.group)
    ranks = [i for i, tag in enumerate(_BLOCKER_TAGS) if tag in info.tags]
    if ranks:
        return len(_BLOCKER_GROUPS) + min(ranks)
    return len(_BLOCKER_GROUPS) + len(_BLOCKER_TAGS) + (0 if info.group == "envelope" else 1)


def blocker(findings: list[Finding], rules: RulesInfo) -> Finding | None:
    """The error to fix first (None when nothing blocks), ranked by the verdict's rule metadata."""
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if not errors:
        return None
    return min(errors, key=lambda f: (_blocker_rank(f.code, rules), f.code, f.path or "", f.line or 0,
                                      f.message))


def anti_gaming(findings: list[Finding], rules: RulesInfo) -> list[Finding]:
    """The warnings and errors of rules tagged anti-gaming (a harness gamed, the judge edited)."""
    tagged = rules.tagged(ANTI_GAMING)
    return [f for f in findings if f.code in tagged and f.severity is not Severity.INFO]


def where(f: Finding) -> str:
    """Where a finding points, as plain text (escaped by the renderer)."""
    if f.path:
        return f"{f.path}:{f.line}" if f.line else f.path
    if f.point:
        return ", ".join(f"{k}={val}" for k, val in f.point.items())
    return f.evidence_file or ""
