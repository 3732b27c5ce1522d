"""The one sanitiser (fasttrack.sanitize) and the verdict consistency check (fasttrack.verdict)."""

from __future__ import annotations

import json
from pathlib import Path

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


# ---- references and workflow commands (text leaving for GitHub or a log) ----


@pytest.mark.parametrize(
    ("raw", "live"),
    [
        ("ping @maintainers now", "@maintainers"),
        ("see #123", "#123"),
        ("fixes vllm-project/vllm#4567", "vllm#4567"),
        ("like GH-89 did", "GH-89"),
        ("or gh-89", "gh-89"),
        ("at https://evil.example/x", "https://"),
        ("or www.evil.example", "www."),
        ("team @org/team-a", "@org"),
    ],
)
def test_inert_references_break_every_reference(raw: str, live: str) -> None:
    from fasttrack.sanitize import inert_references

    out = inert_references(raw)
    assert live not in out
    assert out.replace("\u200b", "") == raw  # the same text to a reader, only made inert


def test_inert_references_show_the_texts_own_invisible_characters() -> None:
    from fasttrack.sanitize import inert_references

    out = inert_references("a\u200b#1\u202e")
    assert out == "a\\u200b#\u200b1\\u202e"  # the text's ZWSP is shown, the one we add is not text


@pytest.mark.parametrize(
    "raw",
    [
        "::error file=x::forged",
        "  ::add-mask::secret",
        "ok\n::stop-commands::tok",
        "x\r::set-output name=a::b",
        "##[error]legacy form anywhere",
        "field 'a\u2028::warning::x'",
        "\t::group::g",
    ],
)
def test_log_line_cannot_start_a_workflow_command(raw: str) -> None:
    from fasttrack.sanitize import log_line

    out = log_line(raw)
    assert "\n" not in out and "\r" not in out and "\u2028" not in out
    assert "::" not in out and "##[" not in out
    assert not out.lstrip().startswith("::")


@given(st.text())
def test_log_line_is_one_inert_line_for_any_text(s: str) -> None:
    from fasttrack.sanitize import log_line

    out = log_line(s)
    assert len(out.splitlines()) <= 1 and "::" not in out and "##[" not in out
    out.encode("utf-8")  # no lone surrogates left


def test_a_hostile_key_in_an_error_is_quoted_and_escaped(tmp_path: Path) -> None:
    """An unknown key carrying a newline and `::error` is named quoted and escaped, the error one line."""
    from fasttrack.errors import InputError
    from fasttrack.loading import load_json_model
    from fasttrack.sanitize import log_line

    bad = tmp_path / "v.json"
    bad.write_text(json.dumps({"tool_version": "1", "verdict": "pass", "mode": "range", "generated_at": "x",
                               "evil\n::error file=a::forged": 1}), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_json_model(bad, Verdict, "verdict")
    assert err.value.field == "['evil\n::error file=a::forged']"
    line = log_line(err.value.render())
    assert "\n" not in line and "::" not in line


def test_commit_like_hex_runs_are_not_autolinked() -> None:
    """GitHub links a run of hex digits to a commit of the repository: a fork's commit named in a verdict
    would read as the repository's. A zero-width space after the sixth digit keeps it readable and inert."""
    from fasttrack.sanitize import break_references

    sha = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
    assert break_references(f"see {sha}") == f"see {sha[:6]}\u200b{sha[6:]}"
    assert break_references("abc1234 and 1234567") == "abc123\u200b4 and 123456\u200b7"
    assert break_references("tp1 b8 c32768 x12345678y") == "tp1 b8 c32768 x12345678y"  # not a run of its own
