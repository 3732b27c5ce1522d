"""The `fasttrack github` commands end to end (in-process `fasttrack.cli.main`), against the fake GitHub."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fasttrack.cli import main
from fasttrack.github.publish import LABEL_BLOCKED


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


@pytest.fixture
def artifact(tmp_path: Path, verdicts: Any) -> Path:
    d = tmp_path / "verdict"
    d.mkdir()
    (d / "verdict.json").write_text(verdicts.make(verdicts.many(4)).model_dump_json(), encoding="utf-8")
    (d / "pr.json").write_text(
        json.dumps({"pr": verdicts.pr, "head_sha": verdicts.head, "base_sha": verdicts.base}),
        encoding="utf-8",
    )
    return d


def _publish_args(fake: Any, verdicts: Any, d: Path, *extra: str) -> list[str]:
    return [
        "github",
        "publish",
        "--verdict",
        str(d / "verdict.json"),
        "--meta",
        str(d / "pr.json"),
        "--github-repo",
        verdicts.repo,
        "--pr",
        str(verdicts.pr),
        "--head-sha",
        verdicts.head,
        "--base-url",
        fake.web,
        "--comment-author",
        verdicts.bot,
        *extra,
    ]


def test_publish_end_to_end(
    fake_github: Any,
    pr_file: Any,
    verdicts: Any,
    artifact: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_github.files = [pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py")]
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    summary = tmp_path / "step_summary.md"
    code, out, err = _run(
        monkeypatch,
        capsys,
        *_publish_args(
            fake_github,
            verdicts,
            artifact,
            "--summary-file",
            str(summary),
            "--report-url",
            "https://github.com/acme/engine/actions/runs/99",
        ),
    )
    assert code == 0, err
    assert out.startswith("fasttrack: PR #7 at aaaaaaaaaaaa: blocked; check run")
    assert "comment" in out and f"+{LABEL_BLOCKED}" in out
    assert fake_github.labels == [LABEL_BLOCKED] and len(fake_github.comments) == 1
    (run,) = fake_github.check_runs.values()
    assert run["details_url"] == "https://github.com/acme/engine/actions/runs/99"
    assert "blocked" in summary.read_text(encoding="utf-8")


def test_missing_token_is_one_line_exit_2(
    fake_github: Any,
    verdicts: Any,
    artifact: Path,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    code, _, err = _run(monkeypatch, capsys, *_publish_args(fake_github, verdicts, artifact))
    assert code == 2
    assert err.count("\n") == 1 and "$GITHUB_TOKEN is not set" in err and "Traceback" not in err
    assert httpserver.log == []


def test_expired_token_is_one_line_exit_2(
    fake_github: Any,
    verdicts: Any,
    artifact: Path,
    writes: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MY_TOKEN", "ghs_revoked")
    code, _, err = _run(
        monkeypatch, capsys, *_publish_args(fake_github, verdicts, artifact, "--token-env", "MY_TOKEN")
    )
    assert code == 2 and err.count("\n") == 1
    assert "401 Bad credentials" in err and "$MY_TOKEN" in err
    assert writes(httpserver) == []


def _deep(n: int) -> str:
    return (
        '{"tool_version": "1", "verdict": "pass", "mode": "range", "generated_at": "x", "envelope": '
        + '{"a": ' * n
        + "1"
        + "}" * n
        + "}"
    )


@pytest.mark.parametrize(
    "kind",
    [
        "not-json",
        "unknown-key",
        "bad-verdict-value",
        "oversized",
        "deep",
        "symlink",
        "missing",
        "meta-not-int",
    ],
)
def test_malformed_artifacts_are_rejected_before_any_request(
    kind: str,
    fake_github: Any,
    verdicts: Any,
    artifact: Path,
    httpserver: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vf = artifact / "verdict.json"
    good = json.loads(vf.read_text(encoding="utf-8"))
    extra: list[str] = []
    expect = ""
    if kind == "not-json":
        vf.write_text("{not json", encoding="utf-8")
        expect = "invalid verdict"
    elif kind == "unknown-key":
        vf.write_text(json.dumps(good | {"approved_by": "mallory"}), encoding="utf-8")
        expect = "approved_by: unknown key"
    elif kind == "bad-verdict-value":
        vf.write_text(json.dumps(good | {"verdict": "PASS!!"}), encoding="utf-8")
        expect = "verdict: "
    elif kind == "oversized":
        vf.write_text(json.dumps(good | {"tool_version": "x" * 5000}), encoding="utf-8")
        extra = ["--max-bytes", "4096"]
        expect = "over the 4096-byte cap"
    elif kind == "deep":
        vf.write_text(_deep(100_000), encoding="utf-8")
        expect = "nests deeper than 64 levels"
    elif kind == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps(good), encoding="utf-8")
        vf.unlink()
        os.symlink(target, vf)
        expect = "not a regular file"
    elif kind == "missing":
        vf.unlink()
        expect = "no verdict at this path"
    elif kind == "meta-not-int":
        (artifact / "pr.json").write_text(
            json.dumps({"pr": "7; rm -rf /", "head_sha": verdicts.head}), encoding="utf-8"
        )
        expect = "pr: "
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    code, _, err = _run(
        monkeypatch,
        capsys,
        *_publish_args(fake_github, verdicts, artifact, *extra, "--summary-file", str(summary)),
    )
    assert code == 2, err
    assert expect in err and err.count("\n") == 1 and "Traceback" not in err
    # No verdict is published: the only write is the failing check on the trusted head saying why.
    checks = [req.get_json() for req, _ in httpserver.log if req.method != "GET"]
    assert [c["conclusion"] for c in checks] == ["failure"] and checks[0]["head_sha"] == verdicts.head
    assert fake_github.comments == [] and fake_github.labels == []
    assert "verdict rejected, no verdict published" in summary.read_text(encoding="utf-8")


def test_verdict_for_another_pr_publishes_nothing(
    fake_github: Any,
    pr_file: Any,
    verdicts: Any,
    artifact: Path,
    writes: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_github.files = [pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py")]
    (artifact / "verdict.json").write_text(verdicts.make([], pr=123).model_dump_json(), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    code, _, err = _run(monkeypatch, capsys, *_publish_args(fake_github, verdicts, artifact))
    assert code == 2 and "the verdict is for PR #123, not PR #7" in err
    assert writes(httpserver) == [("POST", "/api/v3/repos/acme/engine/check-runs")]  # the failing check only
    assert fake_github.comments == [] and fake_github.labels == []


def test_bad_head_sha_option(
    fake_github: Any,
    verdicts: Any,
    artifact: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _publish_args(fake_github, verdicts, artifact)
    args[args.index("--head-sha") + 1] = "main"
    code, _, err = _run(monkeypatch, capsys, *args)
    assert code == 2 and "--head-sha" in err and "not a full commit SHA" in err


def test_pr_files_paginates_and_feeds_the_pipeline(
    fake_github: Any,
    pr_file: Any,
    verdicts: Any,
    httpserver: Any,
    seen: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_github.files = [pr_file(f"vllm/models/kimi_k3/f{i}.py") for i in range(248)] + [
        pr_file("vllm/old_name.py", "removed", additions=0, deletions=3, patch="@@ -1,3 +0,0 @@\n-a\n-b\n-c"),
        pr_file("vllm/models/kimi_k3/new.py", "renamed", previous_filename="vllm/models/kimi_k3/old.py"),
    ]
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    out_file = tmp_path / "files.json"
    code, _, err = _run(
        monkeypatch,
        capsys,
        "github",
        "pr-files",
        "--github-repo",
        verdicts.repo,
        "--pr",
        "7",
        "--base-url",
        fake_github.web,
        "--output",
        str(out_file),
    )
    assert code == 0, err
    entries = json.loads(out_file.read_text(encoding="utf-8"))
    assert len(entries) == 250 and entries[-1]["previous_filename"] == "vllm/models/kimi_k3/old.py"
    pages = [p for m, p in seen(httpserver) if p.endswith("/pulls/7/files")]
    assert len(pages) == 3
    queries = [req.query_string.decode() for req, _ in httpserver.log if req.path.endswith("/files")]
    assert queries == ["per_page=100", "per_page=100&page=2", "per_page=100&page=3"]

    code, out, err = _run(
        monkeypatch,
        capsys,
        "github",
        "pr-files",
        "--github-repo",
        verdicts.repo,
        "--pr",
        "7",
        "--base-url",
        fake_github.web,
        "--changes",
    )
    assert code == 0, err
    changes = json.loads(out)
    assert {
        "status": "deleted",
        "path": "vllm/old_name.py",
        "old_path": None,
        "binary": False,
        "added_lines": 0,
        "removed_lines": 3,
    } in changes
    renamed = [c for c in changes if c["status"] == "renamed"]
    assert renamed == [
        {
            "status": "renamed",
            "path": "vllm/models/kimi_k3/new.py",
            "old_path": "vllm/models/kimi_k3/old.py",
            "binary": False,
            "added_lines": 1,
            "removed_lines": 0,
        }
    ]


def test_pr_files_refuses_a_truncated_list(fake_github: Any, pr_file: Any, verdicts: Any) -> None:
    from fasttrack.errors import InputError
    from fasttrack.github.client import connect
    from fasttrack.github.files import pr_changes

    fake_github.files = [pr_file("a.py")]
    fake_github.changed_files = 3001
    with pytest.raises(InputError, match="lists only 1 of PR #7's 3001 files"):
        pr_changes(connect(verdicts.token, fake_github.web), verdicts.repo, 7)


def test_connect_targets_github_com_or_enterprise() -> None:
    from fasttrack.github.client import connect

    assert connect("t").session.base_url == "https://api.github.com"
    assert connect("t", "https://github.com/").session.base_url == "https://api.github.com"
    assert connect("t", "https://ghe.example.com").session.base_url == "https://ghe.example.com/api/v3"
    assert connect("t", "https://ghe.example.com/api/v3").session.base_url == "https://ghe.example.com/api/v3"


def test_comment_author_defaults_to_the_token_user_outside_actions(
    fake_github: Any,
    pr_file: Any,
    verdicts: Any,
    artifact: Path,
    seen: Any,
    httpserver: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_github.files = [pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py")]
    fake_github.author = fake_github.me_login  # a personal token: comments are the user's
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    args = _publish_args(fake_github, verdicts, artifact, "--no-check-run")
    i = args.index("--comment-author")
    del args[i : i + 2]
    outs = []
    for _ in range(2):
        code, out, err = _run(monkeypatch, capsys, *args)
        assert code == 0, err
        outs.append(out)
    assert "created" in outs[0] and "unchanged" in outs[1]
    assert len(fake_github.comments) == 1 and ("GET", "/api/v3/user") in seen(httpserver)


def test_a_hostile_artifact_cannot_emit_workflow_commands(
    fake_github: Any,
    verdicts: Any,
    artifact: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    httpserver: Any,
) -> None:
    """Attack: stage 1 (the PR's workflow) writes a verdict whose key is `\\n::stop-commands::x`; the error
    names that key on stderr inside the write-token job, where the runner parses `::` lines."""
    hostile = json.loads((artifact / "verdict.json").read_text(encoding="utf-8"))
    hostile["x\n::stop-commands::tok\n::error file=a.py::forged\n##[add-mask]y"] = 1
    (artifact / "verdict.json").write_text(json.dumps(hostile), encoding="utf-8")
    monkeypatch.setenv("GITHUB_TOKEN", verdicts.token)
    code, _, err = _run(monkeypatch, capsys, *_publish_args(fake_github, verdicts, artifact))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fasttrack: error: ")
    assert "::" not in err and "##[" not in err
    assert "['x\\x0a:\\x3astop-commands" in err  # the key is quoted and shown, not obeyed
