"""Where the gain comes from: for each claimed point, stock's and each candidate's medians and roofline
fractions, the backend stock ran per stage, and the kernels that account for most of the difference (from
the verdict's `BenchmarkRow`s, which the evidence summary fills from the profiled replays). One model of the
table, rendered as plain text lines (terminal) and as Markdown rows."""

from __future__ import annotations

from dataclasses import dataclass

from fasttrack.domain import Point
from fasttrack.verdict import BenchmarkRow, Verdict

MAX_GAIN_ROWS = 5


@dataclass(frozen=True)
class GainView:
    point: str
    candidate: str
    stock_us: float | None
    candidate_us: float | None
    speedup: float | None
    stock_roofline: float | None
    candidate_roofline: float | None
    backends: str
    kernels: list[tuple[str, float, float, float]]  # name, stock us, candidate us, saved us


def _point(row: BenchmarkRow) -> str:
    return Point.from_record(row.point).short()


def views(v: Verdict) -> list[GainView]:
    """One view per candidate at every claimed point (every timed point when nothing is claimed)."""
    ev = v.evidence
    if ev is None:
        return []
    rows = [r for r in ev.benchmarks if r.claimed] or []
    out = []
    for row in rows:
        for cand in sorted(n for n in row.speedup if n in row.gain_from or n in row.median_us):
            if cand == "compile":
                continue
            gains = row.gain_from.get(cand, [])[:MAX_GAIN_ROWS]
            out.append(GainView(
                point=_point(row), candidate=cand, stock_us=row.median_us.get("stock"),
                candidate_us=row.median_us.get(cand), speedup=row.speedup.get(cand),
                stock_roofline=row.roofline_fraction.get("stock"),
                candidate_roofline=row.roofline_fraction.get(cand),
                backends=", ".join(f"{k}: {b or 'none'}" for k, b in sorted(row.backends.items())) or "–",
                kernels=[(g.name, g.stock_us, g.candidate_us, g.saved_us) for g in gains]))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def _us(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f} us"


def text_lines(v: Verdict) -> list[str]:
    """Plain lines (the caller escapes them for its output)."""
    lines: list[str] = []
    for g in views(v):
        speed = "–" if g.speedup is None else f"{g.speedup:.3g}x"
        lines.append(f"{g.point}: stock {_us(g.stock_us)} ({_pct(g.stock_roofline)} of roofline), "
                     f"{g.candidate} {_us(g.candidate_us)} ({_pct(g.candidate_roofline)}): {speed}; "
                     f"stock backends {g.backends}")
        for name, s_us, c_us, saved in g.kernels:
            lines.append(f"    {saved:+9.1f} us  {name[:90]}  (stock {s_us:.1f}, {g.candidate} {c_us:.1f})")
    return lines
