"""`fasttrack github publish` against the fake GitHub: check runs, annotations, sticky comment, labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fasttrack.errors import InputError
from fasttrack.findings import Finding
from fasttrack.github import markdown as md
from fasttrack.github.artifact import RejectedVerdict
from fasttrack.github.client import RetryPolicy, connect
from fasttrack.github.publish import LABEL_BLOCKED, LABEL_ELIGIBLE, PublishOptions, PublishResult, publish
from fasttrack.verdict import Verdict

NOW = 1_800_000_000.0


def _publish(
    fake: Any,
    verdict: Verdict,
    v: Any,
    sleeps: list[float] | None = None,
    token: str | None = None,
    **kw: Any,
) -> PublishResult:
    policy = RetryPolicy(
        sleep=(sleeps.append if sleeps is not None else _no_sleep), clock=lambda: NOW, jitter=0
    )
    gh = connect(token or v.token, fake.web, policy=policy)
    kw.setdefault("head_sha", v.head)
    kw.setdefault("comment_author", v.bot)
    return publish(gh, verdict, PublishOptions(repo=v.repo, pr=v.pr, **kw))


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"unexpected sleep({seconds})")


@pytest.fixture
def matching_files(fake_github: Any, pr_file: Any) -> Any:
    fake_github.files = [pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py")]
    return fake_github


def test_120_annotations_take_three_requests(
    matching_files: Any, verdicts: Any, httpserver: Any, writes: Any
) -> None:
    findings = [*verdicts.many(120), Finding.error("FT201", "envelope unbounded")]  # no path: summary only
    result = _publish(matching_files, verdicts.make(findings), verdicts, comment=False, labels=False)

    check_writes = [w for w in writes(httpserver) if "check-runs" in w[1]]
    assert [m for m, _ in check_writes] == ["POST", "PATCH", "PATCH"]
    bodies = [req.get_json() for req, _ in httpserver.log if "check-runs" in req.path]
    assert [len(b["output"]["annotations"]) for b in bodies] == [50, 50, 20]
    assert bodies[0]["status"] == "in_progress" and "conclusion" not in bodies[0]
    assert bodies[1].get("conclusion") is None
    assert bodies[2]["status"] == "completed" and bodies[2]["conclusion"] == "failure"
    assert all(b["head_sha"] == verdicts.head for b in bodies[:1])
    notes = matching_files.annotations[result.check_run_id]
    assert len(notes) == 120 and result.check_run_requests == 3
    assert all(
        n["start_line"] >= 1 and n["end_line"] == n["start_line"] for n in notes
    )  # shows in Files changed
    levels = [n["annotation_level"] for n in notes]
    assert levels == sorted(levels, key=["failure", "warning", "notice"].index)  # errors first
    for b in bodies:
        assert md.size(b["output"]["summary"]) <= md.COMMENT_LIMIT and b["output"]["title"]


def test_few_annotations_one_completed_request(
    matching_files: Any, verdicts: Any, httpserver: Any, writes: Any
) -> None:
    findings = [
        Finding.warning("FT102", "file-level note", path="vllm/model_executor/models/kimi_k3/fused_moe.py")
    ]
    result = _publish(matching_files, verdicts.make(findings), verdicts, comment=False, labels=False)
    assert [m for m, p in writes(httpserver)] == ["POST"]
    run = matching_files.check_runs[result.check_run_id]
    assert run["status"] == "completed" and run["conclusion"] == "success"
    (note,) = matching_files.annotations[result.check_run_id]
    assert note["start_line"] == 1 and "file-level" in note["message"]


def test_sticky_comment_updated_in_place_and_foreign_marker_ignored(
    matching_files: Any, verdicts: Any, httpserver: Any, writes: Any
) -> None:
    mallory = matching_files.add_comment(f"{md.STICKY_MARKER} fake pass!", "mallory")
    first = _publish(matching_files, verdicts.make(verdicts.many(3)), verdicts, check_run=False, labels=False)
    assert first.comment_action == "created" and first.comment_id != mallory
    second = _publish(matching_files, verdicts.make([]), verdicts, check_run=False, labels=False)
    assert second.comment_action == "updated" and second.comment_id == first.comment_id
    third = _publish(matching_files, verdicts.make([]), verdicts, check_run=False, labels=False)
    assert third.comment_action == "unchanged"

    comment_writes = [w for w in writes(httpserver) if "comments" in w[1]]
    assert comment_writes == [
        ("POST", f"/api/v3/repos/acme/engine/issues/{verdicts.pr}/comments"),
        ("PATCH", f"/api/v3/repos/acme/engine/issues/comments/{first.comment_id}"),
    ]
    ours = [c for c in matching_files.comments if c["user"]["login"] == verdicts.bot]
    assert len(ours) == 1 and "eligible for fast-track" in ours[0]["body"]
    assert ours[0]["body"].startswith(md.STICKY_MARKER)
    assert matching_files.comments[0]["body"].endswith("fake pass!")  # mallory's untouched


def test_comments_are_paginated(matching_files: Any, verdicts: Any, httpserver: Any, seen: Any) -> None:
    for i in range(150):
        matching_files.add_comment(f"chatter {i}", "someone")
    matching_files.add_comment(f"{md.STICKY_MARKER}\nold", verdicts.bot)
    result = _publish(matching_files, verdicts.make([]), verdicts, check_run=False, labels=False)
    assert result.comment_action == "updated"
    gets = [p for m, p in seen(httpserver) if m == "GET" and p.endswith("/comments")]
    assert len(gets) == 2


def test_labels_swap(matching_files: Any, verdicts: Any, httpserver: Any, writes: Any) -> None:
    matching_files.labels = [LABEL_ELIGIBLE, "kernels"]
    blocked = _publish(
        matching_files, verdicts.make(verdicts.many(3)), verdicts, check_run=False, comment=False
    )
    assert blocked.labels_added == [LABEL_BLOCKED] and blocked.labels_removed == [LABEL_ELIGIBLE]
    assert sorted(matching_files.labels) == sorted([LABEL_BLOCKED, "kernels"])
    assert writes(httpserver) == [
        ("POST", "/api/v3/repos/acme/engine/issues/7/labels"),
        ("DELETE", f"/api/v3/repos/acme/engine/issues/7/labels/{LABEL_ELIGIBLE}"),
    ]
    httpserver.clear_log()
    again = _publish(
        matching_files, verdicts.make(verdicts.many(3)), verdicts, check_run=False, comment=False
    )
    assert again.labels_added == [] and again.labels_removed == [] and writes(httpserver) == []
    eligible = _publish(matching_files, verdicts.make([]), verdicts, check_run=False, comment=False)
    assert eligible.labels_added == [LABEL_ELIGIBLE] and eligible.labels_removed == [LABEL_BLOCKED]


def test_survives_a_502(matching_files: Any, verdicts: Any, httpserver: Any) -> None:
    matching_files.fail_next("GET", r"/pulls/7$", 502, message="Server Error")
    matching_files.fail_next("POST", r"/check-runs$", 502, message="Server Error")
    sleeps: list[float] = []
    result = _publish(matching_files, verdicts.make([]), verdicts, sleeps=sleeps)
    assert result.check_run_id is not None and result.comment_action == "created"
    assert sleeps == [1.0, 1.0]  # base backoff, once per failed request
    statuses = [r.status_code for _, r in httpserver.log]
    assert statuses.count(502) == 2
    assert len(matching_files.check_runs) == 1


def test_survives_a_403_rate_limit_waiting_for_reset(
    matching_files: Any, verdicts: Any, httpserver: Any
) -> None:
    matching_files.fail_next(
        "POST",
        r"/issues/7/comments$",
        403,
        message="API rate limit exceeded",
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 30)},
    )
    matching_files.fail_next(
        "POST",
        r"/issues/7/labels$",
        429,
        headers={"Retry-After": "7"},
        message="You have exceeded a secondary rate limit",
    )
    sleeps: list[float] = []
    result = _publish(matching_files, verdicts.make([]), verdicts, sleeps=sleeps, check_run=False)
    assert sleeps == [31.0, 7.0]
    assert result.comment_action == "created" and result.labels_added == [LABEL_ELIGIBLE]
    assert len(matching_files.comments) == 1


def test_rate_limit_beyond_the_bound_is_a_clear_error(matching_files: Any, verdicts: Any) -> None:
    matching_files.fail_next(
        "GET",
        r"/pulls/7$",
        403,
        message="API rate limit exceeded",
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 3600)},
    )
    with pytest.raises(InputError, match=r"rate limit .* lifts in 3600 s"):
        _publish(matching_files, verdicts.make([]), verdicts, sleeps=[])


def test_permission_403_is_not_retried(
    matching_files: Any, verdicts: Any, writes: Any, httpserver: Any
) -> None:
    matching_files.fail_next("POST", r"/check-runs$", 403, message="Resource not accessible by integration")
    with pytest.raises(
        InputError, match=r"refused creating the 'fasttrack' check run \(403 Resource not accessible"
    ) as info:
        _publish(matching_files, verdicts.make([]), verdicts)
    assert "--no-check-run" in info.value.render()
    assert [m for m, p in writes(httpserver) if "check-runs" in p] == ["POST"]


def test_bad_token_is_a_clear_error(matching_files: Any, verdicts: Any, writes: Any, httpserver: Any) -> None:
    with pytest.raises(InputError) as info:
        _publish(matching_files, verdicts.make([]), verdicts, token="ghs_expired")
    text = info.value.render()
    assert "401 Bad credentials" in text and "expired" in text and "GITHUB_TOKEN" in text and "\n" not in text
    assert writes(httpserver) == []


def test_untrusted_when_the_pr_edits_the_workflow(fake_github: Any, pr_file: Any, verdicts: Any) -> None:
    fake_github.files = [
        pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py"),
        pr_file(".github/workflows/fasttrack-verify.yml"),
    ]
    v = verdicts.make(
        [],
        paths=["vllm/model_executor/models/kimi_k3/fused_moe.py", ".github/workflows/fasttrack-verify.yml"],
    )
    result = _publish(fake_github, v, verdicts)
    assert result.outcome is not None and not result.outcome.trusted and not result.outcome.eligible
    assert fake_github.labels == [LABEL_BLOCKED]
    (run,) = fake_github.check_runs.values()
    assert run["conclusion"] == "failure" and "cannot be trusted" in run["output"]["title"]
    assert "changes the workflow or action that produced the verdict" in fake_github.comments[0]["body"]


def test_untrusted_when_the_verdict_leaves_out_files(fake_github: Any, pr_file: Any, verdicts: Any) -> None:
    fake_github.files = [
        pr_file("vllm/model_executor/models/kimi_k3/fused_moe.py"),
        pr_file("vllm/v1/sample/sampler.py"),
    ]
    result = _publish(fake_github, verdicts.make([]), verdicts)
    assert result.outcome is not None and not result.outcome.eligible
    assert "leaves out 1 file" in fake_github.comments[0]["body"]
    assert fake_github.labels == [LABEL_BLOCKED]


def test_untrusted_when_github_truncates_the_file_list(matching_files: Any, verdicts: Any) -> None:
    matching_files.changed_files = 3500
    result = _publish(matching_files, verdicts.make([]), verdicts, check_run=False)
    assert result.outcome is not None and not result.outcome.trusted
    assert "lists only 1 of the PR's 3500 files" in matching_files.comments[0]["body"]


# ---- rejected artifacts publish nothing ----


@pytest.mark.parametrize(
    "case",
    [
        "verdict-other-pr",
        "verdict-other-head",
        "meta-other-pr",
        "meta-other-head",
        "no-head",
        "pr-not-at-sha",
    ],
)
def test_claims_that_do_not_match_publish_nothing(
    case: str, matching_files: Any, verdicts: Any, httpserver: Any, writes: Any
) -> None:
    from fasttrack.github.artifact import PrMeta

    v = verdicts.make([])
    meta = None
    head_sha = verdicts.head
    if case == "verdict-other-pr":
        v = verdicts.make([], pr=8)
    elif case == "verdict-other-head":
        v = verdicts.make([], head="c" * 40)
    elif case == "meta-other-pr":
        meta = PrMeta(pr=8, head_sha=verdicts.head)
    elif case == "meta-other-head":
        meta = PrMeta(pr=7, head_sha="d" * 40)
    elif case == "no-head":
        v = verdicts.make([], head=None)
    elif case == "pr-not-at-sha":  # the trusted event's sha is not a commit of the claimed PR
        head_sha = "e" * 40
        v = verdicts.make([], head=head_sha)
    with pytest.raises(RejectedVerdict):
        _publish(matching_files, v, verdicts, head_sha=head_sha, meta=meta)
    assert writes(httpserver) == []
    assert matching_files.comments == [] and matching_files.check_runs == {} and matching_files.labels == []


def test_superseded_head_publishes_nothing_quietly(
    matching_files: Any, verdicts: Any, httpserver: Any, writes: Any
) -> None:
    old = "f" * 40
    matching_files.commits = [old, verdicts.head]
    result = _publish(matching_files, verdicts.make([], head=old), verdicts, head_sha=old)
    assert result.skipped and "older push" in result.skipped
    assert writes(httpserver) == []


def test_step_summary_and_bodies_stay_within_limits(
    matching_files: Any, verdicts: Any, tmp_path: Path, httpserver: Any
) -> None:
    findings = [
        Finding.error("FT101", "x" * 3000 + f" {i}", path="vllm/model_executor/models/kimi_k3/fused_moe.py",
                      line=i + 1)
        for i in range(2500)
    ]
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step output\n" * 10, encoding="utf-8")
    result = _publish(
        matching_files,
        verdicts.make(findings),
        verdicts,
        summary_file=summary,
        report_url="https://github.com/acme/engine/actions/runs/1",
        max_annotations=100,
    )
    assert summary.stat().st_size < 1024 * 1024
    text = summary.read_text(encoding="utf-8")
    assert "Truncated to fit GitHub's limit" in text and "actions/runs/1" in text
    body = matching_files.comments[0]["body"]
    assert md.size(body) <= 65_535 and "more findings not shown" in body
    assert result.annotations == 100 and result.annotations_dropped == 2400 and result.check_run_requests == 2
    for req, _ in httpserver.log:
        if "check-runs" in req.path:
            assert md.size(req.get_json()["output"]["summary"]) <= 65_535


def test_untrusted_text_is_inert_in_the_comment(matching_files: Any, verdicts: Any) -> None:
    evil = Finding.error(
        "FT101",
        "@maintainers <img src=x onerror=alert(1)> [click](https://evil.example) | ok",
        path="vllm/model_executor/models/kimi_k3/fused_moe.py",
        line=3,
        fix="**now**",
    )
    _publish(matching_files, verdicts.make([evil]), verdicts, check_run=False, labels=False)
    body = matching_files.comments[0]["body"]
    assert "@maintainers" not in body and "<img" not in body and "[click](" not in body
    assert "\\[click\\](https:\u200b//evil" in body  # brackets escaped, URL not autolinked
    assert "**now**" not in body and "&lt;img" in body
