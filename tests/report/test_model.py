"""The dashboard's view of a verdict: grid statuses, plots, tables, blocker, checklist, queue order."""

from __future__ import annotations

import math

import pytest
import report_fixtures as rf

from fasttrack.findings import Finding
from fasttrack.report.facts import blocker, eval_margin, grid_size, parse_time
from fasttrack.report.model import (
    ContributionView,
    build_bandwidth,
    build_checklist,
    build_grid,
    build_kernels,
    build_view,
    queue_order,
    short_labels,
    worst,
)
from fasttrack.report.plot import build_plots, nice_ticks
from fasttrack.rules import all_rules, describe
from fasttrack.verdict import BenchmarkRow, EvalResult, PointStatus, Verdict


def view(v: Verdict, slug: str = "x") -> ContributionView:
    return build_view(v, slug=slug, origin="test", now=rf.NOW, max_age_days=90)


# ------------------------------------------------------------------------------------------ the grid


def test_grid_of_a_passing_contribution() -> None:
    g = build_grid(rf.passing())
    assert g is not None and g.total == 15
    assert g.counts == {"passed": 15, "failed": 0, "stale": 0, "missing": 0}
    (panel,) = g.panels
    assert (panel.gpu, panel.tp, panel.contexts) == ("NVIDIA H200", 1, (1, 4096, 32768))
    assert [r.batch for r in panel.rows] == [1, 2, 8, 32, 64]


def test_grid_marks_the_failed_point_where_it_is() -> None:
    g = build_grid(rf.failing())
    assert g is not None and g.counts["failed"] == 1 and g.counts["passed"] == 14
    row = next(r for r in g.panels[0].rows if r.batch == 2)
    (entry,) = row.cells[0]  # context 1
    assert entry.status is PointStatus.FAILED and entry.failed == 2 and entry.label == "failed"


def test_grid_stale_and_missing() -> None:
    stale = build_grid(rf.stale())
    assert stale is not None and stale.counts["stale"] == 15
    missing = build_grid(rf.missing())  # no evidence at all: every declared point is missing
    assert missing is not None and missing.counts == {"passed": 0, "failed": 0, "stale": 0, "missing": 15}


def test_grid_across_hardware_tp_and_dtypes() -> None:
    g = build_grid(rf.wide())
    assert g is not None and g.total == 2 * 2 * 4 * 3 * 2 and g.dtypes == ("bfloat16", "fp8")
    assert [(p.gpu, p.tp) for p in g.panels] == [
        ("NVIDIA H200", 1),
        ("NVIDIA H200", 2),
        ("NVIDIA B200", 1),
        ("NVIDIA B200", 2),
    ]
    b200 = [e for p in g.panels if p.gpu == "NVIDIA B200" for r in p.rows for cell in r.cells for e in cell]
    assert {e.status for e in b200} == {PointStatus.MISSING}
    assert g.counts == {"passed": 23, "failed": 1, "stale": 24, "missing": 48}
    cell = g.panels[0].rows[-1].cells[-1]  # H200 TP1 batch 128 context 131072
    assert [e.status for e in cell] == [PointStatus.PASSED, PointStatus.FAILED]
    assert worst(cell) is PointStatus.FAILED


def test_grid_from_evidence_when_the_envelope_is_not_valid() -> None:
    v = rf.passing().model_copy(update={"envelope": {"hardware": "not a list"}})
    g = build_grid(v)
    assert g is not None and g.total == 15 and "evidence" in g.source
    assert build_grid(rf.missing().model_copy(update={"envelope": None})) is None


def test_grid_lists_evidence_outside_the_declared_envelope() -> None:
    v = rf.passing()
    assert v.evidence is not None
    extra = v.evidence.points[0].model_copy(update={"point": rf.point(256, 1)})
    v = v.model_copy(
        update={"evidence": v.evidence.model_copy(update={"points": [*v.evidence.points, extra]})}
    )
    g = build_grid(v)
    assert g is not None and g.total == 15 and len(g.extra) == 1 and "batch 256" in g.extra[0]


def test_grid_size() -> None:
    assert grid_size(rf.passing()) == 15 and grid_size(rf.wide()) == 96


# ------------------------------------------------------------------------------------------ the plots


