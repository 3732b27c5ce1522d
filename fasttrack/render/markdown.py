"""Markdown for fasttrack: the one base every Markdown output is built on, and `fasttrack verify --format
markdown`'s report.

The base (used here, by the GitHub comment/summary in `fasttrack.github.markdown` and by the dashboard's
`report.md`):

- **escaping**: every string that comes from a verdict is untrusted (file paths, messages quoting PR code,
  manifest fields; in the GitHub stage the whole verdict came from a PR's workflow run). `esc` makes it
  inert on one line: HTML escaped, Markdown punctuation backslash-escaped, @mentions broken; `code` shows
  it as code, still escaped; `prose` is `esc` with the message's `backtick` spans shown as code. No other
  escaping exists in the package.
- **byte budgeting**: a report is a top, sections (a head, rows, a foot) and a footer. `fit` lays them out
  within a limit in UTF-8 bytes (at least the character count GitHub limits): a section whose head does
  not fit is left out, rows are dropped from the end of a section (errors sort first) with a line saying
  how many, and a note says the report was shortened. The result never exceeds the limit.

The verify report: a headline, a findings table, for evidence collected in several parts a table of the
parts (file, machine, signature, freshness, points by TP), and collapsible details (how to fix, changed
files, blast radius, the declared envelope). A pure function of the Verdict.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fasttrack.findings import Finding, Severity
from fasttrack.sanitize import break_references, visible
from fasttrack.verdict import PartMachine, Verdict, Witness

COMMENT_LIMIT = 65_535  # PR comment bodies and check-run summaries (GitHub counts characters; bytes >= chars)
STEP_SUMMARY_LIMIT = 1024 * 1024 - 1  # $GITHUB_STEP_SUMMARY aborts the upload at 1 MiB
MIN_LIMIT = 4096
MAX_ROWS = 150  # findings, fixes and changed files listed in the verify report; the JSON verdict has all
ICON = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}
SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
_MD_PUNCT = re.compile(r"([\\`*_\[\]|~#])")  # emphasis, code, links/images, tables, strike, refs


# ------------------------------------------------------------------------------------------------ escaping


def size(text: str) -> int:
    """The size GitHub's limits are checked against, in UTF-8 bytes."""
    return len(text.encode("utf-8"))


def _one_line(text: object, limit: int) -> str:
    # sanitize.visible first: controls, bidi, zero-width characters show as escapes (so a newline becomes
    # `\x0a`, never a line break), and only plain spaces are left to fold.
    s = " ".join(visible(str(text)).split())
    return s[: limit - 1] + "…" if len(s) > limit else s


def _inert(s: str) -> str:
    s = html.escape(s, quote=False)
    s = _MD_PUNCT.sub(r"\\\1", s)
    return break_references(s)


def esc(text: object, limit: int = 600) -> str:
    """Untrusted text as inert Markdown on one line: escaped HTML and punctuation, broken @mentions."""
    return _inert(_one_line(text, limit))


def code(text: object, limit: int = 300) -> str:
    """Untrusted text shown as code (paths, module names), still inert."""
    return f"<code>{esc(text, limit)}</code>"


def prose(text: object, limit: int = 600) -> str:
    """A finding's message or fix: `esc`, except that `backtick` spans (fasttrack quotes names that way) are
    shown as code, their content escaped like the rest. Unbalanced backticks stay escaped text."""
    s = _one_line(text, limit)
    parts = s.split("`")
    if len(parts) % 2 == 0:
        return _inert(s)
    return "".join(f"<code>{_inert(p)}</code>" if i % 2 else _inert(p) for i, p in enumerate(parts))


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos; by code, path and line within each."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code, f.path or "", f.line or 0))


def finding_where(f: Finding) -> str:
    """Where a finding points, as inert Markdown: its path and line, its grid point or its evidence file."""
    if f.path:
        return code(f"{f.path}:{f.line}" if f.line else f.path)
    if f.point:
        return esc(", ".join(f"{k}={v}" for k, v in f.point.items()), 200)
    if f.evidence_file:
        return code(f.evidence_file)
    return ""


# ---------------------------------------------------------------------------------------- byte budgeting


