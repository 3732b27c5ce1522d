"""The dashboard's view of one Verdict: everything the templates and the Markdown render, computed once.

Plain data (frozen dataclasses); no HTML here. Strings from the verdict stay raw and are escaped by the
renderer (jinja2 autoescape for HTML and SVG, `fasttrack.github.markdown.esc` for Markdown).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from fasttrack.domain import Point
from fasttrack.findings import Finding, Severity
from fasttrack.render.catalogue import rules_of
from fasttrack.report.facts import (
    COMPILE_VARIANT,
    REQUIRED_SANITIZERS,
    STOCK_VARIANT,
    anti_gaming,
    blocker,
    declared_envelope,
    eval_margin,
    evidence_age_days,
    parse_time,
)
from fasttrack.report.plot import Plot, build_plots
from fasttrack.report.risk import Risk, assess
from fasttrack.ruleinfo import RulesInfo
from fasttrack.verdict import EvalResult, PointStatus, SanitizerResult, Verdict

MAX_FINDINGS_SHOWN = 1000  # per severity on a page; the verdict JSON beside the page has all of them
MAX_FILES_SHOWN = 2000
STATUS_ORDER = (PointStatus.PASSED, PointStatus.FAILED, PointStatus.STALE, PointStatus.MISSING)
STATUS_LABEL = {
    PointStatus.PASSED: "passed",
    PointStatus.FAILED: "failed",
    PointStatus.STALE: "stale",
    PointStatus.MISSING: "missing",
}
STATUS_SYMBOL = {
    PointStatus.PASSED: "✓",
    PointStatus.FAILED: "✗",
    PointStatus.STALE: "↻",
    PointStatus.MISSING: "?",
}
STATUS_MEANING = {
    PointStatus.PASSED: "kernel tests passed at this point, on evidence for this exact code",
    PointStatus.FAILED: "a kernel test failed at this point",
    PointStatus.STALE: "evidence exists but the code changed since it was collected",
    PointStatus.MISSING: "no kernel test result for this point",
}

CheckState = Literal["ok", "failed", "not-run", "human"]


# ------------------------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class CellEntry:
    dtype: str
    status: PointStatus
    tests: int
    failed: int
    max_error: float | None

    @property
    def label(self) -> str:
        return STATUS_LABEL[self.status]

    @property
    def symbol(self) -> str:
        return STATUS_SYMBOL[self.status]


_SEVERITY_OF_STATUS = {
    PointStatus.FAILED: 0,
    PointStatus.STALE: 1,
    PointStatus.MISSING: 2,
    PointStatus.PASSED: 3,
}


def worst(entries: tuple[CellEntry, ...]) -> PointStatus:
    """The status a grid cell shows when it holds several dtypes: the worst of them."""
    return min((e.status for e in entries), key=_SEVERITY_OF_STATUS.__getitem__, default=PointStatus.MISSING)


@dataclass(frozen=True)
class GridRow:
    batch: int
    cells: tuple[tuple[CellEntry, ...], ...]  # one per context, one entry per dtype


@dataclass(frozen=True)
class GridPanel:
    gpu: str
    tp: int
    contexts: tuple[int, ...]
    rows: tuple[GridRow, ...]


@dataclass(frozen=True)
class EnvelopeGrid:
    panels: tuple[GridPanel, ...]
    counts: dict[str, int]
    total: int
    dtypes: tuple[str, ...]
    source: str
    extra: tuple[str, ...] = ()  # evidence points outside the declared grid


def build_grid(v: Verdict) -> EnvelopeGrid | None:
    """The envelope (hardware x TP x batch x context, per dtype) with each point's evidence status."""
    env = declared_envelope(v)
    ev = v.evidence
    known: dict[Point, CellEntry] = {}
    if ev is not None:
        for p in ev.points:
            k = Point.from_record(p.point)
            known[k] = CellEntry(
                dtype=k.dtype, status=p.status, tests=p.tests, failed=p.failed, max_error=p.max_error
            )
    if env is not None:
        gpus = [h.name for h in env.hardware]
        tps, batches, contexts, dtypes = sorted(env.tp), env.batches(), env.contexts(), list(env.dtypes)
        source = "the manifest's declared envelope"
    elif known:
        gpus = sorted({k.gpu for k in known})
        tps = sorted({k.tp for k in known})
        batches = sorted({k.batch for k in known})
        contexts = sorted({k.context for k in known})
        dtypes = sorted({k.dtype for k in known})
        source = "the evidence's points (the verdict records no valid envelope)"
    else:
        return None
    declared = set()
    panels = []
    counts: Counter[str] = Counter()
    for gpu in gpus:
        for tp in tps:
            rows = []
            for b in batches:
                cells = []
                for c in contexts:
                    entries = []
                    for dt in dtypes:
                        k = Point(gpu=gpu, tp=tp, batch=b, context=c, dtype=dt)
                        declared.add(k)
                        entry = known.get(k) or CellEntry(
                            dtype=dt, status=PointStatus.MISSING, tests=0, failed=0, max_error=None
                        )
                        counts[entry.status.value] += 1
                        entries.append(entry)
                    cells.append(tuple(entries))
                rows.append(GridRow(batch=b, cells=tuple(cells)))
            panels.append(GridPanel(gpu=gpu, tp=tp, contexts=tuple(contexts), rows=tuple(rows)))
    extra = tuple(k.label() for k in sorted(known) if k not in declared)
    return EnvelopeGrid(
        panels=tuple(panels),
        counts={s.value: counts[s.value] for s in STATUS_ORDER},
        total=sum(counts.values()),
        dtypes=tuple(dtypes),
        source=source,
        extra=extra,
    )