def test_plots_one_per_context_with_both_baselines() -> None:
    v = rf.passing()
    assert v.evidence is not None
    plots = build_plots(v.evidence.benchmarks, v.evidence.claims)
    assert [p.title for p in plots] == [
        f"NVIDIA H200 · TP1 · bfloat16 · context {c:,}" for c in (1, 4096, 32768)
    ]
    p = plots[1]
    assert [s.name for s in p.series] == ["fused over stock", "fused over torch.compile"]
    assert all(s.has_ci for s in p.series) and p.log_x
    stock = p.series[0]
    assert [pt.batch for pt in stock.points] == [1, 2, 8, 32, 64]
    assert all(
        pt.y_high is not None and pt.y_low is not None and pt.y_high <= pt.y <= pt.y_low
        for pt in stock.points
    )  # SVG y grows downwards: the upper bound is drawn above the median
    xs = [pt.x for pt in stock.points]
    assert xs == sorted(xs) and math.isclose(xs[1] - xs[0], (xs[2] - xs[1]) / 2, rel_tol=1e-3)  # log2 axis
    assert {m.name for m in p.claims} == {
        c.name for c in v.evidence.claims
    }  # all three claims at context 4096
    assert not plots[0].claims
    assert p.table[0].cells[0].startswith("2.30× [")


def test_plot_without_compile_ci_uses_the_ratio_of_medians() -> None:
    row = rf.bench_row(1, 4096).model_copy(update={"speedup_over": {}, "speedup_over_ci": {}})
    (p,) = build_plots([row])
    by_name = {s.name: s for s in p.series}
    compile_series = by_name["fused over torch.compile"]
    assert not compile_series.has_ci
    expected = row.median_us["compile"] / row.median_us["fused"]
    assert math.isclose(compile_series.points[0].value, expected)
    assert any("no recorded confidence interval" in n for n in p.notes)


def test_plot_skips_rows_without_variants_and_handles_one_batch() -> None:
    assert build_plots([BenchmarkRow(point=rf.point(1, 1))]) == []
    (p,) = build_plots([rf.bench_row(8, 1)])
    assert not p.log_x and len(p.x_ticks) == 1


def test_nice_ticks() -> None:
    assert nice_ticks(2.5) == [0, 0.5, 1, 1.5, 2, 2.5]
    ticks = nice_ticks(3.3)
    assert ticks[0] == 0 and ticks[-1] >= 3.3 and len(ticks) <= 7


# --------------------------------------------------------------------------- kernels, bandwidth, evals


def test_kernel_table_condenses_identical_rows() -> None:
    k = build_kernels(rf.passing())
    assert k is not None and k.uniform and k.variants == ("stock", "compile", "fused")
    assert k.rows == (("all 15 benchmarked points", ("14", "9", "2")),)
    v = rf.passing()
    assert v.evidence is not None
    rows = list(v.evidence.benchmarks)
    rows[0] = rows[0].model_copy(update={"kernels_per_layer": {"stock": 14.0, "compile": 9.0, "fused": 3.5}})
    k2 = build_kernels(v.model_copy(update={"evidence": v.evidence.model_copy(update={"benchmarks": rows})}))
    assert k2 is not None and not k2.uniform and len(k2.rows) == 15 and k2.rows[0][1][2] == "3.50"
    assert build_kernels(rf.missing()) is None


def test_bandwidth_table_flags_results_above_the_roofline() -> None:
    v = rf.passing()
    assert v.evidence is not None
    rows = list(v.evidence.benchmarks)
    rows[-1] = rows[-1].model_copy(update={"bandwidth_fraction": {"stock": 0.5, "fused": 1.4}})
    bw = build_bandwidth(
        v.model_copy(update={"evidence": v.evidence.model_copy(update={"benchmarks": rows})})
    )
    assert bw is not None and bw.over == 1 and bw.roofline_bps == 4.1e12
    assert bw.common == "NVIDIA H200 · TP1 · bfloat16"  # said once, not on each row
    label, cells = bw.rows[-1]
    assert label == "batch 64 · context 32768"
    assert cells[1] is None  # no compile figure on that row
    fused = cells[2]
    assert fused is not None and fused.over and math.isclose(fused.bytes_per_s or 0, 1.4 * 4.1e12)


def test_short_labels() -> None:
    labels, common = short_labels([rf.point(1, 1), rf.point(2, 1)])
    assert labels == ["batch 1", "batch 2"] and common == "NVIDIA H200 · TP1 · context 1 · bfloat16"


