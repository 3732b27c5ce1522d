"""The blast radius from the import graph of the head tree. (Placeholder until issue 2's graph work lands.)"""

from __future__ import annotations

from pathlib import Path

from fasttrack.changes.model import Change
from fasttrack.policy import Policy
from fasttrack.verdict import BlastRadius


def compute_blast_radius(policy: Policy, head_dir: Path, changes: tuple[Change, ...],
                         model: str | None) -> BlastRadius:
    """Which other model units and shared modules import what the PR changed, each with a witness chain."""
    return BlastRadius(computed=False, note="blast radius analysis not built yet")
