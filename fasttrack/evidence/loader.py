"""Load an evidence bundle directory for verification. (Placeholder until issue 3 lands.)"""

from __future__ import annotations

from pathlib import Path

from fasttrack.evidence.loaded import LoadedEvidence


def load_evidence(bundle_dir: Path) -> LoadedEvidence | None:
    """Read the bundle under `bundle_dir`; None when there is no bundle there at all."""
    if not bundle_dir.is_dir():
        return None
    return LoadedEvidence(bundle_dir=bundle_dir)