@pytest.mark.parametrize(
    ("value", "threshold", "direction", "margin"),
    [
        (0.01, 0.05, "max", 0.8),
        (0.06, 0.05, "max", -0.2),
        (0.998, 0.99, "min", 0.8),
        (0.97, 0.99, "min", -2.0),
        (120.0, 100.0, "min", 0.2),
        (-0.002, -0.01, "min", 0.8),
        (0.5, 0.0, "max", -0.5),
    ],
)
def test_eval_margin(value: float, threshold: float, direction: str, margin: float) -> None:
    e = EvalResult(
        name="e",
        value=value,
        threshold=threshold,
        direction=direction,  # type: ignore[arg-type]
        passed=margin >= 0,
    )
    assert math.isclose(eval_margin(e), margin, abs_tol=1e-9)


# ----------------------------------------------------------------------------- blocker and checklist


def test_blocker_prefers_the_judge_then_confinement_then_evidence() -> None:
    ft300 = Finding.error("FT300", "no evidence")
    ft311 = Finding.error("FT311", "bandwidth above peak")
    ft101 = Finding.error("FT101", "shared code", path="vllm/a.py")
    ft401 = Finding.error("FT401", "edits the policy")
    warn = Finding.warning("FT318", "old")
    rules = describe(all_rules())
    assert blocker([warn], rules) is None
    assert blocker([ft311, ft300], rules) == ft300
    assert blocker([ft311, ft300, ft101], rules) == ft101
    assert blocker([ft311, ft300, ft101, ft401], rules) == ft401
    # anti-gaming before failures, the envelope before the other evidence rules, unknown codes last
    assert blocker([Finding.error("FT307", "a test failed"), ft311], rules) == ft311
    ft204, ft307 = Finding.error("FT204", "batch"), Finding.error("FT307", "a test failed")
    assert blocker([ft307, ft204], rules) == ft204
    assert blocker([Finding.error("FT999", "?"), ft307], rules) == ft307


def test_view_of_a_failing_verdict() -> None:
    c = view(rf.failing(pr=7))
    assert not c.ready and c.status == "blocked" and c.title == "PR #7 · kimi_k3" and c.kind == "PR"
    assert c.blocker is not None and c.blocker.code == "FT311" and c.other_errors == 4
    assert [f.code for f in c.anti_gaming] == ["FT311"]
    assert c.evidence_state == "fresh" and c.evidence_age_days == pytest.approx(3)


def test_view_caps_findings_shown() -> None:
    c = view(rf.huge(n_findings=3600))
    assert c.counts["error"] == 1200
    assert len(c.findings["error"]) == 1000 and c.hidden["error"] == 200


def test_checklist_states_and_signer() -> None:
    items = {i.title: i for i in build_checklist(rf.failing())}
    numerical = next(i for t, i in items.items() if t.startswith("Numerical check"))
    assert numerical.state == "failed" and numerical.codes == ("FT307",)
    assert numerical.signer == "alice@gpu-lab.example" and "signature verified" in numerical.detail
    assert items["Performance claims hold"].state == "failed"
    assert items["Performance claims hold"].codes == ("FT308", "FT311")
    assert items["The judge is untouched"].state == "ok"
    assert sum(1 for i in items.values() if i.state == "human") == 3
    missing = next(i for i in build_checklist(rf.missing()) if i.title.startswith("Numerical"))
    assert missing.signer is None and "no evidence bundle" in missing.detail
    not_run = rf.passing().model_copy(update={"rules_run": ["FT101"]})
    states = {i.title: i.state for i in build_checklist(not_run)}
    assert states["Envelope bounded and honoured"] == "not-run"
    assert states["Confined to one model's own code"] == "ok"


def test_queue_order_ready_first_then_risk() -> None:
    views = [
        view(rf.stale(name="b"), "b"),
        view(rf.passing(name="a"), "a"),
        view(rf.missing(name="c"), "c"),
        view(rf.failing(name="d"), "d"),
    ]
    order = [c.slug for c in queue_order(views)]
    assert order[0] == "a"
    risks = [c.risk.score for c in queue_order(views)[1:]]
    assert risks == sorted(risks)


def test_parse_time() -> None:
    t = parse_time("2026-11-27T12:00:00Z")
    assert t is not None and t.utcoffset() is not None
    naive = parse_time("2026-11-27T12:00:00")
    assert naive is not None and naive.utcoffset() is not None
    assert parse_time("yesterday") is None and parse_time(None) is None