# --------------------------------------------------------------------------- kernels and bandwidth


@dataclass(frozen=True)
class KernelTable:
    variants: tuple[str, ...]
    rows: tuple[tuple[str, tuple[str, ...]], ...]  # (point label, one value per variant)
    uniform: bool  # every point has the same counts: shown as one row


def _variant_order(names: set[str]) -> tuple[str, ...]:
    first = [n for n in (STOCK_VARIANT, COMPILE_VARIANT) if n in names]
    return tuple(first + sorted(names - set(first)))


def point_label(point: dict[str, str | int]) -> str:
    parts = []
    for k in ("gpu", "tp", "batch", "context", "dtype"):
        if k in point:
            parts.append(
                f"TP{point[k]}"
                if k == "tp"
                else f"{k} {point[k]}"
                if k in ("batch", "context")
                else str(point[k])
            )
    parts += [f"{k}={val}" for k, val in point.items() if k not in ("gpu", "tp", "batch", "context", "dtype")]
    return " · ".join(parts)


def _fmt_count(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}"


def build_kernels(v: Verdict) -> KernelTable | None:
    rows_in = [r for r in (v.evidence.benchmarks if v.evidence else []) if r.kernels_per_layer]
    if not rows_in:
        return None
    variants = _variant_order({n for r in rows_in for n in r.kernels_per_layer})
    labels, _ = short_labels([r.point for r in rows_in])
    rows = tuple(
        (lab, tuple(_fmt_count(r.kernels_per_layer.get(n)) for n in variants))
        for lab, r in zip(labels, rows_in, strict=True)
    )
    uniform = len({vals for _, vals in rows}) == 1
    if uniform:
        rows = ((f"all {len(rows)} benchmarked points", rows[0][1]),)
    return KernelTable(variants=variants, rows=rows, uniform=uniform)


@dataclass(frozen=True)
class BandwidthCell:
    fraction: float
    bytes_per_s: float | None
    bar: float  # bar length in px out of BAR_PX; BAR_PX / BAR_SCALE marks the roofline

    @property
    def over(self) -> bool:
        return self.fraction > 1.0


@dataclass(frozen=True)
class BandwidthTable:
    variants: tuple[str, ...]
    rows: tuple[tuple[str, tuple[BandwidthCell | None, ...]], ...]  # (point label, one cell per variant)
    roofline_bps: float | None
    common: str  # what every row shares (GPU, TP, dtype), said once

    @property
    def over(self) -> int:
        return sum(1 for _, cells in self.rows for c in cells if c is not None and c.over)


BAR_PX = 120
BAR_SCALE = (
    1.25  # the bar's full length is 125% of the roofline, so an implausible result shows past the line
)


def short_labels(points: list[dict[str, str | int]]) -> tuple[list[str], str]:
    """Point labels without the keys every point shares, and those shared keys as one label."""
    keys = [k for k in ("gpu", "tp", "dtype", "batch", "context") if any(k in p for p in points)]
    keys += sorted({k for p in points for k in p} - set(keys))
    shared = [k for k in keys if len({str(p.get(k)) for p in points}) == 1 and len(points) > 1]
    varying = [k for k in keys if k not in shared]
    if not points:
        return [], ""
    return (
        [point_label({k: p[k] for k in varying if k in p}) for p in points],
        point_label({k: points[0][k] for k in shared if k in points[0]}),
    )


