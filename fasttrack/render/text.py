"""The Verdict for a terminal (rich), answering the README's three questions in order:

1. confinement: the changed paths (one summary line for the files in the model's own zone, each other file
   on its line), the blast radius with witness chains, and the confinement, escape and integrity findings
   (FT1xx, FT4xx);
2. envelope: what the manifest declares and the fallback, and the FT2xx findings;
3. evidence: the parts (file, signer, freshness, machine), coverage of the envelope points, the claims with
   their measured values, and the FT3xx findings;

then the one-line verdict. A finding's fix is shown once per rule (the first finding of that code), not under
every finding; `verbose` shows every changed file with where it lands and every fix line. Every piece of
untrusted text (file names, messages, fields) is shown through `fasttrack.sanitize.visible`: one line, no
control or invisible characters, valid UTF-8.
"""

from __future__ import annotations

import io
import os
from collections import Counter

from rich.console import Console
from rich.markup import escape

from fasttrack.findings import Finding, Severity
from fasttrack.render.headline import headline as headline
from fasttrack.sanitize import terminal_text, visible
from fasttrack.verdict import BlastRadius, EvidenceSummary, Verdict, Witness

MAX_FILES_SHOWN = 40
MAX_ROWS = 20
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def _v(text: object) -> str:
    """Untrusted text for rich: escaped for a terminal, then for rich's markup."""
    return escape(terminal_text(str(text)))


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


def _header(console: Console, v: Verdict) -> None:
    if v.mode == "range":
        what = f"range {v.base or '?'}..{v.head or '?'}" + (f" in {v.repo}" if v.repo else "")
    else:
        what = f"contribution {v.contribution or '?'}"
    console.print(f"[bold]fasttrack verify[/] · {_v(what)} · model [bold]{_v(v.model or '?')}[/]")
    if v.mode == "range" and v.merge_base and v.merge_base != v.base:
        console.print(f"diff taken from the merge base {_v(v.merge_base[:12])}: the base "
                      f"{_v((v.base or '?')[:12])} is not an ancestor of the head")
    if v.policy:
        digest = f" ({v.policy_digest[:19]}…)" if v.policy_digest else ""
        console.print(f"policy {_v(v.policy)}{digest}")


def _section(console: Console, title: str) -> None:
    console.print()
    console.print(f"[bold underline]{title}[/]")


def _files(console: Console, v: Verdict, verbose: bool) -> None:
    console.print(f"[bold]Changed files[/] ({len(v.changed_files)})")
    shown = v.changed_files if verbose else [cf for cf in v.changed_files if cf.zone_kind != "model-local"
                                             or cf.binary or cf.submodule or cf.symlink_target is not None
                                             or visible(cf.path) != cf.path]  # an odd name is shown
    local = [cf for cf in v.changed_files if cf not in shown]
    if local:
        zones = Counter(cf.zone or "?" for cf in local)
        lands = [cf.engine_path for cf in local if cf.engine_path]
        where = ""
        if lands:
            prefix = os.path.commonpath(lands) if len(lands) > 1 else os.path.dirname(lands[0])
            where = f", landing under {prefix}/"
        zone_text = ", ".join(f"{n} in [{z}]" for z, n in sorted(zones.items()))
        console.print(f"  [green]{_v(zone_text)}[/]{_v(where)} (--verbose lists them)")
    for cf in shown[:MAX_FILES_SHOWN if not verbose else None]:
        path = (terminal_text(cf.path) if not cf.old_path
                else f"{terminal_text(cf.old_path)} → {terminal_text(cf.path)}")
        if verbose and cf.engine_path and cf.engine_path != cf.path:
            path += f" (lands at {terminal_text(cf.engine_path)})"
        extra = [x for x, on in (("binary", cf.binary), ("submodule", cf.submodule)) if on]
        if cf.symlink_target is not None:
            extra.append(f"symlink → {terminal_text(cf.symlink_target)}")
        zone = f"[{cf.zone or '?'}]" + (f" ({', '.join(extra)})" if extra else "")
        style = "green" if cf.zone_kind == "model-local" else "red" if cf.zone_kind in (
            "forbidden", "judge", "ineligible") else "yellow"
        console.print(f"  {cf.status.value:<12} {escape(path)} [{style}]{_v(zone)}[/]")
    if not verbose and len(shown) > MAX_FILES_SHOWN:
        console.print(f"  … and {len(shown) - MAX_FILES_SHOWN} more (--verbose, or --format json)")


def _blast(console: Console, br: BlastRadius) -> None:
    if not br.computed:
        console.print(f"[bold]Blast radius[/]: not computed ({_v(br.note or 'no reason given')})")
        return
    console.print(f"[bold]Blast radius[/]: {br.models_total or len(br.models)} other model unit(s), "
                  f"{br.shared_total or len(br.shared)} shared module(s) import the changed code "
                  "(→ = imports)")
    for m in br.models:
        archs = f" [{', '.join(m.architectures)}]" if m.architectures else ""
        console.print(f"  model {_v(m.name)} ({m.kind}){_v(archs)}")
        if m.witness:
            console.print(f"    {_v(_chain(m.witness))}", style="dim")
    for s in br.shared:
        console.print(f"  shared {_v(s.module)} ({_v(s.zone or '?')})")
        console.print(f"    {_v(_chain(s.witness))}", style="dim")
    if br.architectures:
        console.print(f"  architectures served by the changed code: {_v(', '.join(br.architectures))}")
    if br.note:
        console.print(f"  {_v(br.note)}", style="dim")


