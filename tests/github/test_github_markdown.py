"""The Markdown report: limits always kept, untrusted text always inert."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack.findings import Finding, Severity
from fasttrack.github import markdown as md
from fasttrack.verdict import (
    AffectedModel,
    BlastRadius,
    ChangedFile,
    ChangeStatus,
    ClaimResult,
    EvidenceSummary,
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