@dataclass
class Section:
    """A part of a report: `head` and `foot` are kept whole or the section is left out; `rows` are dropped
    from the end when they do not fit (at most `max_rows` are shown in any case)."""

    head: list[str]
    rows: list[str] = field(default_factory=list)
    foot: list[str] = field(default_factory=list)
    noun: str = "rows"  # what a dropped row is, for the "... and N more" line
    max_rows: int | None = None
    more_hint: str = ""  # appended to the "... and N more" line (where the rest can be found)

    def lines(self) -> list[str]:
        """The section laid out with no byte limit (for outputs without one): the head, at most `max_rows`
        rows with a line saying how many more there are, the foot."""
        rows = self.rows if self.max_rows is None else self.rows[: self.max_rows]
        more = len(self.rows) - len(rows)
        return [*self.head, *rows, *(self.more_line(more) if more else []), *self.foot]

    def more_line(self, hidden: int) -> list[str]:
        """The line saying `hidden` rows were left out (after a blank line, which ends a table)."""
        return ["", f"_… {hidden} more {self.noun} not shown{self.more_hint}_"]


def fit(top: list[str], sections: Iterable[Section], *, limit: int, footer: list[str],
        truncated_note: list[str]) -> str:
    """Lay out a report of at most `limit` UTF-8 bytes (`limit` >= MIN_LIMIT): `top`, then each section
    that fits, then `truncated_note` when anything was left out or shortened, then `footer`."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit {limit} is below {MIN_LIMIT} bytes")
    budget = limit - size("\n".join(footer + truncated_note)) - 2
    lines: list[str] = []
    used = 0

    def cost(more: list[str]) -> int:
        return sum(size(x) + 1 for x in more)

    def fits(more: list[str], reserve: int = 0) -> bool:
        return used + cost(more) + reserve <= budget

    def put(more: list[str]) -> None:
        nonlocal used
        lines.extend(more)
        used += cost(more)

    truncated = False
    if fits(top):
        put(top)
    else:  # only absurd notes get here: keep the headline
        put(top[:2])
        truncated = True
    for sec in sections:
        more_line_room = 80
        if not fits(sec.head + sec.foot, more_line_room):
            truncated = True
            continue
        put(sec.head)
        shown = 0
        rows = sec.rows if sec.max_rows is None else sec.rows[: sec.max_rows]
        for row in rows:
            if not fits([row], cost(sec.foot) + more_line_room):
                break
            put([row])
            shown += 1
        if shown < len(sec.rows):
            truncated = truncated or shown < len(rows)
            put(sec.more_line(len(sec.rows) - shown))
        put(sec.foot)
    out = lines + (truncated_note if truncated else []) + footer
    text = "\n".join(out) + "\n"
    if size(text) > limit:  # the budget above makes this unreachable; never hand GitHub an oversize body
        raise AssertionError(f"rendered {size(text)} bytes for a {limit}-byte limit")
    return text


# ------------------------------------------------------------------------------- the verify report


def _chain(w: Witness) -> str:
    return " → ".join(f"{m}:{w.lines[i]}" if i < len(w.lines) and w.lines[i] else m
                      for i, m in enumerate(w.chain))


def _top(v: Verdict) -> list[str]:
    c = v.counts()
    icon = "✅" if v.verdict == "pass" else "❌"
    title = f"## {icon} fasttrack: **{v.verdict.upper()}**"
    if v.model:
        title += f" · model {code(v.model, 80)}"
    if v.mode == "range":
        what = f"range {code((v.base or '?')[:12], 20)}..{code((v.head or '?')[:12], 20)}"
    else:
        what = f"contribution {code(v.contribution or '?', 120)}"
    if v.pr is not None:
        what += f" · PR #{v.pr}"
    return [title, "",
            f"**{c['error']} error(s)**, {c['warning']} warning(s), {c['info']} info · {what} · "
            f"{len(v.changed_files)} changed file(s) · {len(v.rules_run)} rules", ""]


def _details(summary: str, head: list[str], rows: list[str], noun: str,
             max_rows: int | None = MAX_ROWS) -> Section:
    return Section(head=["<details>", f"<summary>{summary}</summary>", "", *head], rows=rows,
                   foot=["", "</details>", ""], noun=noun, max_rows=max_rows)


def _findings(v: Verdict) -> Section:
    if not v.findings:
        return Section(head=["No findings.", ""])
    rows = [f"| {ICON[f.severity]} | {esc(f.code, 10)} | {finding_where(f)} | {prose(f.message)} |"
            for f in sort_findings(v.findings)]
    return Section(head=["| | Code | Where | Finding |", "|---|---|---|---|"], rows=rows,
                   foot=[""], noun="findings", max_rows=MAX_ROWS, more_hint="; the JSON verdict has them all")


def _fixes(v: Verdict) -> Section | None:
    seen: dict[tuple[str, str], list[str]] = {}
    for f in sort_findings(v.findings):
        if f.fix and f.severity is not Severity.INFO:
            seen.setdefault((f.code, f.fix), []).append(f.path or "")
    if not seen:
        return None
    rows = []
    for (c, fix), paths in seen.items():
        distinct = sorted({p for p in paths if p})
        where = ", ".join(code(p) for p in distinct[:5])
        more = f" (+{len(distinct) - 5} more)" if len(distinct) > 5 else ""
        rows.append(f"- **{esc(c, 10)}**: {prose(fix)}" + (f" — {where}{more}" if where else ""))
    return _details(f"How to fix ({len(seen)})", [], rows, "fixes")


def _files(v: Verdict) -> Section | None:
    if not v.changed_files:
        return None
    rows = []
    for cf in v.changed_files:
        path = code(cf.path) if not cf.old_path else f"{code(cf.old_path)} → {code(cf.path)}"
        if cf.engine_path and cf.engine_path != cf.path:
            path += f" → {code(cf.engine_path)}"
        zone = cf.zone or "?"
        if cf.zone_kind and cf.zone_kind != zone:
            zone += f" ({cf.zone_kind})"
        rows.append(f"| {esc(cf.status.value, 20)} | {path} | {esc(zone, 120)} |")
    return _details(f"Changed files ({len(v.changed_files)})", ["| Status | Path | Zone |", "|---|---|---|"],
                    rows, "files")


def _blast(v: Verdict) -> Section:
    br = v.blast_radius
    if not br.computed:
        return _details("Blast radius: not computed", [esc(br.note or "no reason given", 2000)], [], "")
    rows = []
    for m in br.models:
        archs = f" ({esc(', '.join(m.architectures), 400)})" if m.architectures else ""
        chain = f": {code(_chain(m.witness), 1000)}" if m.witness else ""
        rows.append(f"- model **{esc(m.name, 120)}** \\[{esc(m.kind, 20)}\\]{archs}{chain}")
    for s in br.shared:
        rows.append(f"- shared {code(s.module, 200)} ({esc(s.zone or '?', 80)}): "
                    f"{code(_chain(s.witness), 1000)}")
    head = [] if rows else ["Nothing outside the model's root imports the changed code."]
    foot = ["", "</details>", ""]
    if br.note:
        foot = ["", f"<sub>{esc(br.note, 2000)}</sub>", *foot]
    sec = _details(f"Blast radius: {len(br.models)} model(s), {len(br.shared)} shared module(s)", head, rows,
                   "affected modules", max_rows=None)
    sec.foot = foot
    return sec


def _part_machine(m: PartMachine | None) -> str:
    if m is None:
        return "–"
    out = f"{m.gpu_count if m.gpu_count is not None else '?'} × {esc(m.gpu_name or '?', 80)}"
    if m.interconnect:
        out += f" ({esc(m.interconnect, 80)})"
    soft = [f"{what} {esc(value, 40)}" for what, value in (("driver", m.driver), ("torch", m.torch)) if value]
    return out + ("<br>" + ", ".join(soft) if soft else "")


def parts_section(v: Verdict) -> Section | None:
    """Which statement file (part) of the evidence came from which machine and evidences which points;
    only for a bundle in several parts (one part is the bundle itself: nothing to tell apart). The one
    parts table of every Markdown output: this report, the PR comment and the dashboard's report.md."""
    ev = v.evidence
    if ev is None or len(ev.parts) < 2:
        return None
    sig_text = {True: "valid", False: "**invalid**", None: "unsigned"}
    fresh_text = {True: "fresh", False: "**stale**", None: "–"}
    rows = []
    for p in ev.parts:
        by_tp = sorted(p.points_by_tp.items(), key=lambda kv: (len(kv[0]), kv[0]))  # numeric order
        points = ", ".join(f"tp{esc(tp, 8)}: {n}" for tp, n in by_tp) or "none"
        rows.append(f"| {code(p.file, 120)} | {_part_machine(p.machine)} | "
                    f"{esc(p.signer, 100) if p.signer else '–'} | {sig_text[p.signature_valid]} | "
                    f"{fresh_text[p.fresh]} | {esc(p.collected_at or '–', 40)} | {points} |")
    return Section(head=[f"**Evidence in {len(ev.parts)} parts** ({code(ev.bundle_path or '?', 200)}): "
                         "which machine produced which points", "",
                         "| Part | Machine | Signed by | Signature | Fresh | Collected | Points by TP |",
                         "|---|---|---|---|---|---|---|"],
                   rows=rows, foot=[""], noun="parts", max_rows=MAX_ROWS)


