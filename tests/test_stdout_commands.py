"""`fasttrack verify -f json|markdown|sarif` printed to stdout: the Actions runner parses the job's stdout
line by line, so no document may start a workflow command (`::` after leading whitespace) or hold the legacy
`##[command]` form anywhere, whatever the verdict quotes; and the document must still mean the same."""

from __future__ import annotations

import json

import pytest
from test_hostile_input_more import poisoned_verdict

from fasttrack.cli import main
from fasttrack.commands import verify as verify_cmd
from fasttrack.render import markdown, sarif
from fasttrack.render.encoding import encodable
from fasttrack.render.json_out import render as render_json
from fasttrack.sanitize import inert_document
from fasttrack.verdict import Verdict

FORMATS = ("json", "markdown", "sarif")
FORGED = "legacy ##[error]forged\n::error title=x::forged ##[group]"


def _stdout(v: object, fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr(verify_cmd, "run_verify", lambda _opts, **_k: v)
    with pytest.raises(SystemExit):
        main(["verify", "-f", fmt])
    return capsys.readouterr().out


def _commands(text: str) -> list[str]:
    return [line for line in text.replace("\r", "\n").split("\n")
            if line.lstrip().startswith("::") or "##[" in line]


def _poisoned() -> Verdict:
    v = poisoned_verdict()
    assert isinstance(v, Verdict)
    return v


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_poisoned_verdict_on_stdout_starts_no_workflow_command(
        fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Attack: every string of the verdict carries `##[error]` (honoured anywhere in a line) and a newline
    followed by `::error` (a JSON string escapes the newline, a value placed at a line start does not)."""
    v = _poisoned()
    raw = {"json": render_json, "markdown": markdown.render, "sarif": sarif.render}[fmt](v)
    assert _commands(raw), "the attack must reach the renderer's output (else this test cannot fail)"
    out = _stdout(v, fmt, monkeypatch, capsys)
    assert "forged" in out  # shown, not dropped
    assert not _commands(out), _commands(out)[:3]


@pytest.mark.parametrize("fmt", ("json", "sarif"))
def test_the_inert_json_means_the_same(fmt: str, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The rewrite is inside JSON strings only: the printed document parses to the same data."""
    v = _poisoned()
    raw = render_json(v) if fmt == "json" else sarif.render(v)
    assert json.loads(_stdout(v, fmt, monkeypatch, capsys)) == json.loads(encodable(raw))


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_honest_verdict_prints_unchanged(fmt: str, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Honest twin: a verdict without command sequences is printed byte for byte as rendered."""
    v = Verdict.model_validate_json((verify_cmd.Path(__file__).parent / "data" / "verdict_sample.json")
                                    .read_text(encoding="utf-8"))
    raw = {"json": render_json, "markdown": markdown.render, "sarif": sarif.render}[fmt](v)
    assert not _commands(raw)
    assert _stdout(v, fmt, monkeypatch, capsys) == raw


@pytest.mark.parametrize("syntax", FORMATS)
def test_inert_document_leaves_no_command_in_any_spelling(syntax: str) -> None:
    """Line starts after CR, LF, tabs and spaces; `###[` and `##[##[` (no rewrite may leave or make one)."""
    text = f"a\n::x\r  ::y\n\t::::z ###[a ##[##[b\n{FORGED}"
    out = inert_document(text, syntax)
    assert not _commands(out) and out.count("forged") == 2


def test_inert_document_refuses_an_unknown_syntax() -> None:
    with pytest.raises(ValueError, match="no inert form"):
        inert_document("x", "html")
