"""The Verdict as JSON: the versioned contract every later consumer reads (`fasttrack schema verdict`)."""

from __future__ import annotations

from fasttrack.verdict import Verdict


def render(verdict: Verdict) -> str:
    return verdict.model_dump_json(indent=2) + "\n"
