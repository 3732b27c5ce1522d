"""Speedup plots as SVG, computed at build time: speedup of each candidate over stock and over torch.compile
against batch size, with confidence intervals as whiskers, one plot per (GPU, TP, dtype, context).

The geometry is computed here (plain numbers and strings); `speedup.svg.j2` draws it with autoescaping, so
no verdict text reaches the SVG unescaped. No JavaScript: each marker carries a <title> tooltip, and the
page prints the same values as a table under the plot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fasttrack.report.facts import COMPILE_VARIANT, REFERENCE_VARIANTS, STOCK_VARIANT
from fasttrack.verdict import BenchmarkRow, ClaimResult

WIDTH = 600
HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 46
# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), with a dash pattern and a
# marker shape per series so the plot also reads in grey.
PALETTE = ("#0072B2", "#CC79A7", "#009E73", "#E69F00", "#56B4E9", "#D55E00", "#000000")
DASHES = ("", "6 4", "2 3", "8 3 2 3")
MARKERS = ("circle", "square", "diamond", "triangle")


@dataclass(frozen=True)
class PlotPoint:
    batch: int
    value: float
    ci: tuple[float, float] | None
    x: float
    y: float
    y_low: float | None
    y_high: float | None


@dataclass(frozen=True)
class Series:
    name: str
    candidate: str
    baseline: str
    color: str
    dash: str
    marker: str
    points: tuple[PlotPoint, ...]
    path: str  # SVG path data joining the points
    has_ci: bool


@dataclass(frozen=True)
class ClaimMark:
    name: str
    claimed: float
    holds: bool
    x: float
    y: float
    label_x: float
    anchor: str  # "start" (label right of the mark) or "end" (left of it, near the right edge)


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class TableRow:
    batch: int
    cells: tuple[str, ...]  # one per series, "1.93× [1.90, 1.97]" or "–"


@dataclass(frozen=True)
class Plot:
    key: str
    title: str
    width: int
    height: int
    left: int
    top: int
    inner_w: int
    inner_h: int
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    parity_y: float
    series: tuple[Series, ...]
    claims: tuple[ClaimMark, ...]
    table: tuple[TableRow, ...]
    log_x: bool
    notes: tuple[str, ...]


def label(baseline: str) -> str:
    return "torch.compile" if baseline == COMPILE_VARIANT else baseline


def _num(v: str | int | None) -> int | None:
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0, step, 2*step, ... reaching at least `top`, with step 1, 2 or 5 times a power of ten."""
    top = max(top, 1e-9)
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _fmt_tick(v: float) -> str:
    return f"{v:g}×"