def build_bandwidth(v: Verdict) -> BandwidthTable | None:
    ev = v.evidence
    rows_in = [r for r in (ev.benchmarks if ev else []) if r.bandwidth_fraction]
    if ev is None or not rows_in:
        return None
    raw = ev.environment.get("copy_bandwidth_bytes_per_s")
    roof = float(raw) if isinstance(raw, int | float) and raw > 0 else None
    variants = _variant_order({n for r in rows_in for n in r.bandwidth_fraction})
    labels, common = short_labels([r.point for r in rows_in])
    rows = []
    for lab, r in zip(labels, rows_in, strict=True):
        cells = []
        for name in variants:
            f = r.bandwidth_fraction.get(name)
            if f is not None and not math.isfinite(f):
                f = None  # a broken figure is shown as absent; FT311 judges the evidence itself
            cells.append(
                None
                if f is None
                else BandwidthCell(
                    fraction=f,
                    bytes_per_s=f * roof if roof else None,
                    bar=round(min(max(f, 0.0), BAR_SCALE) / BAR_SCALE * BAR_PX, 1),
                )
            )
        rows.append((lab, tuple(cells)))
    return BandwidthTable(variants=variants, rows=tuple(rows), roofline_bps=roof, common=common)


# ------------------------------------------------------------------------ evals, sanitizers, checks


@dataclass(frozen=True)
class EvalView:
    result: EvalResult
    margin: float

    @property
    def rule(self) -> str:
        return "≤" if self.result.direction == "max" else "≥"


@dataclass(frozen=True)
class SanitizerView:
    tool: str
    state: CheckState
    result: SanitizerResult | None


def build_sanitizers(v: Verdict) -> tuple[SanitizerView, ...]:
    ev = v.evidence
    if ev is None or not ev.present:
        return ()
    out = []
    seen = set()
    for s in ev.sanitizers:
        seen.add(s.tool)
        state: CheckState = "not-run" if not s.ran else "failed" if (s.errors or 0) > 0 else "ok"
        out.append(SanitizerView(tool=s.tool, state=state, result=s))
    for tool in sorted(REQUIRED_SANITIZERS - seen):
        out.append(SanitizerView(tool=tool, state="not-run", result=None))
    return tuple(out)


@dataclass(frozen=True)
class CheckItem:
    title: str
    state: CheckState
    detail: str
    codes: tuple[str, ...] = ()
    signer: str | None = None


NUMERICAL_GROUP = "numerical"


def _signer(v: Verdict) -> str | None:
    ev = v.evidence
    return ev.signer if ev is not None and ev.present and ev.signature_valid is not None else None


def _numerical_detail(v: Verdict, detail: str) -> str:
    """Who vouches for the numerical evidence, then the group's own detail."""
    ev = v.evidence
    if ev is None or not ev.present:
        who = "nobody yet: there is no evidence bundle"
    elif ev.signature_valid:
        who = f"signed by {ev.signer or 'an allowed signer'} (signature verified)"
    elif ev.signature_valid is False:
        who = f"claimed by {ev.signer or 'an unknown key'}, but the signature does not verify"
    else:
        who = "nobody: the evidence is unsigned"
    return f"{who}; {detail}" if detail else who


OTHER_CHECK = "Every other rule"


def _group_state(v: Verdict, rules: RulesInfo, group: str) -> tuple[CheckState, tuple[str, ...]]:
    def in_group(code: str) -> bool:
        g = rules.group_of(code)
        return g is not None and g.id == group

    failing = sorted({f.code for f in v.findings if f.severity is Severity.ERROR and in_group(f.code)})
    if failing:
        return "failed", tuple(failing)
    if not any(in_group(c) for c in v.rules_run):
        return "not-run", ()
    return "ok", ()


def build_checklist(v: Verdict) -> tuple[CheckItem, ...]:
    """The tool-decided items are the checklist groups of the verdict's own rule metadata, in its order; an
    error whose code that metadata does not hold fails a catch-all item (never hidden behind an "ok")."""
    rules = rules_of(v).info
    items = []
    for g in rules.groups:
        state, codes = _group_state(v, rules, g.id)
        detail = _numerical_detail(v, g.detail) if g.id == NUMERICAL_GROUP else g.detail
        signer = _signer(v) if g.id == NUMERICAL_GROUP else None
        items.append(CheckItem(title=g.title, state=state, detail=detail, codes=codes, signer=signer))
    stray = sorted({f.code for f in v.findings
                    if f.severity is Severity.ERROR and rules.group_of(f.code) is None})
    if stray:
        items.append(CheckItem(title=OTHER_CHECK, state="failed",
                               detail="errors of rules the verdict's catalogue does not hold",
                               codes=tuple(stray)))
    items += [
        CheckItem(
            "Blast radius read: every witness import chain is expected",
            "human",
            "the chains below show how other code reaches the change",
        ),
        CheckItem(
            "Fallback is visible in production",
            "human",
            "the fallback counter is scraped and alerted on; outside the envelope the stock path runs",
        ),
        CheckItem("Kernel source read", "human", "launch bounds, guards, and the envelope checks in code"),
    ]
    return tuple(items)