def _findings(console: Console, findings: list[Finding], fixes_shown: set[str], verbose: bool) -> None:
    if not findings:
        console.print("  no findings", style="dim")
        return
    for f in sorted(findings, key=lambda f: (_RANK[f.severity], f.code)):
        where = _where(f)
        console.print(f"  [{_STYLE[f.severity]}]{f.severity.value:<7} {f.code}[/] "
                      + (f"[bold]{_v(where)}[/] " if where else "") + _v(f.message))
        if f.fix and (verbose or f.code not in fixes_shown):
            fixes_shown.add(f.code)
            console.print(f"        fix: {_v(f.fix)}", style="dim")


def _gain(console: Console, v: Verdict) -> None:
    from fasttrack.render.gain import text_lines

    lines = text_lines(v)
    if not lines:
        return
    console.print()
    console.print("[bold]Where the gain comes from[/] (claimed points; kernels by time saved against stock)")
    for line in lines:  # kernel, candidate and backend names come from the evidence: one visible line each
        console.print(f"  {_v(line)}")


def _envelope(console: Console, v: Verdict) -> None:
    if v.envelope is None:
        console.print("  no manifest: no envelope declared", style="dim")
        return
    for key, value in v.envelope.items():
        console.print(f"  {_v(key)}: {_v(_short(value))}")
    if v.fallback:
        console.print(f"  fallback: {_v(_short(v.fallback))}")


def _short(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(x)}" for k, x in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_short(x) for x in value) + "]"
    return str(value)


def _evidence(console: Console, e: EvidenceSummary | None) -> None:
    if e is None or not e.present:
        where = f" at {e.bundle_path}" if e is not None and e.bundle_path else ""
        console.print(f"  no evidence bundle{_v(where)}", style="dim")
        return
    fresh = {True: "fresh", False: "STALE", None: "freshness unknown"}[e.fresh]
    signer = e.signer or ("signature invalid" if e.signature_valid is False else "unsigned")
    console.print(f"  bundle {_v(e.bundle_path or '?')}: {fresh}, signer {_v(signer)}, collected "
                  f"{_v(e.collected_at or '?')}")
    if e.changed_since:
        console.print(f"  changed since collection: {_v(', '.join(e.changed_since[:10]))}")
    for p in e.parts:
        sig = p.signer or ("invalid signature" if p.signature_valid is False else "unsigned")
        machine = ""
        if p.machine is not None:
            machine = f", {p.machine.gpu_count or '?'} x {p.machine.gpu_name or '?'}"
        tps = ", ".join(f"TP {tp}: {n} points" for tp, n in sorted(p.points_by_tp.items()))
        console.print(f"  part {_v(p.file)}: {_v(sig)}, "
                      f"{'fresh' if p.fresh else 'STALE' if p.fresh is False else 'freshness unknown'}"
                      f"{_v(machine)}; {_v(tps or 'no points')}")
    if e.points:
        status = Counter(pt.status.value for pt in e.points)
        console.print(f"  coverage: {len(e.points)} envelope point(s): "
                      + ", ".join(f"{n} {s}" for s, n in sorted(status.items())))
    for c in e.claims[:MAX_ROWS]:
        measured = f"{c.median_ratio:.2f}x" if c.median_ratio is not None else "not measured"
        ci = f" (CI {c.ci_low:.2f}-{c.ci_high:.2f})" if c.ci_low is not None and c.ci_high is not None else ""
        point = f" at {_short(c.point)}" if c.point else ""
        mark = "[green]holds[/]" if c.holds else "[red]does not hold[/]"
        console.print(f"  claim {_v(c.name)}: {c.claimed:.2f}x claimed, {measured}{ci} measured{_v(point)}: "
                      f"{mark}")
    if len(e.claims) > MAX_ROWS:
        console.print(f"  … and {len(e.claims) - MAX_ROWS} more claims (--format json)")
    for ev in e.evals:
        console.print(f"  eval {_v(ev.name)}: {ev.value:g} (threshold {ev.threshold:g}, {ev.direction}): "
                      + ("[green]passed[/]" if ev.passed else "[red]failed[/]"))


def _family(code: str) -> str:
    return {"1": "confinement", "4": "confinement", "2": "envelope", "3": "evidence"}.get(code[2:3], "other")


def print_verdict(verdict: Verdict, console: Console, *, verbose: bool = False) -> None:
    _header(console, verdict)
    groups: dict[str, list[Finding]] = {"confinement": [], "envelope": [], "evidence": [], "other": []}
    for f in verdict.findings:
        groups[_family(f.code)].append(f)
    fixes: set[str] = set()
    _section(console, "1. Confinement")
    _files(console, verdict, verbose)
    _blast(console, verdict.blast_radius)
    _findings(console, groups["confinement"], fixes, verbose)
    _section(console, "2. Envelope")
    _envelope(console, verdict)
    _findings(console, groups["envelope"], fixes, verbose)
    _section(console, "3. Evidence")
    _evidence(console, verdict.evidence)
    _gain(console, verdict)
    _findings(console, groups["evidence"], fixes, verbose)
    if groups["other"]:
        _section(console, "Other")
        _findings(console, groups["other"], fixes, verbose)
    console.print()
    style = "bold green" if verdict.verdict == "pass" else "bold red"
    console.print(f"[{style}]{escape(headline(verdict))}[/]")


def render(verdict: Verdict, *, color: bool = False, width: int = 110, verbose: bool = False) -> str:
    """The report as text (plain unless `color`)."""
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False,
                      soft_wrap=True)
    print_verdict(verdict, console, verbose=verbose)
    return buf.getvalue()
