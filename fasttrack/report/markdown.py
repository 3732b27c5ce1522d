"""report.md: the dashboard as Markdown (the queue, then one section per contribution), for a job summary,
a wiki or a terminal. Verdict text is untrusted and goes through `fasttrack.github.markdown.esc`/`code`:
no raw HTML, no Markdown structure, no @mentions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fasttrack.findings import Severity
from fasttrack.github.markdown import code, esc
from fasttrack.render.markdown import gain_section, parts_section
from fasttrack.report.facts import where
from fasttrack.report.model import STATUS_LABEL, STATUS_ORDER, STATUS_SYMBOL, ContributionView
from fasttrack.report.plot import label
from fasttrack.report.risk import HIGH_FROM, LOW_BELOW

MAX_FINDINGS = 30  # per contribution in Markdown; the HTML page and the JSON have the rest
MAX_GRID_CELLS = 600
MAX_CHAINS = 20
_STATE = {"ok": "✅ ok", "failed": "❌ failed", "not-run": "⚠️ not run", "human": "👤 for the reviewer"}


def _age(days: float | None) -> str:
    if days is None:
        return "unknown age"
    return f"{days:.0f} day{'s' if round(days) != 1 else ''} old" if days >= 1 else "less than a day old"


def _verdict(c: ContributionView) -> str:
    return "✅ ready for review" if c.ready else "❌ blocked"


def _evidence_cell(c: ContributionView) -> str:
    ev = c.verdict.evidence
    state = c.evidence_state
    if ev is None or not ev.present:
        return state
    parts = [state, _age(c.evidence_age_days)]
    if ev.signer:
        parts.append(f"signer {esc(ev.signer, 80)}")
    return ", ".join(parts)


def _blocking(c: ContributionView, limit: int = 300) -> str:
    b = c.blocker
    if b is None:
        return "nothing"
    text = f"**{esc(b.code, 10)}** {esc(b.message, limit)}"
    if b.fix:
        text += f" — fix: {esc(b.fix, limit)}"
    if c.other_errors:
        text += f" (+{c.other_errors} more error{'s' if c.other_errors != 1 else ''})"
    return text


def _queue(views: Sequence[ContributionView]) -> list[str]:
    out = [
        "| # | Contribution | Verdict | Risk | Evidence | Envelope | Blocking |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(views, start=1):
        g = c.grid
        env = f"{g.counts['passed']}/{g.total} passed" if g else "–"
        out.append(
            f"| {i} | [{esc(c.title, 120)}]({c.slug}.html) | {_verdict(c)} | "
            f"{c.risk.score} ({c.risk.band}) | {_evidence_cell(c)} | {env} | {_blocking(c, 200)} |"
        )
    return out


def _grid(c: ContributionView) -> list[str]:
    g = c.grid
    if g is None:
        return ["No envelope recorded in the verdict."]
    counts = ", ".join(f"{g.counts[s.value]} {STATUS_LABEL[s]}" for s in STATUS_ORDER)
    out = [f"**Envelope** ({esc(g.source, 120)}): {g.total} points: {counts}."]
    if g.total > MAX_GRID_CELLS:
        return [*out, "", f"_The grid has over {MAX_GRID_CELLS} points: see the HTML page._"]
    legend = " · ".join(f"{STATUS_SYMBOL[s]} {STATUS_LABEL[s]}" for s in STATUS_ORDER)
    out += ["", f"Legend: {legend}"]
    for panel in g.panels:
        out += [
            "",
            f"_{esc(panel.gpu, 80)} · TP{panel.tp}_ (rows: batch; columns: context"
            + (f"; one symbol per dtype: {esc(', '.join(g.dtypes), 80)}" if len(g.dtypes) > 1 else "")
            + ")",
            "",
            "| batch | " + " | ".join(f"{x:,}" for x in panel.contexts) + " |",
            "|---|" + "---|" * len(panel.contexts),
        ]
        for row in panel.rows:
            cells = [" ".join(f"{e.symbol} {e.label}" for e in cell) for cell in row.cells]
            out.append(f"| {row.batch} | " + " | ".join(cells) + " |")
    return out


def _speedups(c: ContributionView) -> list[str]:
    out: list[str] = []
    for plot in c.plots:
        out += [
            "",
            f"**Speedup** · {esc(plot.title, 120)}",
            "",
            "| batch | " + " | ".join(esc(s.name, 80) for s in plot.series) + " |",
            "|---|" + "---|" * len(plot.series),
        ]
        out += [f"| {row.batch} | " + " | ".join(row.cells) + " |" for row in plot.table]
    ev = c.verdict.evidence
    if ev and ev.claims:
        out += ["", "| Claim | Claimed | Measured [CI] | |", "|---|---|---|---|"]
        for cl in ev.claims:
            measured = f"{cl.median_ratio:.2f}×" if cl.median_ratio is not None else "–"
            if cl.ci_low is not None and cl.ci_high is not None:
                measured += f" [{cl.ci_low:.2f}, {cl.ci_high:.2f}]"
            out.append(
                f"| {esc(cl.name, 100)} | ≥ {cl.claimed:g}× | {measured} | "
                f"{'holds' if cl.holds else '**does not hold**'} |"
            )
    return out


def _measures(c: ContributionView) -> list[str]:
    out: list[str] = []
    if c.kernels:
        out += [
            "",
            "**Kernels per layer**",
            "",
            "| point | " + " | ".join(esc(x, 40) for x in c.kernels.variants) + " |",
            "|---|" + "---|" * len(c.kernels.variants),
        ]
        out += [f"| {esc(p, 120)} | " + " | ".join(vals) + " |" for p, vals in c.kernels.rows]
    bw = c.bandwidth
    if bw:
        roof = f" ({bw.roofline_bps / 1e12:.2f} TB/s measured copy bandwidth)" if bw.roofline_bps else ""
        out += [
            "",
            f"**Bandwidth as a share of the roofline**{roof}"
            + (f" · {esc(bw.common, 120)}" if bw.common else ""),
            "",
            "| point | " + " | ".join(esc(x, 40) for x in bw.variants) + " |",
            "|---|" + "---|" * len(bw.variants),
        ]
        for lab, cells in bw.rows:
            vals = [
                "–" if cell is None else f"{100 * cell.fraction:.0f}%" + (" (above!)" if cell.over else "")
                for cell in cells
            ]
            out.append(f"| {esc(lab, 120)} | " + " | ".join(vals) + " |")
    if c.evals:
        out += ["", "**Evals**", "", "| eval | value | threshold | margin | |", "|---|---|---|---|---|"]
        out += [
            f"| {esc(e.result.name, 80)} | {e.result.value:.4g} | {e.rule} {e.result.threshold:.4g} | "
            f"{100 * e.margin:.0f}% | {'pass' if e.result.passed else '**fail**'} |"
            for e in c.evals
        ]
    if c.sanitizers:
        out += [
            "",
            "**Sanitizers**: "
            + ", ".join(
                f"{esc(s.tool, 40)} {_STATE[s.state]}"
                + (f" ({s.result.errors} errors)" if s.result and s.result.errors else "")
                for s in c.sanitizers
            ),
        ]
    return out


def _blast(c: ContributionView) -> list[str]:
    br = c.verdict.blast_radius
    if not br.computed:
        return ["", f"**Blast radius**: not computed. {esc(br.note or '', 400)}"]
    out = [
        "",
        f"**Blast radius**: {len(br.changed_modules)} changed modules reach "
        f"{max(br.models_total, len(br.models))} other model units and "
        f"{max(br.shared_total, len(br.shared))} shared modules.",
    ]
    chains = [(f"model {esc(m.name, 80)}", m.witness.chain) for m in br.models if m.witness]
    chains += [(f"shared {esc(s.module, 120)}", s.witness.chain) for s in br.shared]
    for what, chain in chains[:MAX_CHAINS]:
        out.append(f"- {what}: {esc(' → '.join(chain), 500)}")
    if len(chains) > MAX_CHAINS:
        out.append(f"- … {len(chains) - MAX_CHAINS} more chains on the HTML page")
    return out


def _provenance(c: ContributionView) -> list[str]:
    v = c.verdict
    ev = v.evidence
    out = [""]
    if ev is None or not ev.present:
        out.append(
            "**Evidence**: none"
            + (f" (expected at {code(ev.bundle_path)})" if ev and ev.bundle_path else "")
            + "."
        )
    else:
        sig = {True: "valid", False: "**invalid**", None: "**unsigned**"}[ev.signature_valid]
        out.append(
            f"**Evidence**: {c.evidence_state}; signature {sig}"
            + (f" by {esc(ev.signer, 100)}" if ev.signer else "")
            + f"; collected {esc(ev.collected_at or 'at an unknown time', 40)} ({_age(c.evidence_age_days)})"
            + (
                f"; changed since: {', '.join(code(p) for p in ev.changed_since[:10])}"
                if ev.changed_since
                else ""
            )
            + "."
        )
    parts = parts_section(v)  # the verify report's table: one row per signed statement file
    if parts is not None:
        out += ["", *parts.lines()]
    gain = gain_section(v)  # the verify report's attribution table: where each claimed gain comes from
    if gain is not None:
        out += ["", *gain.lines()]
    fb = v.fallback or {}
    if fb:
        out.append("")
        out.append(
            f"**Fallback metric**: {code(str(fb.get('metric', '–')))}, guard "
            f"{code(str(fb.get('guard', '–')))}, stock path {code(str(fb.get('stock_path', '–')))}."
        )
    return out


def _findings(c: ContributionView) -> list[str]:
    fs = [f for f in c.verdict.findings if f.severity is not Severity.INFO]
    if not fs:
        return []
    out = ["", "| | Code | Where | Message | Fix |", "|---|---|---|---|---|"]
    for f in fs[:MAX_FINDINGS]:
        icon = "❌" if f.severity is Severity.ERROR else "⚠️"
        out.append(
            f"| {icon} | {esc(f.code, 10)} | {code(where(f), 200) if where(f) else ''} | "
            f"{esc(f.message, 300)} | {esc(f.fix or '', 200)} |"
        )
    if len(fs) > MAX_FINDINGS:
        out += ["", f"_… {len(fs) - MAX_FINDINGS} more errors and warnings on the HTML page._"]
    return out


def _checklist(c: ContributionView) -> list[str]:
    out = ["", "**Review checklist**", ""]
    if c.catalogue_note:
        out += [f"_Note: {esc(c.catalogue_note, 400)}._", ""]
    for item in c.checklist:
        box = "x" if item.state == "ok" else " "
        codes = f" ({', '.join(item.codes)})" if item.codes else ""
        out.append(f"- [{box}] {esc(item.title, 200)}: {_STATE[item.state]}{codes}. {esc(item.detail, 300)}")
    out.append("- [ ] Maintainer sign-off of the numerical check: name ____________ date ________")
    return out


def _section(i: int, c: ContributionView) -> list[str]:
    v = c.verdict
    meta = [f"mode {v.mode}"]
    if v.model:
        meta.append(f"model {code(v.model, 80)}")
    if v.head:
        meta.append(f"head {code(v.head[:12], 20)}")
    meta.append(f"verdict generated {esc(v.generated_at, 40)}")
    out = [
        "",
        f"## {i}. [{esc(c.title, 120)}]({c.slug}.html) — {_verdict(c)} · risk {c.risk.score} ({c.risk.band})",
        "",
        " · ".join(meta),
        "",
        f"**Blocking**: {_blocking(c)}",
        "",
        "**Risk**: "
        + (
            "; ".join(f"{esc(f.factor, 60)} +{f.points} ({esc(f.detail, 200)})" for f in c.risk.factors)
            or "nothing scored"
        )
        + ".",
        "",
    ]
    out += _grid(c) + _speedups(c) + _measures(c) + _blast(c) + _provenance(c) + _findings(c) + _checklist(c)
    return out


def render_markdown(views: Sequence[ContributionView], *, built_at: datetime, max_age_days: int) -> str:
    ready = sum(1 for c in views if c.ready)
    out = [
        "# fasttrack review queue",
        "",
        f"Built {built_at.isoformat(timespec='seconds')} · {len(views)} contribution"
        f"{'s' if len(views) != 1 else ''}: {ready} ready for review, {len(views) - ready} blocked · "
        f"risk 0–100: low below {LOW_BELOW}, high from {HIGH_FROM} · evidence older than {max_age_days} "
        "days counts as old. Read from the top: ready and low-risk first.",
        "",
    ]
    out += _queue(views)
    for i, c in enumerate(views, start=1):
        out += _section(i, c)
    out += [
        "",
        f"<sub>Speedups are over {label('stock')} and {label('compile')}, medians with bootstrap "
        "confidence intervals recomputed from raw samples by fasttrack verify.</sub>",
    ]
    return "\n".join(out) + "\n"