# ---------------------------------------------------------------------------------- the contribution


@dataclass(frozen=True)
class ContributionView:
    slug: str
    title: str
    kind: str  # "PR" or "contribution"
    origin: str
    verdict: Verdict
    risk: Risk
    blocker: Finding | None
    other_errors: int
    counts: dict[str, int]
    grid: EnvelopeGrid | None
    plots: tuple[Plot, ...]
    kernels: KernelTable | None
    bandwidth: BandwidthTable | None
    evals: tuple[EvalView, ...]
    sanitizers: tuple[SanitizerView, ...]
    checklist: tuple[CheckItem, ...]
    findings: dict[str, tuple[Finding, ...]]  # severity -> shown findings
    hidden: dict[str, int]  # severity -> findings not shown
    anti_gaming: tuple[Finding, ...]
    evidence_age_days: float | None
    superseded: int = 0
    generated: datetime | None = field(default=None)
    catalogue_note: str | None = None  # the verdict records no rule metadata: today's stands in (why)

    @property
    def ready(self) -> bool:
        return self.verdict.verdict == "pass"

    @property
    def status(self) -> str:
        return "ready for review" if self.ready else "blocked"

    @property
    def lines_changed(self) -> tuple[int, int]:
        files = self.verdict.changed_files
        return sum(f.added_lines or 0 for f in files), sum(f.removed_lines or 0 for f in files)

    @property
    def evidence_state(self) -> str:
        ev = self.verdict.evidence
        if ev is None:
            return "n/a" if self.verdict.envelope is None else "missing"
        if not ev.present:
            return "missing"
        if ev.fresh is False:
            return "stale"
        if ev.signature_valid is False:
            return "bad signature"
        if ev.signature_valid is None:
            return "unsigned"
        return "fresh"


def identity(v: Verdict) -> tuple[str, str, str]:
    """(dedup key, title, kind) of a verdict: a PR by number (and repo), else the contribution or model."""
    if v.pr is not None:
        name = v.contribution or v.model
        return f"pr:{v.repo or ''}:{v.pr}", f"PR #{v.pr}" + (f" · {name}" if name else ""), "PR"
    name = v.contribution or v.model or (v.head[:12] if v.head else "unnamed")
    return f"c:{v.mode}:{name}:{v.head or ''}", name, "contribution"


def slugify(text: str) -> str:
    s = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")
    return s[:60] or "item"


def build_view(
    v: Verdict, *, slug: str, origin: str, now: datetime, max_age_days: int, superseded: int = 0
) -> ContributionView:
    _, title, kind = identity(v)
    rules = rules_of(v)
    block = blocker(v.findings, rules.info)
    counts = v.counts()
    by_sev: dict[str, list[Finding]] = {s.value: [] for s in Severity}
    for f in v.findings:
        by_sev[f.severity.value].append(f)
    shown = {k: tuple(fs[:MAX_FINDINGS_SHOWN]) for k, fs in by_sev.items()}
    hidden = {k: max(0, len(fs) - MAX_FINDINGS_SHOWN) for k, fs in by_sev.items()}
    ev = v.evidence
    return ContributionView(
        slug=slug,
        title=title,
        kind=kind,
        origin=origin,
        verdict=v,
        risk=assess(v, now=now, max_age_days=max_age_days),
        blocker=block,
        other_errors=max(0, counts["error"] - (1 if block else 0)),
        counts=counts,
        grid=build_grid(v),
        plots=tuple(build_plots(ev.benchmarks, ev.claims)) if ev else (),
        kernels=build_kernels(v),
        bandwidth=build_bandwidth(v),
        evals=tuple(EvalView(e, eval_margin(e)) for e in ev.evals) if ev else (),
        sanitizers=build_sanitizers(v),
        checklist=build_checklist(v),
        findings=shown,
        hidden=hidden,
        anti_gaming=tuple(anti_gaming(v.findings, rules.info)),
        catalogue_note=rules.note,
        evidence_age_days=evidence_age_days(ev, now) if ev else None,
        superseded=superseded,
        generated=parse_time(v.generated_at),
    )


def queue_order(views: list[ContributionView]) -> list[ContributionView]:
    """Ready first, then by risk (low first), then fewer errors, then the title."""
    return sorted(views, key=lambda c: (not c.ready, c.risk.score, c.counts["error"], c.title.lower()))
