"""The evidence as loaded for verification (filled in by fasttrack.evidence's loader)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fasttrack.evidence.bundle import Statement
from fasttrack.findings import Finding


@dataclass(frozen=True)
class LoadedPart:
    """One signed statement file of a bundle directory (`statement.json`, `statement.tp2.json`, ...).

    A contribution's evidence may be collected in parts (e.g. the tp-1 points on a 1-GPU machine, the tp-2
    points on a 2-GPU one): each part is its own statement with its own signature (`<name>.sig`), subject
    digest, manifest digest, environment and logs.
    """

    name: str  # file name inside the bundle directory
    statement_path: Path
    statement: Statement | None = None
    statement_bytes: bytes | None = None
    signature: bytes | None = None
    signature_path: Path | None = None
    problems: tuple[Finding, ...] = field(default=())
    salvaged: bool = False
    log_digests: dict[str, str | None] = field(default_factory=dict)

    @property
    def signature_name(self) -> str:
        return self.name + ".sig"


@dataclass(frozen=True)
class LoadedAudit:
    """One audit record beside the bundle (`audits/<name>.json`, `fasttrack audit`) and its signature."""

    name: str
    data: bytes | None = None
    signature: bytes | None = None
    problem: str | None = None  # why it could not be read


@dataclass(frozen=True)
class LoadedEvidence:
    """A bundle directory as read from disk, before any rule judges it.

    `statement` is the parsed in-toto Statement (None when missing or unparseable; when parts of it were
    invalid, those parts are dropped and `salvaged` is True); `problems` are the schema findings (FT301)
    the loader produced (unknown or missing fields are findings, not crashes).

    The top-level fields describe the primary part (`statement.json` when present, else the first part by
    name); `parts` holds every statement file of the directory, and `merged` the statement the coverage,
    claim and plausibility rules judge: the kernel tests, benchmarks, evals, lm-eval results and sanitizer
    runs of every parsed part, concatenated (header fields and environment from the primary part; rules
    that need a part's own environment find it through `origin`). With one part, `merged` is that part's
    statement itself.
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
    # Files in the bundle directory that are neither a statement, its signature nor a listed log.
    unlisted_files: tuple[str, ...] = ()
    parts: tuple[LoadedPart, ...] = ()
    merged: Statement | None = None
    # id() of each kernel test, benchmark, eval and sanitizer record in `merged` -> index into `parts`.
    origin: dict[int, int] = field(default_factory=dict)
    audits: tuple[LoadedAudit, ...] = ()

    def part_of(self, item: object) -> LoadedPart | None:
        """The part a record of `merged` comes from (None for an object that is not one of them)."""
        i = self.origin.get(id(item))
        return self.parts[i] if i is not None else None
