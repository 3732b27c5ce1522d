"""FT4xx a fast-track PR may not edit its own judge."""

from __future__ import annotations

from collections.abc import Iterator

from fasttrack.confinement.zones import changed_sides, classify
from fasttrack.evidence.bundle import Statement
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.policy import ZoneKind
from fasttrack.rules.base import Catalogue
from fasttrack.sanitize import visible

catalogue = Catalogue("integrity")
MAX_DIFFERENCES = 25


def _policy_relpath(ctx: Facts) -> str | None:
    """The policy file's path inside the repository being judged, if it lies there."""
    return ctx.policy_relpath


def judge_files(ctx: Facts) -> set[str]:
    """Repository paths that are the judge whatever the zones say: the policy in use, the allowed signers."""
    files = {ctx.policy.evidence.allowed_signers.lstrip("/")}
    rel = _policy_relpath(ctx)
    if rel is not None:
        files.add(rel)
    return files


def _judge_zone(ctx: Facts, path: str) -> str | None:
    """The judge zone a path is in, checked on the repository path and on the engine path."""
    for candidate in dict.fromkeys((path, ctx.engine_path(path))):
        zone = classify(ctx.policy, candidate, ctx.model, ctx.known_models or None)
        if zone.kind is ZoneKind.JUDGE:
            return zone.name
    return None


@catalogue.rule("FT401", "The PR edits its own judge.")
def edits_judge(ctx: Facts) -> Iterator[Finding]:
    """A PR that changes what judges it (the policy, the allowed-signers file, the CI workflows, fasttrack
    itself, the action, the engine baselines) cannot pass fast-track: its verdict would come from rules it
    wrote. Both the repository path and, in contribution mode, the path the file lands at in the engine are
    checked, and both sides of a rename count (a copy leaves its source as it was). In contribution mode the
    policy and the allowed signers are read from the trusted revision (`--trusted-ref`, default the merge base
    with the default branch), and every judge file of the judged checkout that is not the trusted copy (the
    policy, the signers, `baselines/**`) is named here: the trusted copy judges, never the edited one."""
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
    source = ctx.judge_source
    if source is None:
        return
    for diff in source.differences[:MAX_DIFFERENCES]:
        yield Finding.error(
            "FT401",
            f"{visible(diff.path)} ({diff.how}) is not the trusted copy from {source.source}; the trusted "
            "copy judges this contribution, and a PR may not edit its own judge",
            path=diff.path,
            fix=("revert the change to the judge (check out the trusted revision's copy), and propose it in "
                 "a separate PR that goes through normal review"),
        )
    if len(source.differences) > MAX_DIFFERENCES:
        more = len(source.differences) - MAX_DIFFERENCES
        yield Finding.error("FT401", f"and {more} more judge files differ from the trusted copy from "
                                     f"{source.source}",
                            fix="revert the changes to the judge")


def statement_harness_digest(st: Statement) -> str | None:
    """The harness digest a statement records (`predicate.collector.harness_digest`), when it has one."""
    collector = st.predicate.collector
    value = getattr(collector, "harness_digest", None) if collector is not None else None
    return value if isinstance(value, str) and value else None


def _short(digest: str) -> str:
    return visible(digest[:16]) + ("…" if len(digest) > 16 else "")


@catalogue.rule("FT402", "The evidence must come from a harness the policy accepts.")
def harness_accepted(ctx: Facts) -> Iterator[Finding]:
    """The statement records the digest of the harness that produced it (timing, pytest plugin, bench
    worker, collector and the modules they call: `fasttrack.evidence.harness`). It must be one of the
    policy's `[evidence] accepted_harness_digests` (the released fasttrack's): a statement from an edited
    timer or plugin, or one that records no harness at all, supports nothing."""
    from fasttrack.evidence import analysis as an

    accepted = ctx.policy.evidence.accepted_harness_digests
    ours = ctx.harness.get()
    shown = ", ".join(_short(d) for d in accepted[:4]) or "none"
    for part, st in an.parsed_parts(ctx):
        got = statement_harness_digest(st)
        label = an.part_file(ctx, part)
        fix = (f"collect again with a released fasttrack (this one's harness is {_short(ours)}; "
               "`python -m fasttrack.evidence.harness` prints it), sign it, and commit the new evidence")
        if got is None:
            yield Finding.error("FT402", f"{part.name} records no harness digest "
                                         "(predicate.collector.harness_digest), so the code that timed and "
                                         f"tested it is unknown; the policy accepts {shown}",
                                evidence_file=label, fix=fix)
        elif got not in accepted:
            yield Finding.error("FT402", f"{part.name} was collected by harness {_short(got)}, which the "
                                         f"policy does not accept (it accepts {shown})",
                                evidence_file=label, fix=fix)