def gain_section(v: Verdict) -> Section | None:
    """For each claimed point: stock and candidate, their roofline fractions, stock's backends, and the
    kernels that account for most of the difference (render.gain holds the one model of it)."""
    from fasttrack.render.gain import views

    rows = []
    for g in views(v):
        speed = "–" if g.speedup is None else f"{g.speedup:.3g}x"
        kernels = "<br>".join(f"{saved:+.1f} us {code(name, 80)}" for name, _s, _c, saved in g.kernels) or "–"
        stock = "–" if g.stock_us is None else f"{g.stock_us:.1f} us"
        cand = "–" if g.candidate_us is None else f"{g.candidate_us:.1f} us"
        frac = "/".join("–" if x is None else f"{x:.0%}" for x in (g.stock_roofline, g.candidate_roofline))
        rows.append(f"| {esc(g.point, 80)} | {stock} | {esc(g.candidate, 40)} {cand} | {speed} | {frac} | "
                    f"{esc(g.backends, 120)} | {kernels} |")
    if not rows:
        return None
    return Section(head=["**Where the gain comes from** (claimed points, profiled replays)", "",
                         "| Point | Stock | Candidate | Speedup | Roofline stock/cand. | Stock backends | "
                         "Kernels by time saved |", "|---|---|---|---|---|---|---|"],
                   rows=rows, foot=[""], noun="points", max_rows=MAX_ROWS)


