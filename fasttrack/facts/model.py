"""The facts object: the Context plus everything derived from the disk, git and other processes before any
rule runs. Rules are pure functions of it (`fasttrack.rules`); `fasttrack.facts.gather` builds it.

A fact whose loader failed holds the exception (`Outcome`): the rules that read it crash, and a crashed
rule is an error finding (fail closed), as when the rule itself did the reading. A rule asking for a head
file the loaders did not read gets `NotGathered` (a bug in the facts stage, never a silent "absent").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from fasttrack.confinement.source_text import SourceProblem
from fasttrack.context import Context

if TYPE_CHECKING:
    from pathlib import Path

    from fasttrack.evidence.analysis import Freshness
    from fasttrack.evidence.digest import ContentDigest
    from fasttrack.evidence.loaded import LoadedPart
    from fasttrack.evidence.signing import SignatureResult
    from fasttrack.evidence.yardstick_facts import AuditFacts
    from fasttrack.facts.escapes import EscapeAnalysis

T = TypeVar("T")
PathKind = Literal["file", "dir", "other", "missing"]


class NotGathered(LookupError):
    """A rule read a head-side fact the facts stage did not gather."""


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """A loader's result, or the exception it raised (re-raised to the rule that reads it)."""

    value: T | None = None
    error: Exception | None = None

    @classmethod
    def missing(cls, what: str) -> Outcome[T]:
        """The outcome of a loader that did not run (a Facts built by hand): reading it is NotGathered."""
        return cls(error=NotGathered(f"the facts stage did not gather {what}"))

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        value: T = self.value  # type: ignore[assignment]
        return value


@dataclass(frozen=True)
class LinkFacts:
    """A symlink in the head tree, resolved on disk: its real head-relative path (None: it dangles, loops or
    leaves the tree), whether the link's path exists (followed) and what its real target is."""

    real: str | None
    exists: bool
    real_kind: PathKind


@dataclass(frozen=True)
class Facts(Context):
    """The Context and the facts gathered from it (`fasttrack.facts.gather.gather_facts`)."""

    # Text of head-side files the rules read (None: absent, a symlink, binary or too large).
    head_texts: Mapping[str, str | None] = field(default_factory=dict)
    # What `stat` says of head-side paths the rules ask about (symlinks followed).
    head_kinds: Mapping[str, PathKind] = field(default_factory=dict)
    # Each changed Python file's text as Python runs it (coding cookie, symlinks followed on disk).
    python_sources: Mapping[str, str | SourceProblem] = field(default_factory=dict)
    # Base-side text of modified and renamed files (Python source decoding), keyed by head path.
    base_sources: Mapping[str, str | None] = field(default_factory=dict)
    # Every symlink in the model's root directories and every changed symlink, resolved.
    module_links: Mapping[str, LinkFacts] = field(default_factory=dict)
    # (path, text) of the contribution's non-test Python files in the head.
    contribution_sources: tuple[tuple[str, str], ...] = ()
    # sha256 of the manifest's bytes in the head (None: it cannot be read).
    manifest_sha256: str | None = None
    # The policy file's path inside the judged repository, when it lies there.
    policy_relpath: str | None = None
    escape_analysis: Outcome[EscapeAnalysis] = field(
        default_factory=lambda: Outcome.missing("the escape analysis"))
    # The contribution's content digest (None: no contribution directory or manifest).
    digest: Outcome[ContentDigest] | None = None
    # This fasttrack's harness digest.
    harness: Outcome[str] = field(default_factory=lambda: Outcome.missing("the harness digest"))
    # Per evidence part (None: the primary statement), its freshness and signature check.
    freshness_checks: tuple[tuple[LoadedPart | None, Outcome[Freshness]], ...] = ()
    signature_checks: tuple[tuple[LoadedPart | None, Outcome[SignatureResult]], ...] = ()
    # The policy's allowed-signers file as found on disk.
    allowed_signers: Outcome[Path] = field(
        default_factory=lambda: Outcome.missing("the allowed signers path"))
    # The engine baseline's digest in the judged tree (None: no baseline for the model, or none found).
    judged_baseline: Outcome[ContentDigest | None] = field(
        default_factory=lambda: Outcome.missing("the judged baseline digest"))
    # Every audit record beside the bundle, its signature checked.
    audits: Outcome[list[AuditFacts]] = field(default_factory=lambda: Outcome.missing("the audits"))

    @property
    def escapes(self) -> EscapeAnalysis:
        return self.escape_analysis.get()

    def head_text(self, path: str) -> str | None:
        """Text of a head-side file, or None if it is absent, a symlink, binary or too large."""
        try:
            return self.head_texts[path]
        except KeyError:
            raise NotGathered(f"the facts stage did not read {path!r} from the head") from None

    def head_kind(self, path: str) -> PathKind:
        try:
            return self.head_kinds[path]
        except KeyError:
            raise NotGathered(f"the facts stage did not stat {path!r} in the head") from None

    def python_source(self, path: str) -> str | SourceProblem:
        try:
            return self.python_sources[path]
        except KeyError:
            raise NotGathered(f"the facts stage did not read {path!r} as Python source") from None

    def base_source(self, path: str) -> str | None:
        try:
            return self.base_sources[path]
        except KeyError:
            raise NotGathered(f"the facts stage did not read the base of {path!r}") from None

    def freshness(self, part: LoadedPart | None = None) -> Freshness:
        return _lookup(self.freshness_checks, part, "freshness").get()

    def signature(self, part: LoadedPart | None = None) -> SignatureResult:
        return _lookup(self.signature_checks, part, "signature check").get()


def _lookup(rows: tuple[tuple[LoadedPart | None, Outcome[T]], ...], part: LoadedPart | None,
            what: str) -> Outcome[T]:
    for key, value in rows:
        if key is part or (key is not None and part is not None and key == part):
            return value
    raise NotGathered(f"the facts stage did not compute the {what} of "
                      f"{'the statement' if part is None else part.name}")
