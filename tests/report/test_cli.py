"""`fasttrack report` on the command line: verdict files, a directory of them, the reference contribution,
and bad input as one line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import report_fixtures as rf

from fasttrack.cli import main
from fasttrack.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", "report", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """The console entry point without a new interpreter: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["fasttrack", "report", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    return int(done.value.code or 0), out, err


def test_report_from_verdict_files_and_a_directory(tmp_path: Path) -> None:
    d = tmp_path / "verdicts"
    d.mkdir()
    (d / "pr-1.json").write_text(rf.passing(pr=1).model_dump_json())
    (d / "pr-2.json").write_text(rf.failing(pr=2).model_dump_json())
    one = tmp_path / "stale.json"
    one.write_text(rf.stale(name="old").model_dump_json())
    out = tmp_path / "site"
    proc = run("--verdict", str(one), "--verdicts-dir", str(d), "--out", str(out), "--max-age-days", "30")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"report: 3 contribution(s), 1 ready, 2 blocked -> {out / 'index.html'} and {out / 'report.md'}"
    )
    assert {p.name for p in out.glob("*.html")} == {"index.html", "pr-1.html", "pr-2.html", "old.html"}
    assert "older than 30 days" in (out / "old.html").read_text()


def test_bad_verdict_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps({**json.loads(rf.passing().model_dump_json()), "schema_version": "9.9"}))
    rc, _, err = run_in_process(monkeypatch, capsys, "--verdict", str(bad), "--out", str(tmp_path / "site"))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1
    assert lines[0].startswith(f"fasttrack: error: {bad}: schema_version: invalid verdict")
    garbage = tmp_path / "g.json"
    garbage.write_text("{not json")
    rc, _, err = run_in_process(
        monkeypatch, capsys, "--verdict", str(garbage), "--out", str(tmp_path / "site")
    )
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "malformed JSON in verdict" in err
    assert not (tmp_path / "site").exists()  # nothing written on bad input


def test_foreign_output_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    v = tmp_path / "v.json"
    v.write_text(rf.passing().model_dump_json())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    rc, _, err = run_in_process(monkeypatch, capsys, "--verdict", str(v), "--out", str(tmp_path / "out"))
    assert rc == 2 and "--out: the output directory is not empty" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
    rc, _, err = run_in_process(
        monkeypatch, capsys, "--verdict", str(v), "--out", str(tmp_path / "x"), "--max-age-days", "0"
    )
    assert rc == 2 and "--max-age-days: must be at least 1" in err


def test_no_input_reports_the_reference_contribution(tmp_path: Path) -> None:
    """`make verify`'s second half: the reference contribution verified and rendered, whatever its verdict."""
    out = tmp_path / "site"
    proc = run("--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("report: 1 contribution(s)")
    v = Verdict.model_validate_json((out / "kimi_k3.verdict.json").read_text())
    assert v.mode == "contribution" and v.contribution == "kimi_k3"
    page = (out / "kimi_k3.html").read_text()
    assert 'data-grid="envelope"' in page and "fasttrack verify (the reference contribution)" in page
    assert v.envelope is not None and page.count('class="cell ') == rf.grid_points(v.envelope)