def _envelope(v: Verdict) -> Section | None:
    if v.envelope is None:
        return None
    # JSON strings cannot hold a newline, so no line of it can close the fence or the <details>; inside a
    # fence nothing is Markdown or HTML.
    body = json.dumps({"envelope": v.envelope, "fallback": v.fallback}, indent=2, default=str).splitlines()
    return _details("Declared envelope and fallback", ["```json", *body, "```"], [], "")


def render(verdict: Verdict, *, limit: int = COMMENT_LIMIT) -> str:
    """The verify report as Markdown of at most `limit` UTF-8 bytes (default: a PR comment's limit). Every
    string from the verdict is escaped; what does not fit is shortened or left out, and a note says so (the
    JSON verdict has everything)."""
    footer = [f"<sub>fasttrack {esc(verdict.tool_version, 40)} · verdict schema "
              f"{esc(verdict.schema_version, 10)} · policy {code(verdict.policy or '?', 200)} · "
              f"{esc(verdict.generated_at, 40)}</sub>"]
    note = ["_Shortened to fit: some rows or sections are left out; the JSON verdict (`--format json`) has "
            "everything._", ""]
    sections = [s for s in (_findings(verdict), _fixes(verdict), parts_section(verdict),
                            gain_section(verdict), _files(verdict), _blast(verdict), _envelope(verdict))
                if s is not None]
    return fit(_top(verdict), sections, limit=limit, footer=footer, truncated_note=note)
