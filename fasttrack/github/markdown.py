"""Markdown for the PR comment, the check run summary and the step summary, within GitHub's limits.

Every string that comes from the verdict is untrusted (stage 1 ran the PR's workflow), so it is escaped:
no raw HTML, no Markdown structure, no @mentions. Sizes are measured in UTF-8 bytes, which is at least
the character count GitHub limits, so a body that fits here fits there. When the report is too long,
rows are dropped from the end of each section (errors come first) and a line says how many and where
the full report is. The escaping (`esc`, `code`) and the byte budgeting (`Section`, `fit`) are the shared
base in `fasttrack.render.markdown`, which `fasttrack verify --format markdown` uses too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from fasttrack.render.catalogue import failing_groups, rules_of
from fasttrack.render.markdown import (
    COMMENT_LIMIT,
    ICON,
    MIN_LIMIT,
    STEP_SUMMARY_LIMIT,
    Section,
    code,
    esc,
    finding_where,
    fit,
    parts_section,
    prose,
    size,
    sort_findings,
)
from fasttrack.verdict import Verdict

# The escaping and byte budgeting live in fasttrack.render.markdown (one base for every Markdown output);
# they are re-exported here for the publisher, the dashboard and their tests.
__all__ = ["COMMENT_LIMIT", "MIN_LIMIT", "STEP_SUMMARY_LIMIT", "STICKY_MARKER", "Outcome", "Section", "code",
           "esc", "headline", "prose", "render", "sections", "size", "sort_findings"]

STICKY_MARKER = "<!-- fasttrack:sticky-comment -->"


@dataclass(frozen=True)
class Outcome:
    """What the publisher concluded: the verdict's own answer, and whether it can be trusted."""

    eligible: bool
    trusted: bool = True
    notes: tuple[str, ...] = ()  # already-safe Markdown lines explaining distrust or skips


def headline(verdict: Verdict, outcome: Outcome) -> str:
    if outcome.eligible:
        return "✅ eligible for fast-track"
    if verdict.verdict == "pass" and not outcome.trusted:
        return "⛔ blocked: the verdict cannot be trusted"
    c = verdict.counts()
    return f"❌ blocked: {c['error']} error{'s' if c['error'] != 1 else ''}"


