"""The evidence as loaded for verification (filled in by fasttrack.evidence's loader)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrack.findings import Finding


@dataclass(frozen=True)
class LoadedEvidence:
    """A bundle directory as read from disk, before any rule judges it.

    `statement` is the parsed in-toto Statement (None when missing or unparseable); `problems` are the
    schema findings the loader produced (unknown or missing fields are findings, not crashes).
    """

    bundle_dir: Path
    statement: Any = None
    statement_bytes: bytes | None = None
    signature: bytes | None = None
    problems: tuple[Finding, ...] = field(default=())
