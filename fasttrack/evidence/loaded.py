"""The evidence as loaded for verification (filled in by fasttrack.evidence's loader)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fasttrack.evidence.bundle import Statement
from fasttrack.findings import Finding


@dataclass(frozen=True)
class LoadedEvidence:
    """A bundle directory as read from disk, before any rule judges it.

    `statement` is the parsed in-toto Statement (None when missing or unparseable; when parts of it were
    invalid, those parts are dropped and `salvaged` is True); `problems` are the schema findings (FT301)
    the loader produced (unknown or missing fields are findings, not crashes).
    """

    bundle_dir: Path
    statement: Statement | None = None
    statement_bytes: bytes | None = None
    signature: bytes | None = None
    problems: tuple[Finding, ...] = field(default=())
    statement_path: Path | None = None
    signature_path: Path | None = None
    salvaged: bool = False
    # sha256 of each raw log the predicate names, as found beside the statement (None: absent/unreadable).
    log_digests: dict[str, str | None] = field(default_factory=dict)
    # Files in the bundle directory that are neither the statement, its signature nor a listed log.
    unlisted_files: tuple[str, ...] = ()