def sections(verdict: Verdict, outcome: Outcome) -> list[Section]:
    out: list[Section] = []
    findings = sort_findings(verdict.findings)
    rules = rules_of(verdict)
    if findings:
        failing = failing_groups(verdict, rules.info)
        head = ["", "#### Findings", ""]
        if failing:  # the checklist groups come from the verdict's own rule metadata
            head += ["Failing checks: " + " · ".join(f"**{esc(title, 120)}** ({esc(', '.join(codes), 200)})"
                                                     for title, codes in failing), ""]
        if rules.note:
            head += [f"_Note: {esc(rules.note, 400)}._", ""]
        out.append(Section(
            head=[*head, "| | Code | Where | Message | Fix |", "|---|---|---|---|---|"],
            rows=[f"| {ICON[f.severity]} | {esc(f.code, 10)} | {finding_where(f)} | {prose(f.message)} | "
                  f"{prose(f.fix or '')} |" for f in findings],
            noun="findings"))
        failed = sorted({f.code for f in findings if f.severity.value != "info"})
        docs = [f"- {esc(c, 10)}: {prose(info.summary)} {esc('Why: ' + info.doc.why, 300)}"
                for c in failed if (info := rules.info.rule(c)) is not None]
        if docs:  # the rules' docs as the judging run declared them (the verdict's own metadata)
            out.append(Section(head=["", "<details><summary>The rules behind these findings</summary>", ""],
                               rows=docs, foot=["", "</details>"], noun="rules"))
    br = verdict.blast_radius
    blast_rows: list[str] = []
    for m in br.models:
        chain = " → ".join(m.witness.chain) if m.witness else ""
        blast_rows.append(f"| model | {esc(m.name, 120)} | {code(m.module, 200)} | {esc(chain, 400)} |")
    for s in br.shared:
        blast_rows.append(f"| shared | {esc(s.zone or '', 120)} | {code(s.module, 200)} | "
                          f"{esc(' → '.join(s.witness.chain), 400)} |")
    if br.computed or br.note:
        head = ["", "#### Blast radius", ""]
        if br.note:
            head.append(f"_{esc(br.note, 400)}_")
            head.append("")
        if blast_rows:
            head += ["| Kind | Name | Module | Witness import chain |", "|---|---|---|---|"]
        elif br.computed:
            head.append("No model or shared module outside the contribution imports the changed code.")
        out.append(Section(head=head, rows=blast_rows, noun="affected modules"))
    ev = verdict.evidence
    if ev is not None:
        facts = [f"present: **{'yes' if ev.present else 'no'}**"]
        if ev.fresh is not None:
            facts.append(f"fresh: **{'yes' if ev.fresh else 'no'}**")
        if ev.signature_valid is not None:
            facts.append(f"signature: **{'valid' if ev.signature_valid else 'invalid'}**"
                         + (f" ({esc(ev.signer, 100)})" if ev.signer else ""))
        if ev.points:
            passed = sum(1 for p in ev.points if p.status.value == "passed")
            facts.append(f"envelope points passed: **{passed}/{len(ev.points)}**")
        rows = [f"| {esc(c.name, 100)} | {c.claimed:g}× | "
                + (f"{c.median_ratio:.3g}×" if c.median_ratio is not None else "–")
                + (f" [{c.ci_low:.3g}, {c.ci_high:.3g}]" if c.ci_low is not None and c.ci_high is not None
                   else "")
                + f" | {'holds' if c.holds else '**does not hold**'} |" for c in ev.claims]
        head = ["", "#### Evidence", "", " · ".join(facts)]
        if rows:
            head += ["", "| Claim | Claimed | Measured (95% CI) | |", "|---|---|---|---|"]
        out.append(Section(head=head, rows=rows, noun="claims"))
    parts = parts_section(verdict)  # after the findings, so errors still come first when cut to fit
    if parts is not None:  # a blank line first: a line right after a table would be one of its rows
        out.append(replace(parts, head=["", *parts.head], foot=[]))  # no trailing blank, like the others
    if verdict.changed_files:
        out.append(Section(
            head=["", f"<details><summary>Changed files ({len(verdict.changed_files)})</summary>", "",
                  "| Path | Status | Zone |", "|---|---|---|"],
            rows=[f"| {code(cf.path)}"
                  + (f" (from {code(cf.old_path)})" if cf.old_path else "")
                  + f" | {esc(cf.status.value, 20)} | {esc(cf.zone or '', 80)} |"
                  for cf in verdict.changed_files],
            foot=["", "</details>"], noun="files"))
    return out


def render(verdict: Verdict, outcome: Outcome, *, limit: int, report_url: str | None = None,
           marker: str | None = None) -> str:
    """The report as Markdown of at most `limit` UTF-8 bytes (`limit` >= MIN_LIMIT)."""
    c = verdict.counts()
    top = [marker] if marker else []
    top.append(f"### fasttrack: {headline(verdict, outcome)}")
    if outcome.notes:
        top.append("")
        top += [f"> {n}" for n in outcome.notes]
    meta = []
    if verdict.head:
        meta.append(f"head {code(verdict.head[:12], 20)}")
    if verdict.base:
        meta.append(f"base {code(verdict.base[:12], 20)}")
    if verdict.model:
        meta.append(f"model {code(verdict.model, 80)}")
    if verdict.contribution:
        meta.append(f"contribution {code(verdict.contribution, 120)}")
    if verdict.policy:
        meta.append(f"policy {code(verdict.policy, 120)}")
    meta.append(f"fasttrack {esc(verdict.tool_version, 40)}")
    top += ["", " · ".join(meta), "",
            f"**{c['error']}** errors · **{c['warning']}** warnings · **{c['info']}** notes · "
            f"{len(verdict.changed_files)} files changed · {len(verdict.rules_run)} rules run"]
    safe = report_url is not None and _safe_url(report_url)
    link = f"[the workflow run]({report_url})" if safe else "the verdict artifact"
    footer = ["", f"<sub>Full report: {link}. Generated {esc(verdict.generated_at, 40)}.</sub>"]
    truncated_note = ["", f"**Truncated to fit GitHub's limit.** The full report is in {link}."]

    return fit(top, sections(verdict, outcome), limit=limit, footer=footer, truncated_note=truncated_note)


def _safe_url(url: str) -> bool:
    return bool(re.match(r"^https?://[^\s()<>\[\]]+$", url)) and len(url) < 2000
