"""The Context: everything the rules read, built once by the loaders and never mutated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from fasttrack.changes.model import Change
from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.evidence.loaded import LoadedEvidence
from fasttrack.manifest import Manifest
from fasttrack.policy import Policy, Zone
from fasttrack.trusted import TrustedJudge
from fasttrack.verdict import BlastRadius

T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    policy: Policy
    policy_path: Path
    mode: Literal["range", "contribution"]
    # Directory holding the head tree's files (a materialised git tree, or the checkout itself).
    head_dir: Path
    changes: tuple[Change, ...]
    # The target model (given or inferred); None when it could not be inferred.
    model: str | None
    # Every model whose local roots the change set touches (more than one means not confined).
    models_touched: tuple[str, ...] = ()
    repo: Path | None = None
    base: str | None = None
    # Range mode: the commit the diff was taken from, the merge base of base and head (differs from `base`
    # when the base is not an ancestor of the head).
    merge_base: str | None = None
    head: str | None = None
    manifest: Manifest | None = None
    manifest_path: str | None = None  # head-relative path of fasttrack.toml
    contribution_dir: str | None = None  # head-relative directory of the contribution
    blast_radius: BlastRadius = field(default_factory=BlastRadius)
    evidence: LoadedEvidence | None = None
    # Paths as they will sit in the engine (contribution mode maps contribution files to target_path).
    engine_paths: dict[str, str] = field(default_factory=dict)
    # Every fasttrack.toml found for the model in the head (more than one that fits is a finding).
    manifest_candidates: tuple[str, ...] = ()
    # Where the evidence bundle was looked for (whether or not one was there).
    evidence_dir: Path | None = None
    # Names that are model units in the head (vllm/models/<name>/); empty means "any name in the slot".
    known_models: tuple[str, ...] = ()
    # Base-side text of the files a rule compares against the head (hook files).
    base_texts: dict[str, str] = field(default_factory=dict)
    # What the effect trace saw (fasttrack.confinement.trace); None when it was not asked for.
    trace: TraceFacts | None = None
    # Contribution mode: where the policy and allowed signers came from (a trusted revision or the installed
    # fasttrack) and how the judged checkout's copies differ from them (FT401). None: an explicit --policy.
    judge_source: TrustedJudge | None = None
    # Changed symlinks' real locations in the head tree (every link followed on disk), head-relative.
    real_paths: dict[str, str] = field(default_factory=dict)
    # Model packages the PR adds (new directories under packages_dir the head's registry maps an
    # architecture to), and new directories there that no architecture maps to (so they are no model).
    new_models: tuple[str, ...] = ()
    unregistered_dirs: tuple[str, ...] = ()

    # Values computed once per verify run and read by several rules (the contribution's content digest):
    # `memo(key, compute)`. Not part of the Context's identity.
    _memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()` the first time `key` is asked for in this Context, the same value after."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: T = self._memo[key]
        return value

    def engine_path(self, path: str) -> str:
        """Where a changed path sits in the engine tree (the path itself outside contribution mode)."""
        return self.engine_paths.get(path, path)

    def zone_of(self, path: str) -> Zone:
        """The policy zone of a changed path (judged on its engine path) for this PR's target model."""
        from fasttrack.confinement.zones import classify_real

        return classify_real(self.policy, self.engine_path(path), self.real_paths.get(path), self.model,
                             self.known_models or None)
