"""Small facts the dashboard derives from a Verdict: the declared envelope, evidence age, eval margins and the
one finding that blocks a contribution. Pure functions of the Verdict (and the build time)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import pydantic

from fasttrack.evidence.bundle import REFERENCE_VARIANTS as REFERENCE_VARIANTS
from fasttrack.evidence.bundle import STOCK_VARIANT as STOCK_VARIANT
from fasttrack.findings import Finding, Severity
from fasttrack.manifest import Envelope
from fasttrack.verdict import EvalResult, EvidenceSummary, Verdict

# Rules that catch a harness being gamed or the judge being edited (issue 3's anti-gaming list): like-for-like
# comparisons, physically implausible results, timed outputs that differ from stock, a timing protocol that
# is not fasttrack's, raw logs that do not match the statement, a bundle for another contribution, and a PR
# that edits its own judge.
ANTI_GAMING_CODES: Final = frozenset({"FT309", "FT311", "FT313", "FT319", "FT320", "FT321", "FT330", "FT335",
                                      "FT336", "FT337", "FT338", "FT339", "FT344", "FT346", "FT401", "FT402"})
REQUIRED_SANITIZERS: Final = frozenset({"memcheck", "racecheck", "synccheck"})
COMPILE_VARIANT: Final = "compile"

# What to fix first when several errors block: the judge, then confinement, then whether evidence exists and
# belongs to this code, then cheating, then the envelope, then the remaining evidence rules.
_BLOCKER_ORDER: Final = (
    ("FT4",),
    ("FT1",),
    ("FT300", "FT301", "FT321"),
    ("FT302", "FT303"),
    tuple(sorted(ANTI_GAMING_CODES)),
    ("FT2",),
    ("FT3",),
)


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


def _blocker_rank(code: str) -> int:
    for i, group in enumerate(_BLOCKER_ORDER):
        if any(code.startswith(prefix) for prefix in group):
            return i
    return len(_BLOCKER_ORDER)


def blocker(findings: list[Finding]) -> Finding | None:
    """The error to fix first (None when nothing blocks)."""
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if not errors:
        return None
    return min(errors, key=lambda f: (_blocker_rank(f.code), f.code, f.path or "", f.line or 0, f.message))


def where(f: Finding) -> str:
    """Where a finding points, as plain text (escaped by the renderer)."""
    if f.path:
        return f"{f.path}:{f.line}" if f.line else f.path
    if f.point:
        return ", ".join(f"{k}={val}" for k, val in f.point.items())
    return f.evidence_file or ""