def fmt_ratio(value: float, ci: tuple[float, float] | None) -> str:
    text = f"{value:.2f}×"
    return text + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _finite_ci(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return ci if ci is not None and all(math.isfinite(x) for x in ci) else None


@dataclass(frozen=True)
class _Raw:
    candidate: str
    baseline: str
    values: dict[int, tuple[float, tuple[float, float] | None]]


def _series_for(rows: list[BenchmarkRow]) -> list[_Raw]:
    """Candidate-over-stock and candidate-over-compile values per batch for one group of rows."""
    candidates = sorted(
        {v for r in rows for v in r.speedup if v not in REFERENCE_VARIANTS}
        | {v for r in rows for v in r.median_us if v not in REFERENCE_VARIANTS}
    )
    out: list[_Raw] = []
    for cand in candidates:
        for base in (STOCK_VARIANT, COMPILE_VARIANT):
            values: dict[int, tuple[float, tuple[float, float] | None]] = {}
            for r in rows:
                b = _num(r.point.get("batch"))
                if b is None:
                    continue
                if base == STOCK_VARIANT and cand in r.speedup:
                    values[b] = (r.speedup[cand], _finite_ci(r.speedup_ci.get(cand)))
                elif base != STOCK_VARIANT and cand in r.speedup_over.get(base, {}):
                    values[b] = (
                        r.speedup_over[base][cand],
                        _finite_ci(r.speedup_over_ci.get(base, {}).get(cand)),
                    )
                elif base in r.median_us and cand in r.median_us and r.median_us[cand] > 0:
                    values[b] = (r.median_us[base] / r.median_us[cand], None)  # ratio of medians, no CI
            if values:
                out.append(_Raw(cand, base, values))
    return out


def group_key(point: dict[str, str | int]) -> tuple[str, int, str, int]:
    return (
        str(point.get("gpu", "?")),
        _num(point.get("tp")) or 1,
        str(point.get("dtype", "")),
        _num(point.get("context")) or 0,
    )


def _title(key: tuple[str, int, str, int]) -> str:
    gpu, tp, dtype, context = key
    parts = [gpu, f"TP{tp}"] + ([dtype] if dtype else []) + [f"context {context:,}"]
    return " · ".join(parts)


def _claim_matches(claim: ClaimResult, key: tuple[str, int, str, int]) -> bool:
    if not claim.point:
        return False
    ck = group_key(claim.point)
    # A claim without a dtype matches any dtype of the same GPU/TP/context.
    return ck[0] == key[0] and ck[1] == key[1] and ck[3] == key[3] and (not ck[2] or ck[2] == key[2])


def build_plots(rows: Iterable[BenchmarkRow], claims: Iterable[ClaimResult] = ()) -> list[Plot]:
    groups: dict[tuple[str, int, str, int], list[BenchmarkRow]] = {}
    for r in rows:
        groups.setdefault(group_key(r.point), []).append(r)
    claim_list = list(claims)
    plots = []
    for key in sorted(groups):
        plot = _plot(key, groups[key], [c for c in claim_list if _claim_matches(c, key)])
        if plot is not None:
            plots.append(plot)
    return plots


def _plot(key: tuple[str, int, str, int], rows: list[BenchmarkRow], claims: list[ClaimResult]) -> Plot | None:
    raws = _series_for(rows)
    if not raws:
        return None
    batches = sorted({b for raw in raws for b in raw.values})
    claim_batches = [(c, _num(c.point.get("batch"))) for c in claims]
    placed = [(c, b) for c, b in claim_batches if b is not None and b in batches]
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    log_x = len(batches) > 1 and batches[0] > 0 and batches[-1] / batches[0] >= 4
    lo, hi = (math.log2(batches[0]), math.log2(batches[-1])) if log_x else (batches[0], batches[-1])

    def x_of(b: int) -> float:
        if len(batches) == 1:
            return LEFT + inner_w / 2
        pos = math.log2(b) if log_x else b
        pad = 0.04 * inner_w
        return LEFT + pad + (pos - lo) / (hi - lo) * (inner_w - 2 * pad)

    tops = [1.0]
    for raw in raws:
        for value, ci in raw.values.values():
            tops.append(ci[1] if ci else value)
    tops += [c.claimed for c, _ in placed]
    finite = [t for t in tops if math.isfinite(t)]
    y_ticks_vals = nice_ticks(max(finite) * 1.08)
    y_top = y_ticks_vals[-1]

    def y_of(v: float) -> float:
        v = min(max(v, 0.0), y_top)
        return TOP + inner_h - v / y_top * inner_h

    series = []
    for i, raw in enumerate(raws):
        pts = []
        for b in sorted(raw.values):
            value, ci = raw.values[b]
            if not math.isfinite(value):
                continue
            pts.append(
                PlotPoint(
                    batch=b,
                    value=value,
                    ci=ci,
                    x=round(x_of(b), 2),
                    y=round(y_of(value), 2),
                    y_low=round(y_of(ci[0]), 2) if ci else None,
                    y_high=round(y_of(ci[1]), 2) if ci else None,
                )
            )
        path = " ".join(f"{'M' if j == 0 else 'L'}{p.x:.2f},{p.y:.2f}" for j, p in enumerate(pts))
        series.append(
            Series(
                name=f"{raw.candidate} over {label(raw.baseline)}",
                candidate=raw.candidate,
                baseline=raw.baseline,
                color=PALETTE[i % len(PALETTE)],
                dash=DASHES[i % len(DASHES)],
                marker=MARKERS[i % len(MARKERS)],
                points=tuple(pts),
                path=path,
                has_ci=any(p.ci for p in pts),
            )
        )

    marks = []
    for c, b in placed:
        x = x_of(b)
        right = x > LEFT + 0.6 * inner_w
        marks.append(
            ClaimMark(
                name=c.name,
                claimed=c.claimed,
                holds=c.holds,
                x=round(x, 2),
                y=round(y_of(c.claimed), 2),
                label_x=round(x - 17 if right else x + 17, 2),
                anchor="end" if right else "start",
            )
        )
    table = []
    for b in batches:
        cells = []
        for raw in raws:
            got = raw.values.get(b)
            cells.append(fmt_ratio(*got) if got else "–")
        table.append(TableRow(batch=b, cells=tuple(cells)))
    notes = []
    if any(not s.has_ci for s in series):
        notes.append(
            "Series without whiskers have no recorded confidence interval: their values are the "
            "ratio of the two variants' medians."
        )
    off = [c.name for c, b in claim_batches if b is None or b not in batches]
    if off:
        notes.append(f"Claims at batch sizes without a benchmark here: {', '.join(off)}.")
    return Plot(
        key="-".join(str(k) for k in key),
        title=_title(key),
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        inner_w=inner_w,
        inner_h=inner_h,
        x_ticks=tuple(Tick(round(x_of(b), 2), str(b)) for b in batches),
        y_ticks=tuple(Tick(round(y_of(v), 2), _fmt_tick(v)) for v in y_ticks_vals),
        parity_y=round(y_of(1.0), 2),
        series=tuple(series),
        claims=tuple(marks),
        table=tuple(table),
        log_x=log_x,
        notes=tuple(notes),
    )
