"""The rule catalogue. Codes are stable; families:

FT1xx confinement (paths, zones, hooks, blast radius, escapes) · FT2xx envelope · FT3xx evidence ·
FT4xx integrity (a PR may not edit its own judge).
"""

from __future__ import annotations

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


def all_rules() -> list[Rule]:
    """Every rule, ordered by code."""
    rules = [r for c in CATALOGUES for r in c.rules]
    codes = [r.code for r in rules]
    dupes = {c for c in codes if codes.count(c) > 1}
    if dupes:
        raise AssertionError(f"duplicate rule codes across catalogues: {sorted(dupes)}")
    return sorted(rules, key=lambda r: r.code)
