"""Judge a Context: run every rule and assemble the Verdict (`run_verify` = build + judge, no printing)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import fasttrack
from fasttrack.context import Context
from fasttrack.findings import Finding, Severity
from fasttrack.pipeline.options import VerifyOptions
from fasttrack.verdict import ChangedFile, EvidenceSummary, Verdict, decide

if TYPE_CHECKING:
    from fasttrack.confinement.trace.sandbox import Warm
    from fasttrack.rules.base import Rule


def _digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()



_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _changed_files(ctx: Context) -> list[ChangedFile]:
    out = []
    for c in ctx.changes:
        zone = ctx.zone_of(c.path)
        engine = ctx.engine_path(c.path)
        out.append(ChangedFile(
            path=c.path, status=c.status, old_path=c.old_path, zone=zone.name, zone_kind=zone.kind.value,
            binary=c.binary, symlink_target=c.symlink_target, submodule=c.is_submodule, old_mode=c.old_mode,
            new_mode=c.new_mode, added_lines=c.added_lines, removed_lines=c.removed_lines,
            engine_path=engine if engine != c.path else None,
        ))
    return out


def _evidence_summary(ctx: Context) -> EvidenceSummary | None:
    """What the evidence rules learned (fasttrack.evidence.summary), for renderers and the dashboard."""
    from fasttrack.evidence.summary import summarize

    try:
        return summarize(ctx)
    except Exception:
        if ctx.evidence_dir is None:
            return None
        return EvidenceSummary(bundle_path=str(ctx.evidence_dir), present=False)


def all_rules() -> list[Rule]:
    """Every rule (imported on first use, not with this module: the rules pull in numpy and every analysis,
    which a cold run imports while the effect trace's child already imports the engine stack)."""
    from fasttrack.rules import all_rules as catalogue

    return catalogue()


def judge(ctx: Context, *, pr: int | None = None) -> Verdict:
    """Gather the Context's facts (every read the rules depend on), run every rule over them and assemble
    the Verdict (a crashed rule is an error finding)."""
    from fasttrack.facts.gather import gather_facts

    ctx = gather_facts(ctx)
    rules = all_rules()
    findings: list[Finding] = []
    for rule in rules:
        findings.extend(rule.run(ctx))
    findings.sort(key=lambda f: (_RANK[f.severity], f.code, f.path or "", f.line or 0))
    m = ctx.manifest
    return Verdict(
        tool_version=fasttrack.__version__,
        verdict=decide(findings),
        mode=ctx.mode,
        model=ctx.model,
        contribution=m.contribution.name if m else None,
        repo=str(ctx.repo) if ctx.repo else None,
        base=ctx.base,
        head=ctx.head,
        merge_base=ctx.merge_base,
        pr=pr,
        policy=(str(ctx.policy_path) if ctx.judge_source is None
                else f"{ctx.policy_path} (trusted: {ctx.judge_source.source})"),
        policy_digest=_digest(ctx.policy_path),
        changed_files=_changed_files(ctx),
        findings=findings,
        blast_radius=ctx.blast_radius,
        envelope=m.envelope.model_dump(mode="json") if m else None,
        fallback=m.fallback.model_dump(mode="json") if m else None,
        evidence=_evidence_summary(ctx),
        rules_run=[r.code for r in rules],
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def run_verify(opts: VerifyOptions, *, warm: Warm | None = None) -> Verdict:
    """Build the Context and judge it: the pure API (no printing). `warm`: a prestarted trace child, handed
    to `build_context`."""
    from fasttrack.pipeline.build import build_context

    return judge(build_context(opts, warm=warm), pr=opts.pr)

