"""The one sanitiser (fasttrack.sanitize) and the verdict consistency check (fasttrack.verdict)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fasttrack.findings import Finding, Severity
from fasttrack.sanitize import path_text, visible
from fasttrack.verdict import Verdict, inconsistency


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain/path.py", "plain/path.py"),
        ("a\nb", "a\\x0ab"),  # a newline would forge another output line
        ("\x1b[31mred", "\\x1b[31mred"),  # terminal escape
        ("evil\u202etxt.py", "evil\\u202etxt.py"),  # bidi override
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("nb\u00a0space", "nb\\xa0space"),
        ("back\\slash", "back\\\\slash"),
        ("ünïcode 日本", "ünïcode 日本"),
    ],
)
def test_visible_escapes_what_reads_differently(raw: str, shown: str) -> None:
    assert visible(raw) == shown


def test_path_text_shows_bytes_that_are_not_utf8() -> None:
    assert path_text(b"kimi\xff.py") == "kimi\\xff.py"
    assert path_text("kimi\udcff.py") == "kimi\\xff.py"


@given(st.text())
def test_visible_is_one_encodable_line_and_injective(text: str) -> None:
    out = visible(text)
    out.encode("utf-8")  # never a lone surrogate
    assert "\n" not in out and "\r" not in out and "\x1b" not in out
    assert out.isprintable() or all(ch == " " or ch.isprintable() for ch in out)


@given(st.text(max_size=8), st.text(max_size=8))
def test_visible_distinct_inputs_stay_distinct(a: str, b: str) -> None:
    if a != b:
        assert visible(a) != visible(b)


def _verdict(verdict: str, *findings: Finding) -> Verdict:
    return Verdict.model_validate({"tool_version": "t", "verdict": verdict, "mode": "range",
                                   "findings": [f.model_dump() for f in findings],
                                   "generated_at": "2026-12-02T00:00:00Z"})


def test_inconsistency_names_a_pass_that_holds_an_error() -> None:
    err = Finding(code="FT120", severity=Severity.ERROR, message="patched")
    assert inconsistency(_verdict("fail", err)) is None
    assert inconsistency(_verdict("pass")) is None
    msg = inconsistency(_verdict("pass", err))
    assert msg is not None and "FT120" in msg
    assert inconsistency(_verdict("fail")) is not None
