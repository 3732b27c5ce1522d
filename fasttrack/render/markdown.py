"""The Verdict as Markdown for a PR comment or a job's step summary: a headline, a findings table and
collapsible details (fixes, changed files, blast radius, envelope). A pure function of the Verdict."""

from __future__ import annotations

import json

from fasttrack.findings import Finding, Severity
from fasttrack.verdict import Verdict, Witness

MAX_ROWS = 150
MAX_CHARS = 60_000  # GitHub comments stop at 65,536 characters
_ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}
_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def cell(text: str) -> str:
    """Text safe inside a table cell: no pipes, no newlines, no HTML."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("\r", " ").replace("\n", " "))


def code(text: str) -> str:
    """Inline code that survives backticks in the text."""
    return "`" + text.replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def _where(f: Finding) -> str:
    if f.path:
        return code(f"{f.path}:{f.line}" if f.line else f.path)
    if f.evidence_file:
        return code(f.evidence_file)
    if f.point:
        return code(", ".join(f"{k}={v}" for k, v in f.point.items()))
    return ""


def _chain(w: Witness) -> str:
    return " → ".join(f"{m}:{w.lines[i]}" if i < len(w.lines) and w.lines[i] else m
                      for i, m in enumerate(w.chain))


def _headline(v: Verdict) -> list[str]:
    c = v.counts()
    icon = "✅" if v.verdict == "pass" else "❌"
    title = f"## {icon} fasttrack: **{v.verdict.upper()}**" + (f" · model `{v.model}`" if v.model else "")
    if v.mode == "range":
        what = f"range {code((v.base or '?')[:12])}..{code((v.head or '?')[:12])}"
    else:
        what = f"contribution {code(v.contribution or '?')}"
    if v.pr is not None:
        what += f" · PR #{v.pr}"
    return [title, "",
            f"**{c['error']} error(s)**, {c['warning']} warning(s), {c['info']} info · {what} · "
            f"{len(v.changed_files)} changed file(s) · {len(v.rules_run)} rules", ""]


def _findings_table(v: Verdict) -> list[str]:
    if not v.findings:
        return ["No findings.", ""]
    ordered = sorted(v.findings, key=lambda f: (_RANK[f.severity], f.code, f.path or "", f.line or 0))
    out = ["| | Code | Where | Finding |", "|---|---|---|---|"]
    for f in ordered[:MAX_ROWS]:
        out.append(f"| {_ICON[f.severity]} | {f.code} | {_where(f)} | {cell(f.message)} |")
    if len(ordered) > MAX_ROWS:
        out.append(f"| | | | … and {len(ordered) - MAX_ROWS} more (see the JSON verdict) |")
    return [*out, ""]


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]


def _fixes(v: Verdict) -> list[str]:
    seen: dict[tuple[str, str], list[str]] = {}
    for f in v.findings:
        if f.fix and f.severity is not Severity.INFO:
            seen.setdefault((f.code, f.fix), []).append(f.path or "")
    if not seen:
        return []
    body = []
    for (c, fix), paths in list(seen.items())[:MAX_ROWS]:
        where = ", ".join(code(p) for p in sorted(set(paths))[:5] if p)
        more = f" (+{len(set(paths)) - 5} more)" if len(set(paths)) > 5 else ""
        body.append(f"- **{c}**: {cell(fix)}" + (f" — {where}{more}" if where else ""))
    return _details(f"How to fix ({len(seen)})", body)


def _files(v: Verdict) -> list[str]:
    if not v.changed_files:
        return []
    body = ["| Status | Path | Zone |", "|---|---|---|"]
    for cf in v.changed_files[:MAX_ROWS]:
        path = code(cf.path) if not cf.old_path else f"{code(cf.old_path)} → {code(cf.path)}"
        if cf.engine_path and cf.engine_path != cf.path:
            path += f" → {code(cf.engine_path)}"
        zone = cf.zone or "?"
        if cf.zone_kind and cf.zone_kind != zone:
            zone += f" ({cf.zone_kind})"
        body.append(f"| {cf.status.value} | {path} | {cell(zone)} |")
    if len(v.changed_files) > MAX_ROWS:
        body.append(f"| | … and {len(v.changed_files) - MAX_ROWS} more | |")
    return _details(f"Changed files ({len(v.changed_files)})", body)


def _blast(v: Verdict) -> list[str]:
    br = v.blast_radius
    if not br.computed:
        return _details("Blast radius: not computed", [cell(br.note or "no reason given")])
    body = []
    for m in br.models:
        archs = f" ({', '.join(m.architectures)})" if m.architectures else ""
        chain = f": {code(_chain(m.witness))}" if m.witness else ""
        body.append(f"- model **{cell(m.name)}** [{m.kind}]{cell(archs)}{chain}")
    for s in br.shared:
        body.append(f"- shared {code(s.module)} ({cell(s.zone or '?')}): {code(_chain(s.witness))}")
    if not body:
        body.append("Nothing outside the model's root imports the changed code.")
    if br.note:
        body += ["", f"<sub>{cell(br.note)}</sub>"]
    return _details(f"Blast radius: {len(br.models)} model(s), {len(br.shared)} shared module(s)", body)


def _envelope(v: Verdict) -> list[str]:
    if v.envelope is None:
        return []
    body = ["```json", json.dumps({"envelope": v.envelope, "fallback": v.fallback}, indent=2, default=str),
            "```"]
    return _details("Declared envelope and fallback", body)


def render(verdict: Verdict) -> str:
    """The Markdown report. It stays under MAX_CHARS: the detail sections that do not fit are left out (the
    JSON verdict has everything), and they are never cut in the middle."""
    footer = (f"<sub>fasttrack {verdict.tool_version} · verdict schema {verdict.schema_version} · "
              f"policy {code(verdict.policy or '?')} · {verdict.generated_at}</sub>")
    sections = [_headline(verdict), _findings_table(verdict), _fixes(verdict), _files(verdict),
                _blast(verdict), _envelope(verdict)]
    out: list[str] = []
    size = len(footer)
    left_out = 0
    for section in sections:
        text = "\n".join(section)
        if size + len(text) + 1 > MAX_CHARS:
            left_out += 1
            continue
        out.append(text)
        size += len(text) + 1
    if left_out:
        out.append(f"_{left_out} section(s) left out to fit a comment; see the JSON verdict._\n")
    return "\n".join(out) + "\n" + footer + "\n"
