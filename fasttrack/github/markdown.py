"""Markdown for the PR comment, the check run summary and the step summary, within GitHub's limits.

Every string that comes from the verdict is untrusted (stage 1 ran the PR's workflow), so it is escaped:
no raw HTML, no Markdown structure, no @mentions. Sizes are measured in UTF-8 bytes, which is at least
the character count GitHub limits, so a body that fits here fits there. When the report is too long,
rows are dropped from the end of each section (errors come first) and a line says how many and where
the full report is.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fasttrack.findings import Finding, Severity
from fasttrack.verdict import Verdict

COMMENT_LIMIT = 65_535  # PR comment bodies and check-run summaries
STEP_SUMMARY_LIMIT = 1024 * 1024 - 1  # $GITHUB_STEP_SUMMARY aborts the upload at 1 MiB
MIN_LIMIT = 4096
STICKY_MARKER = "<!-- fasttrack:sticky-comment -->"

_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
_ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~#])")  # emphasis, code, links/images, tables, strike, refs


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def esc(text: object, limit: int = 600) -> str:
    """Untrusted text as inert Markdown on one line: escaped HTML and punctuation, broken @mentions."""
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    s = html.escape(s, quote=False)
    s = _MD_PUNCT.sub(r"\\\1", s)
    return s.replace("@", "@\u200b")


def code(text: object, limit: int = 300) -> str:
    """Untrusted text shown as code (paths, module names), still inert."""
    return f"<code>{esc(text, limit)}</code>"


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.code, f.path or "", f.line or 0))


@dataclass
class Section:
    head: list[str]
    rows: list[str] = field(default_factory=list)
    foot: list[str] = field(default_factory=list)
    noun: str = "rows"  # what a dropped row is, for the "... and N more" line


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


def _finding_where(f: Finding) -> str:
    if f.path:
        return code(f"{f.path}:{f.line}" if f.line else f.path)
    if f.point:
        return esc(", ".join(f"{k}={v}" for k, v in f.point.items()), 200)
    if f.evidence_file:
        return code(f.evidence_file)
    return ""


def sections(verdict: Verdict, outcome: Outcome) -> list[Section]:
    out: list[Section] = []
    findings = sort_findings(verdict.findings)
    if findings:
        out.append(Section(
            head=["", "#### Findings", "", "| | Code | Where | Message | Fix |", "|---|---|---|---|---|"],
            rows=[f"| {_ICON[f.severity]} | {esc(f.code, 10)} | {_finding_where(f)} | {esc(f.message)} | "
                  f"{esc(f.fix or '')} |" for f in findings],
            noun="findings"))
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
    if limit < MIN_LIMIT:
        raise ValueError(f"limit {limit} is below {MIN_LIMIT} bytes")
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

    budget = limit - size("\n".join(footer + truncated_note)) - 2
    lines: list[str] = []
    used = 0

    def fits(more: list[str], reserve: int = 0) -> bool:
        return used + sum(size(x) + 1 for x in more) + reserve <= budget

    def put(more: list[str]) -> None:
        nonlocal used
        lines.extend(more)
        used += sum(size(x) + 1 for x in more)

    truncated = False
    if fits(top):
        put(top)
    else:  # only absurd notes get here: keep the headline
        put(top[:2])
        truncated = True
    for sec in sections(verdict, outcome):
        more_line_room = 80
        if not fits(sec.head + sec.foot, more_line_room):
            truncated = True
            continue
        put(sec.head)
        shown = 0
        for row in sec.rows:
            if not fits([row], sum(size(x) + 1 for x in sec.foot) + more_line_room):
                break
            put([row])
            shown += 1
        if shown < len(sec.rows):
            truncated = True
            put(["", f"_… {len(sec.rows) - shown} more {sec.noun} not shown_"])  # a blank line ends a table
        put(sec.foot)
    out = lines + (truncated_note if truncated else []) + footer
    text = "\n".join(out) + "\n"
    if size(text) > limit:  # the budget above makes this unreachable; never hand GitHub an oversize body
        raise AssertionError(f"rendered {size(text)} bytes for a {limit}-byte limit")
    return text


def _safe_url(url: str) -> bool:
    return bool(re.match(r"^https?://[^\s()<>\[\]]+$", url)) and len(url) < 2000
