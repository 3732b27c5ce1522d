"""The Markdown report: limits always kept, untrusted text always inert."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack.findings import Finding, Severity
from fasttrack.github import markdown as md
from fasttrack.render import markdown as verify_md
from fasttrack.verdict import (
    AffectedModel,
    BlastRadius,
    ChangedFile,
    ChangeStatus,
    ClaimResult,
    EvidencePart,
    EvidenceSummary,
    PartMachine,
    Verdict,
    Witness,
)

_text = st.text(st.characters(codec="utf-8"), max_size=400)


@st.composite
def verdicts(draw: Any) -> Verdict:
    findings = draw(
        st.lists(
            st.builds(
                Finding,
                code=st.from_regex(r"\AFT[1-4]\d\d\Z"),
                severity=st.sampled_from(list(Severity)),
                message=_text,
                path=st.none() | _text.filter(bool),
                line=st.none() | st.integers(1, 10**6),
                fix=st.none() | _text,
            ),
            max_size=60,
        )
    )
    files = draw(
        st.lists(
            st.builds(
                ChangedFile,
                path=_text.filter(bool),
                status=st.sampled_from(list(ChangeStatus)),
                zone=st.none() | _text,
            ),
            max_size=40,
        )
    )
    return Verdict(
        tool_version=draw(_text.filter(bool)),
        verdict=draw(st.sampled_from(["pass", "fail"])),
        mode="range",
        head=draw(st.none() | _text),
        model=draw(st.none() | _text),
        findings=findings,
        changed_files=files,
        generated_at=draw(_text),
        blast_radius=BlastRadius(
            computed=True,
            note=draw(st.none() | _text),
            models=[
                AffectedModel(
                    name=draw(_text),
                    kind="package",
                    module=draw(_text),
                    witness=Witness(chain=[draw(_text), draw(_text)]),
                )
            ],
        ),
        evidence=EvidenceSummary(
            present=True,
            claims=[
                ClaimResult(
                    name=draw(_text), claimed=1.2, median_ratio=1.3, ci_low=1.1, ci_high=1.4, holds=True
                )
            ],
        ),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v=verdicts(), limit=st.integers(md.MIN_LIMIT, 40_000), trusted=st.booleans())
def test_render_never_exceeds_the_limit(v: Verdict, limit: int, trusted: bool) -> None:
    outcome = md.Outcome(
        eligible=trusted and v.verdict == "pass",
        trusted=trusted,
        notes=() if trusted else ("**Not trusted:** because.",),
    )
    text = md.render(v, outcome, limit=limit, report_url="https://example.com/run/1", marker=md.STICKY_MARKER)
    assert md.size(text) <= limit
    assert text.startswith(md.STICKY_MARKER + "\n### fasttrack: ")


@settings(max_examples=200, deadline=None)
@given(s=_text)
def test_escaped_text_is_inert(s: str) -> None:
    out = md.esc(s, 10_000)
    assert "\n" not in out and "<" not in out and ">" not in out
    for ch in "`*_[]|#~":
        assert ch not in out.replace("\\" + ch, "")
    assert all(part.startswith("\u200b") for part in out.split("@")[1:])


@settings(max_examples=200, deadline=None)
@given(s=_text)
def test_prose_is_inert_and_shows_backtick_spans_as_code(s: str) -> None:
    out = md.prose(s, 10_000)
    bare = out.replace("<code>", "").replace("</code>", "")
    assert "\n" not in out and "<" not in bare and ">" not in bare
    for ch in "`*_[]|#~":
        assert ch not in bare.replace("\\" + ch, "")
    assert all(part.startswith("\u200b") for part in out.split("@")[1:])
    assert md.prose("assigns `a.b_c` (x)") == "assigns <code>a.b\\_c</code> (x)"
    assert md.prose("odd ` tick") == "odd \\` tick"


def test_full_report_when_it_fits_and_truncation_note_when_not() -> None:
    findings = [Finding.error("FT101", f"problem {i}", path=f"vllm/f{i}.py", line=i + 1) for i in range(400)]
    v = Verdict(
        tool_version="0.1.0",
        verdict="fail",
        mode="range",
        head="a" * 40,
        findings=findings,
        changed_files=[ChangedFile(path=f"vllm/f{i}.py", status=ChangeStatus.MODIFIED) for i in range(400)],
        generated_at="2026-01-01T00:00:00Z",
    )
    blocked = md.Outcome(eligible=False)
    full = md.render(v, blocked, limit=md.STEP_SUMMARY_LIMIT)
    assert "Truncated" not in full and full.count("| ❌ |") == 400 and "problem 399" in full
    assert "❌ blocked: 400 errors" in full
    short = md.render(v, blocked, limit=8000, report_url="https://example.com/run/1")
    assert md.size(short) <= 8000 and "more findings not shown" in short
    assert "Truncated to fit GitHub's limit" in short and "(https://example.com/run/1)" in short
    assert short.count("| ❌ |") < 400
    # a report URL that is not a plain http(s) URL is not turned into a link
    odd = md.render(v, blocked, limit=8000, report_url="javascript:alert(1)")
    assert "javascript:" not in odd


# ---------------------------------------------------------------------------------------------------------
# The verify report (`fasttrack verify --format markdown`), built on the same base


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v=verdicts(), limit=st.integers(md.MIN_LIMIT, 40_000))
def test_verify_report_never_exceeds_the_limit(v: Verdict, limit: int) -> None:
    text = verify_md.render(v, limit=limit)
    assert md.size(text) <= limit
    assert text.startswith("## ")


def test_verify_report_escapes_untrusted_text() -> None:
    """Finding messages, paths and blast-radius names come from the PR: no HTML, no table breaks, no
    mentions, no links survive into the report (before the shared base, the verify report only escaped HTML
    and pipes, so `@org/team` pinged and `[x](javascript:...)` was a link)."""
    hostile = "<img src=x onerror=alert(1)> | @org/maintainers [x](javascript:alert(1)) `code` **bold**\nrow"
    v = Verdict(
        tool_version="0.1.0", verdict="fail", mode="range", model="kimi_k3",
        findings=[Finding.error("FT120", hostile, path=f"vllm/{hostile}.py", line=3, fix=hostile)],
        changed_files=[ChangedFile(path=f"vllm/{hostile}.py", status=ChangeStatus.MODIFIED, zone=hostile)],
        blast_radius=BlastRadius(computed=True, note=hostile, models=[
            AffectedModel(name=hostile, kind="package", module=hostile,
                          witness=Witness(chain=[hostile, "x"]))]),
        generated_at=hostile,
    )
    text = verify_md.render(v)
    body = text.replace("<details>", "").replace("</details>", "").replace("<summary>", "")
    body = body.replace("</summary>", "").replace("<code>", "").replace("</code>", "")
    body = body.replace("<sub>", "").replace("</sub>", "")
    assert "<" not in body and ">" not in body.replace("→", "")
    assert "@org" not in text and "@\u200borg" in text
    assert re.search(r"(?<!\\)\]\(", text) is None and "\\[x\\](javascript" in text  # no live link
    finding_rows = [line for line in text.splitlines() if line.startswith("| ❌ |")]
    assert len(finding_rows) == 1 and len(re.findall(r"(?<!\\)\|", finding_rows[0])) == 5  # 4 cells


def test_verify_report_keeps_its_sections_and_caps_rows() -> None:
    """The findings table (capped at MAX_ROWS rows, the rest counted), how to fix, changed files with engine
    paths and zones, the blast radius with line-numbered witness chains, and the declared envelope."""
    findings = [Finding.error("FT101", f"problem {i}", path=f"vllm/f{i}.py", line=i + 1, fix="move it")
                for i in range(verify_md.MAX_ROWS + 5)]
    v = Verdict(
        tool_version="0.1.0", verdict="fail", mode="contribution", contribution="kimi_k3", model="kimi_k3",
        findings=findings,
        changed_files=[ChangedFile(path="kernels/kimi_k3/layer.py", status=ChangeStatus.ADDED,
                                   engine_path="vllm/models/kimi_k3/x/layer.py", zone="model-local",
                                   zone_kind="model-local")],
        blast_radius=BlastRadius(computed=True, models=[AffectedModel(
            name="alice_ai", kind="legacy", module="vllm.model_executor.models.alice_ai",
            architectures=["AliceAIForCausalLM"],
            witness=Witness(chain=["vllm.model_executor.models.alice_ai", "vllm.models.kimi_k3.ops"],
                            lines=[69]))]),
        envelope={"tp": [1], "batch": {"min": 1, "max": 64}}, fallback={"metric": "m_total"},
        generated_at="2026-01-01T00:00:00Z",
    )
    text = verify_md.render(v, limit=md.STEP_SUMMARY_LIMIT)
    assert text.count("| ❌ | FT101 |") == verify_md.MAX_ROWS
    assert "_… 5 more findings not shown; the JSON verdict has them all_" in text
    assert "Shortened to fit" not in text  # the cap is the report's design, not a truncation
    assert "<summary>How to fix (1)</summary>" in text and "**FT101**: move it" in text
    assert "<code>kernels/kimi\\_k3/layer.py</code> → <code>vllm/models/kimi\\_k3/x/layer.py</code>" in text
    assert "model-local" in text and "<code>vllm.model\\_executor.models.alice\\_ai:69 → " in text
    assert '"max": 64' in text and "```json" in text
    short = verify_md.render(v, limit=md.MIN_LIMIT)
    assert md.size(short) <= md.MIN_LIMIT
    assert "Shortened to fit" in short and "more findings not shown" in short


# ---------------------------------------------------------------------------------------------------------
# Evidence collected in parts: the PR comment shows the verify report's parts table


def _parts_verdict(n: int) -> Verdict:
    parts = [
        EvidencePart(file="statement.json", signer="alice@gpu-lab.example", signature_valid=True, fresh=True,
                     collected_at="2026-11-27T12:00:00+00:00",
                     machine=PartMachine(gpu_name="NVIDIA H200", gpu_count=1, driver="570.86",
                                         torch="2.13.0"),
                     points_by_tp={"1": 15}),
        EvidencePart(file="statement.tp2.json", signature_valid=False, fresh=False,
                     collected_at="2026-11-28T08:30:00+00:00",
                     machine=PartMachine(gpu_name="NVIDIA H200", gpu_count=2, interconnect="GPU0 <b>GPU1</b>",
                                         driver="575.51", torch="2.13.1"),
                     points_by_tp={"2": 3, "10": 1}),
    ][:n]
    return Verdict(
        tool_version="0.1.0", verdict="fail", mode="contribution", contribution="kernels/kimi_k3",
        findings=[Finding.error("FT301", "part 2 does not verify", evidence_file="statement.tp2.json")],
        evidence=EvidenceSummary(bundle_path="evidence/kimi_k3", present=True, parts=parts),
        generated_at="2026-11-30T12:00:00Z",
    )


PARTS_ROWS = [
    "| <code>statement.json</code> | 1 × NVIDIA H200<br>driver 570.86, torch 2.13.0 | "
    "alice@\u200bgpu-lab.example | valid | fresh | 2026-11-27T12:00:00+00:00 | tp1: 15 |",
    "| <code>statement.tp2.json</code> | 2 × NVIDIA H200 (GPU0 &lt;b&gt;GPU1&lt;/b&gt;)<br>driver 575.51, "
    "torch 2.13.1 | – | **invalid** | **stale** | 2026-11-28T08:30:00+00:00 | tp2: 3, tp10: 1 |",
]


def test_pr_comment_shows_the_parts_table_after_the_findings() -> None:
    text = md.render(_parts_verdict(2), md.Outcome(eligible=False), limit=md.COMMENT_LIMIT)
    lines = text.splitlines()
    head = "**Evidence in 2 parts** (<code>evidence/kimi\\_k3</code>): which machine produced which points"
    at = lines.index(head)
    assert lines[at - 1] == ""  # not glued to the table above it
    assert lines[at + 2: at + 6] == [
        "| Part | Machine | Signed by | Signature | Fresh | Collected | Points by TP |",
        "|---|---|---|---|---|---|---|", *PARTS_ROWS]
    assert text.index("| ❌ | FT301 |") < text.index(head)  # errors first
    assert "<b>" not in text  # machine text from the evidence stays text
    # The same rows as `fasttrack verify --format markdown`: one implementation.
    verify = verify_md.render(_parts_verdict(2)).splitlines()
    assert [x for x in verify if x.startswith("| <code>statement")] == PARTS_ROWS


def test_pr_comment_has_no_parts_table_for_a_bundle_in_one_part() -> None:
    outcome = md.Outcome(eligible=False)
    text = md.render(_parts_verdict(1), outcome, limit=md.COMMENT_LIMIT)
    assert "Evidence in" not in text and "| Part |" not in text and "statement.json" not in text
    assert text == md.render(_parts_verdict(0), outcome, limit=md.COMMENT_LIMIT)


def test_pr_comment_drops_the_parts_table_before_the_findings() -> None:
    v = _parts_verdict(2)
    v = v.model_copy(update={"findings": [Finding.error("FT101", f"problem {i} " + "x" * 80, path=f"f{i}.py")
                                          for i in range(60)]})
    short = md.render(v, md.Outcome(eligible=False), limit=md.MIN_LIMIT)
    assert md.size(short) <= md.MIN_LIMIT and "| ❌ | FT101 |" in short
    assert "Evidence in 2 parts" not in short and "Truncated to fit" in short
