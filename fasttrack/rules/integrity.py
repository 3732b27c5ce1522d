"""FT4xx a fast-track PR may not edit its own judge."""

from __future__ import annotations

from collections.abc import Iterator

from fasttrack.confinement.zones import changed_sides, classify
from fasttrack.context import Context
from fasttrack.findings import Finding
from fasttrack.policy import ZoneKind
from fasttrack.rules.base import Catalogue

catalogue = Catalogue("integrity")


def _policy_relpath(ctx: Context) -> str | None:
    """The policy file's path inside the repository being judged, if it lies there."""
    if ctx.repo is None:
        return None
    try:
        return ctx.policy_path.resolve().relative_to(ctx.repo.resolve()).as_posix()
    except ValueError:
        return None


def judge_files(ctx: Context) -> set[str]:
    """Repository paths that are the judge whatever the zones say: the policy in use, the allowed signers."""
    files = {ctx.policy.evidence.allowed_signers.lstrip("/")}
    rel = _policy_relpath(ctx)
    if rel is not None:
        files.add(rel)
    return files


def _judge_zone(ctx: Context, path: str) -> str | None:
    """The judge zone a path is in, checked on the repository path and on the engine path."""
    for candidate in dict.fromkeys((path, ctx.engine_path(path))):
        zone = classify(ctx.policy, candidate, ctx.model, ctx.known_models or None)
        if zone.kind is ZoneKind.JUDGE:
            return zone.name
    return None


@catalogue.rule("FT401", "The PR edits its own judge.")
def edits_judge(ctx: Context) -> Iterator[Finding]:
    """A PR that changes what judges it (the policy, the allowed-signers file, the CI workflows, fasttrack
    itself, the action) cannot pass fast-track: its verdict would come from rules it wrote. Both the
    repository path and, in contribution mode, the path the file lands at in the engine are checked, and
    both sides of a rename count (a copy leaves its source as it was)."""
    fixed = judge_files(ctx)
    policy_rel = _policy_relpath(ctx)
    for change in ctx.changes:
        for path, how in changed_sides(change):
            zone = _judge_zone(ctx, path)
            if zone is None and path in fixed:
                zone = "the policy in use" if path == policy_rel else "the allowed signers"
            if zone is not None:
                yield Finding.error(
                    "FT401",
                    f"{path} ({how}) is part of the judge ({zone}); a PR may not edit its own judge",
                    path=path,
                    fix="change the judge in a separate PR that goes through normal review",
                )
