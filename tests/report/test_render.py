"""Rendering the site from fixture verdicts: what the pages say, that hostile text stays text, the output
directory rules, and report.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import report_fixtures as rf
from report_fixtures import Doc

from fasttrack.errors import InputError
from fasttrack.report.site import MARKER, Site, Source, build_site, dedupe, load_verdict_files
from fasttrack.verdict import EvidencePart, PartMachine, Verdict


def build(tmp_path: Path, *verdicts: Verdict) -> tuple[Site, Path]:
    out = tmp_path / "site"
    site = build_site([Source(v, f"fixture-{i}.json") for i, v in enumerate(verdicts)], out, now=rf.NOW)
    return site, out


def page(out: Path, slug: str) -> Doc:
    return Doc((out / f"{slug}.html").read_text(encoding="utf-8"))


ALL = (
    rf.passing(),
    rf.failing(pr=4242),
    rf.stale(name="old_one"),
    rf.missing(name="no_bundle"),
    rf.huge(name="huge_one"),
    rf.wide(),
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Site, Path]:
    return build(tmp_path_factory.mktemp("demo"), *ALL)


def test_files_written(demo: tuple[Site, Path]) -> None:
    site, out = demo
    slugs = [v.slug for v in site.views]
    assert sorted(slugs) == sorted(["kimi_k3", "pr-4242", "old_one", "no_bundle", "huge_one", "kimi_k3_wide"])
    for s in slugs:
        assert (out / f"{s}.html").is_file()
        assert Verdict.model_validate_json((out / f"{s}.verdict.json").read_text()).contribution is not None
    assert (out / "index.html").is_file() and (out / "report.md").is_file() and (out / ".nojekyll").is_file()
    assert set(json.loads((out / MARKER).read_text())) == set(site.files)
    assert oct((out / "index.html").stat().st_mode & 0o777) == "0o644"


def test_index_is_the_queue_in_order(demo: tuple[Site, Path]) -> None:
    site, out = demo
    doc = Doc((out / "index.html").read_text())
    rows = [a["data-slug"] for t, a in doc.tags if t == "tr" and "data-slug" in a]
    assert rows == [v.slug for v in site.views]
    assert rows[0] == "kimi_k3"  # the only passing one comes first
    scores = [v.risk.score for v in site.views[1:]]
    assert scores == sorted(scores)
    text = doc.plain
    assert "6 contributions and PRs 1 ready for review 5 blocked" in text
    assert "FT300 no evidence directory evidence/kimi_k3/" in text  # the missing-bundle one's blocker
    assert "re-run `fasttrack collect kernels/kimi_k3` on a GPU machine" in text  # with its fix
    assert "How the risk score is computed" in text and "35 when there is no readable evidence bundle" in text
    for v in site.views:
        assert doc.find("a", href=f"{v.slug}.html")


def test_page_of_a_passing_contribution(demo: tuple[Site, Path]) -> None:
    _, out = demo
    doc = page(out, "kimi_k3")
    text = doc.plain
    assert "Nothing blocks this contribution" in text
    grids = doc.find("table", data_grid="envelope")
    assert len(grids) == 1 and grids[0]["data-gpu"] == "NVIDIA H200"
    assert len(doc.find("td", data_status="passed")) == 15
    plots = doc.find("svg", data_plot="speedup")
    assert len(plots) == 3
    assert len(doc.find("g", data_series="fused over stock")) == 3
    assert len(doc.find("line", **{"class": "ci"})) == 3 * 2 * 5  # 3 plots x 2 series x 5 batches
    assert "claim ≥1.9× ✓" in text and "1.59× [1.52, 1.65]" in text
    assert "alice@gpu-lab.example" in text and "2026-11-27T12:00:00+00:00 (3 days old)" in text
    assert "fasttrack_kimi_k3_fallback_total" in text and "rate(fasttrack_kimi_k3_fallback_total[5m])" in text
    assert "Kernels per layer" in text and "all 15 benchmarked points" in text
    assert "Bandwidth against the roofline" in text and "4.10 TB/s" in text
    assert "greedy_token_agreement" in text and "≥ 0.99" in text
    assert "memcheck" in text and "ERROR SUMMARY: 0 errors" in text
    assert "Numerical check signed by: alice@gpu-lab.example (signature verified)" in text
    assert "Maintainer countersignature" in text
    assert doc.find("a", href="kimi_k3.verdict.json")


def test_page_of_a_failing_pr(demo: tuple[Site, Path]) -> None:
    _, out = demo
    doc = page(out, "pr-4242")
    text = doc.plain
    assert doc.find("div", data_blocker="FT311")
    assert "Blocking: FT311 fused moves 6.2 TB/s at batch 64" in text and "4 more errors below" in text
    assert doc.find("div", data_anti_gaming="1")
    assert len(doc.find("td", data_status="failed")) == 1 and len(doc.find("td", data_status="passed")) == 14
    assert "✗ does not hold" in text and "claim ≥2.5× ✗" in text
    assert "RACECHECK SUMMARY: 3 hazards" in text
    assert "2/6 tests failed" in text


def test_page_of_stale_and_missing_evidence(demo: tuple[Site, Path]) -> None:
    _, out = demo
    stale = page(out, "old_one")
    assert len(stale.find("td", data_status="stale")) == 15
    assert (
        "the code changed since collection" in stale.plain
        and "kernels/kimi_k3/fused/kernels.py" in stale.plain
    )
    assert "older than 90 days" in stale.plain
    missing = page(out, "no_bundle")
    assert len(missing.find("td", data_status="missing")) == 15
    assert (
        "no evidence" in missing.plain
        and "No timed benchmarks in the evidence: there is no evidence" in missing.plain
    )
    assert "Numerical check signed by: nobody yet" in missing.plain
    assert not missing.find("svg", data_plot="speedup")


def test_page_of_a_huge_pr(demo: tuple[Site, Path]) -> None:
    _, out = demo
    doc = page(out, "huge_one")
    rows = sum(1 for t, a in doc.tags if t == "tr") - 1
    assert rows > 600 + 420  # every finding and every changed file has a row
    text = doc.plain
    assert "finding number 599 about file 599" in text and "kernel_0419.py" in text
    assert "reach 40 other model units and 25 shared modules" in text
    assert "model_39" in text  # every witness chain is listed
    assert len(doc.find("ol", **{"class": "chain"})) == 40 + 25


def test_multi_dtype_grid(demo: tuple[Site, Path]) -> None:
    _, out = demo
    doc = page(out, "kimi_k3_wide")
    assert len(doc.find("table", data_grid="envelope")) == 4
    entries = [a["data-status"] for t, a in doc.tags if t == "span" and "data-status" in a]
    assert len(entries) == 96 and entries.count("failed") == 1 and entries.count("missing") == 48


def test_hostile_text_renders_as_text(tmp_path: Path) -> None:
    site, out = build(tmp_path, rf.hostile(), rf.passing())
    (evil,) = [v for v in site.views if v.slug != "kimi_k3"]
    assert re.fullmatch(r"[a-z0-9_-]+", evil.slug)
    for name in ("index.html", f"{evil.slug}.html"):
        raw = (out / name).read_text()
        doc = Doc(raw)
        assert not doc.find("script") and not doc.find("img")
        assert not [a for _, a in doc.tags if any(k.startswith("on") for k in a)]
        assert "<script" not in raw.lower() and "<img" not in raw.lower()
        assert "&lt;script&gt;" in raw
        assert rf.HOSTILE in doc.plain  # shown to the reader, as text
        assert "default-src 'none'" in raw  # and a CSP forbids scripts even if escaping failed
    md = (out / "report.md").read_text()
    assert "<script" not in md.lower() and "<img" not in md.lower() and "&lt;script&gt;" in md


def test_markdown_report(demo: tuple[Site, Path]) -> None:
    site, out = demo
    md = (out / "report.md").read_text()
    assert md.startswith("# fasttrack review queue")
    order = [md.index(f"]({v.slug}.html) |") for v in site.views]
    assert order == sorted(order)
    assert "| 1 | ✓ passed | ✓ passed | ✓ passed |" in md
    assert "| 2 | ✗ failed | ✓ passed | ✓ passed |" in md
    assert "**Blocking**: **FT311**" in md and "(+4 more errors)" in md
    assert "| fused-vs-compile-tp1-b1-c4096 | ≥ 1.3× | 1.59× [1.52, 1.65] | holds |" in md
    assert "- [ ] Maintainer sign-off of the numerical check" in md
    assert "more errors and warnings on the HTML page" in md  # the huge one is cut in Markdown


def test_rebuild_replaces_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(
        [Source(rf.passing(name="first"), "a"), Source(rf.missing(name="second"), "b")], out, now=rf.NOW
    )
    assert (out / "second.html").exists()
    build_site([Source(rf.passing(name="first"), "a")], out, now=rf.NOW)
    assert (out / "first.html").exists() and not (out / "second.html").exists()
    assert not (out / "second.verdict.json").exists()


def test_refuses_a_foreign_directory(tmp_path: Path) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "README.md").write_text("mine")
    with pytest.raises(InputError, match="not empty and was not made by `fasttrack report`"):
        build_site([Source(rf.passing(), "a")], out, now=rf.NOW)
    assert (out / "README.md").read_text() == "mine"
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        build_site([Source(rf.passing(), "a")], afile, now=rf.NOW)
    with pytest.raises(InputError, match="no verdicts"):
        build_site([], tmp_path / "empty", now=rf.NOW)


def test_dedupe_keeps_the_newest_verdict_per_pr() -> None:
    from datetime import timedelta

    old = Source(rf.missing(pr=9, generated=rf.NOW - timedelta(days=2)), "old.json")
    new = Source(rf.passing(pr=9), "new.json")
    other = Source(rf.passing(pr=10), "other.json")
    kept = dedupe([new, old, other])
    assert [(s.origin, n) for s, n in kept] == [("new.json", 1), ("other.json", 0)]


def test_load_verdict_files(tmp_path: Path) -> None:
    d = tmp_path / "verdicts"
    d.mkdir()
    (d / "a.json").write_text(rf.passing(pr=1).model_dump_json())
    (d / "b.json").write_text(rf.failing(pr=2).model_dump_json())
    (d / "notes.txt").write_text("ignored")
    single = tmp_path / "c.json"
    single.write_text(rf.stale(pr=3).model_dump_json())
    got = load_verdict_files([single], [d])
    assert [s.verdict.pr for s in got] == [3, 1, 2]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(rf.passing().model_dump_json()), "verdict": "maybe"}))
    with pytest.raises(InputError) as err:
        load_verdict_files([bad], [])
    assert str(bad) in str(err.value) and "verdict" in str(err.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \*\.json verdict files"):
        load_verdict_files([], [empty])
    with pytest.raises(InputError, match="not a directory"):
        load_verdict_files([], [single])
    with pytest.raises(InputError, match="not found"):
        load_verdict_files([tmp_path / "nope.json"], [])


def test_range_verdict_without_a_manifest(tmp_path: Path) -> None:
    """A PR that touches shared code and has no contribution manifest: no envelope, evidence or fallback."""
    from fasttrack.findings import Finding

    v = rf.verdict(pr=77, findings=[Finding.error("FT101", "vllm/v1/core/sched.py is shared code")])
    v = v.model_copy(update={"envelope": None, "fallback": None, "evidence": None, "contribution": None})
    site, out = build(tmp_path, v)
    text = page(out, "pr-77").plain
    assert "The verdict records no envelope and no evidence points." in text
    assert "No evidence applies: the verdict has no contribution manifest." in text
    assert "The verdict records no fallback (no manifest)." in text
    assert "Blocking: FT101 vllm/v1/core/sched.py is shared code" in text
    assert site.views[0].evidence_state == "n/a"


def test_non_finite_numbers_do_not_break_the_page(tmp_path: Path) -> None:
    v = rf.passing()
    assert v.evidence is not None
    rows = list(v.evidence.benchmarks)
    nan, inf = float("nan"), float("inf")
    rows[0] = rows[0].model_copy(
        update={
            "speedup": {"fused": inf, "compile": 1.2},
            "speedup_ci": {"fused": (nan, inf)},
            "bandwidth_fraction": {"fused": nan},
        }
    )
    v = v.model_copy(update={"evidence": v.evidence.model_copy(update={"benchmarks": rows})})
    _, out = build(tmp_path, v)
    raw = (out / "kimi_k3.html").read_text()
    doc = Doc(raw)
    assert len(doc.find("svg", data_plot="speedup")) == 3
    svg_numbers = [
        a.get(k) or ""
        for t, a in doc.tags
        if t in ("line", "circle", "rect", "path")
        for k in ("x1", "y1", "cx", "cy", "width", "d")
    ]
    assert not [n for n in svg_numbers if "nan" in n.lower() or "inf" in n.lower()]


def _two_parts() -> list[EvidencePart]:
    tp1 = [f"NVIDIA H200|tp1|b{b}|c{c}|bfloat16" for b in (1, 2, 8, 32, 64) for c in (1, 4096, 32768)]
    return [
        EvidencePart(file="statement.json", signer="alice@gpu-lab.example", signature_valid=True, fresh=True,
                     collected_at="2026-11-27T12:00:00+00:00",
                     machine=PartMachine(gpu_name="NVIDIA H200", gpu_count=1, driver="570.86",
                                         torch="2.13.0"),
                     points_by_tp={"1": len(tp1)}, points=tp1, kernel_tests=90, benchmarks=15),
        EvidencePart(file="statement.tp2.json", signer=None, signature_valid=False, fresh=False,
                     collected_at="2026-11-28T08:30:00+00:00",
                     machine=PartMachine(gpu_name="NVIDIA H200", gpu_count=2, interconnect="GPU0 <b>GPU1</b>",
                                         driver="575.51", torch="2.13.1"),
                     points_by_tp={"2": 3}, points=[k.replace("|tp1|", "|tp2|") for k in tp1[:3]],
                     kernel_tests=18, benchmarks=3),
    ]


def test_evidence_section_lists_the_parts(tmp_path: Path) -> None:
    v = rf.passing()
    assert v.evidence is not None
    v = v.model_copy(update={"evidence": v.evidence.model_copy(update={"parts": _two_parts()})})
    _, out = build(tmp_path, v)
    raw = (out / "kimi_k3.html").read_text()
    doc = Doc(raw)
    assert len(doc.find("table", data_table="evidence-parts")) == 1
    assert [a["data-part"] for t, a in doc.tags if t == "tr" and "data-part" in a] == [
        "statement.json", "statement.tp2.json"]
    text = doc.plain
    assert "Collected in 2 parts: which machine produced which points" in text
    assert ("statement.json 1 × NVIDIA H200 driver 570.86 · torch 2.13.0 ✓ alice@gpu-lab.example ✓ fresh "
            "2026-11-27T12:00:00+00:00 TP1: 15") in text
    assert "TP1: 15 15 points" in text and "NVIDIA H200|tp1|b64|c32768|bfloat16" in text
    assert ("statement.tp2.json 2 × NVIDIA H200 GPU0 <b>GPU1</b> driver 575.51 · torch 2.13.1 "
            "✗ does not verify ↻ stale 2026-11-28T08:30:00+00:00 TP2: 3 3 points") in text
    assert "<b>GPU1</b>" not in raw  # machine text from the evidence stays text
    assert [a["data-tp"] for t, a in doc.tags if t == "span" and "data-tp" in a] == ["1", "2"]


def test_a_single_part_adds_no_parts_table(tmp_path: Path) -> None:
    v = rf.passing()
    assert v.evidence is not None
    one = v.model_copy(update={"evidence": v.evidence.model_copy(update={"parts": _two_parts()[:1]})})
    _, out = build(tmp_path, one)
    doc = page(out, "kimi_k3")
    assert not doc.find("table", data_table="evidence-parts")
    assert "Collected in" not in doc.plain


def test_report_md_lists_the_parts_with_the_verify_reports_table(tmp_path: Path) -> None:
    v = rf.passing()
    assert v.evidence is not None
    v = v.model_copy(update={"evidence": v.evidence.model_copy(update={"parts": _two_parts()})})
    _, out = build(tmp_path, v)
    lines = (out / "report.md").read_text().splitlines()
    head = "**Evidence in 2 parts** (<code>evidence/kimi\\_k3</code>): which machine produced which points"
    at = lines.index(head)
    assert lines[at - 1] == "" and lines[at - 2].startswith("**Evidence**: ")  # under the evidence line
    assert lines[at + 2: at + 6] == [
        "| Part | Machine | Signed by | Signature | Fresh | Collected | Points by TP |",
        "|---|---|---|---|---|---|---|",
        "| <code>statement.json</code> | 1 × NVIDIA H200<br>driver 570.86, torch 2.13.0 | "
        "alice@\u200bgpu-lab.example | valid | fresh | 2026-11-27T12:00:00+00:00 | tp1: 15 |",
        "| <code>statement.tp2.json</code> | 2 × NVIDIA H200 (GPU0 &lt;b&gt;GPU1&lt;/b&gt;)<br>"
        "driver 575.51, torch 2.13.1 | – | **invalid** | **stale** | 2026-11-28T08:30:00+00:00 | tp2: 3 |",
    ]
    assert lines[at + 6] == ""  # the table ends before whatever follows
    assert "<b>GPU1</b>" not in "\n".join(lines)


def test_report_md_has_no_parts_table_for_a_single_part(tmp_path: Path) -> None:
    v = rf.passing()
    assert v.evidence is not None
    one = v.model_copy(update={"evidence": v.evidence.model_copy(update={"parts": _two_parts()[:1]})})
    _, out = build(tmp_path / "one", one)
    text = (out / "report.md").read_text()
    assert "Evidence in" not in text and "| Part |" not in text and "statement.json" not in text
    _, out0 = build(tmp_path / "none", v)
    assert text == (out0 / "report.md").read_text()
