"""The Verdict for a terminal (rich): what was judged, the blast radius with witness chains, the findings
grouped by severity with the fix under each, and a one-line verdict at the end."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape

from fasttrack.findings import Finding, Severity
from fasttrack.verdict import BlastRadius, Verdict, Witness

MAX_FILES_SHOWN = 40
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_ORDER = (Severity.ERROR, Severity.WARNING, Severity.INFO)


def _where(f: Finding) -> str:
    if f.path and f.line:
        return f"{f.path}:{f.line}"
    if f.path:
        return f.path
    if f.evidence_file:
        return f.evidence_file
    if f.point:
        return ", ".join(f"{k}={v}" for k, v in f.point.items())
    return ""


def _chain(w: Witness) -> str:
    parts = []
    for i, mod in enumerate(w.chain):
        line = w.lines[i] if i < len(w.lines) else None
        parts.append(f"{mod}:{line}" if line else mod)
    return " → ".join(parts)


def headline(verdict: Verdict) -> str:
    """The one-line verdict."""
    c = verdict.counts()
    what = verdict.model or "no model"
    return (f"{verdict.verdict.upper()}: {what}, {c['error']} error(s), {c['warning']} warning(s), "
            f"{c['info']} info, {len(verdict.rules_run)} rules run")


def _header(console: Console, v: Verdict) -> None:
    if v.mode == "range":
        what = f"range {v.base or '?'}..{v.head or '?'}" + (f" in {v.repo}" if v.repo else "")
    else:
        what = f"contribution {v.contribution or '?'}"
    console.print(f"[bold]fasttrack verify[/] · {escape(what)} · model [bold]{escape(v.model or '?')}[/]")
    if v.policy:
        digest = f" ({v.policy_digest[:19]}…)" if v.policy_digest else ""
        console.print(f"policy {escape(v.policy)}{digest}")


def _files(console: Console, v: Verdict) -> None:
    console.print()
    console.print(f"[bold]Changed files[/] ({len(v.changed_files)})")
    for cf in v.changed_files[:MAX_FILES_SHOWN]:
        path = cf.path if not cf.old_path else f"{cf.old_path} → {cf.path}"
        if cf.engine_path and cf.engine_path != cf.path:
            path += f" (lands at {cf.engine_path})"
        extra = [x for x, on in (("binary", cf.binary), ("submodule", cf.submodule)) if on]
        if cf.symlink_target is not None:
            extra.append(f"symlink → {cf.symlink_target}")
        zone = f"[{cf.zone or '?'}]" + (f" ({', '.join(extra)})" if extra else "")
        style = "green" if cf.zone_kind == "model-local" else "red" if cf.zone_kind in (
            "forbidden", "judge", "ineligible") else "yellow"
        console.print(f"  {cf.status.value:<12} {escape(path)} [{style}]{escape(zone)}[/]")
    if len(v.changed_files) > MAX_FILES_SHOWN:
        console.print(f"  … and {len(v.changed_files) - MAX_FILES_SHOWN} more (see --format json)")


def _blast(console: Console, br: BlastRadius) -> None:
    console.print()
    if not br.computed:
        console.print(f"[bold]Blast radius[/]: not computed ({escape(br.note or 'no reason given')})")
        return
    console.print(f"[bold]Blast radius[/]: {len(br.models)} other model unit(s), {len(br.shared)} shared "
                  f"module(s) import the changed code (→ = imports)")
    for m in br.models:
        archs = f" [{', '.join(m.architectures)}]" if m.architectures else ""
        console.print(f"  model {escape(m.name)} ({m.kind}){escape(archs)}")
        if m.witness:
            console.print(f"    {escape(_chain(m.witness))}", style="dim")
    for s in br.shared:
        console.print(f"  shared {escape(s.module)} ({escape(s.zone or '?')})")
        console.print(f"    {escape(_chain(s.witness))}", style="dim")
    if br.architectures:
        console.print(f"  architectures served by the changed code: {escape(', '.join(br.architectures))}")
    if br.note:
        console.print(f"  {escape(br.note)}", style="dim")


def _findings(console: Console, v: Verdict) -> None:
    for sev in _ORDER:
        group = [f for f in v.findings if f.severity is sev]
        if not group:
            continue
        console.print()
        console.print(f"[{_STYLE[sev]}]{sev.value.upper()}S[/] ({len(group)})")
        for f in group:
            where = _where(f)
            console.print(f"  [{_STYLE[sev]}]{f.code}[/] " + (f"[bold]{escape(where)}[/] " if where else "")
                          + escape(f.message))
            if f.fix:
                console.print(f"        fix: {escape(f.fix)}", style="dim")


def _gain(console: Console, v: Verdict) -> None:
    from fasttrack.render.gain import text_lines

    lines = text_lines(v)
    if not lines:
        return
    console.print()
    console.print("[bold]Where the gain comes from[/] (claimed points; kernels by time saved against stock)")
    for line in lines:
        console.print(f"  {escape(line)}")


def print_verdict(verdict: Verdict, console: Console) -> None:
    _header(console, verdict)
    _files(console, verdict)
    _blast(console, verdict.blast_radius)
    _gain(console, verdict)
    _findings(console, verdict)
    console.print()
    style = "bold green" if verdict.verdict == "pass" else "bold red"
    console.print(f"[{style}]{escape(headline(verdict))}[/]")


def render(verdict: Verdict, *, color: bool = False, width: int = 110) -> str:
    """The report as text (plain unless `color`)."""
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False,
                      soft_wrap=True)
    print_verdict(verdict, console)
    return buf.getvalue()
