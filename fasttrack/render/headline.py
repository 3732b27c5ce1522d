"""The one-line verdict, without the terminal renderer's imports (rich): `--quiet` and `--output` print it."""

from __future__ import annotations

from fasttrack.sanitize import terminal_text
from fasttrack.verdict import Verdict


def headline(verdict: Verdict) -> str:
    """The one-line verdict."""
    c = verdict.counts()
    what = terminal_text(verdict.model or "no model")
    return (f"{verdict.verdict.upper()}: {what}, {c['error']} error(s), {c['warning']} warning(s), "
            f"{c['info']} info, {len(verdict.rules_run)} rules run")
