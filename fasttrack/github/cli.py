"""`fasttrack github ...`: publish a verdict on its PR, and fetch a PR's file list.

Kept light: github3 and the publisher are imported inside the commands.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from fasttrack.errors import InputError

github_app = typer.Typer(help="Publish verdicts to GitHub; fetch a PR's files.", no_args_is_help=True)

_BASE_URL_HELP = "GitHub Enterprise Server URL (e.g. https://github.example.com); default github.com."
_TOKEN_HELP = "Name of the environment variable holding the token (never pass a token as an argument)."
_GUARD_HELP = ("Extra path patterns (gitignore syntax) whose change makes the verdict untrusted, added to "
               ".github/workflows/**, .github/actions/**, /action.yml.")


PUBLISH_EPILOG = """Example:

  fasttrack github publish --verdict verdict.json --github-repo vllm-project/vllm --pr 1234 \
--head-sha "$HEAD_SHA" --summary-file "$GITHUB_STEP_SUMMARY"

Exit codes: 0 published, 2 bad input (a rejected verdict, a bad option, a GitHub error naming the fix), \
3 a bug in fasttrack (run with --debug for the traceback)."""
PR_FILES_EPILOG = """Example:

  fasttrack github pr-files --github-repo vllm-project/vllm --pr 1234 -o files.json

Exit codes: 0 written, 2 bad input or a GitHub error, 3 a bug in fasttrack."""


@github_app.command("publish", epilog=PUBLISH_EPILOG)
def publish_command(
    repo: Annotated[str, typer.Option(
        "--github-repo", help="OWNER/NAME of the GitHub repository the PR is in.")],
    verdict: Annotated[Path | None, typer.Option(
        "--verdict", help="Verdict JSON (`fasttrack verify --format json`); or --artifact-run-id.")] = None,
    pr: Annotated[int | None, typer.Option(
        "--pr", min=1, help="PR number (checked against GitHub and --head-sha); default: the artifact's "
                            "pr.json, a claim GitHub must confirm.")] = None,
    head_sha: Annotated[str | None, typer.Option(
        "--head-sha", help="Commit the triggering run built (workflow_run.head_sha); the verdict and the PR "
                           "must both be at it.")] = None,
    meta: Annotated[Path | None, typer.Option(
        "--meta", help="pr.json written by stage 1 (checked too).")] = None,
    artifact_run_id: Annotated[int | None, typer.Option(
        "--artifact-run-id", min=1,
        help="Fetch verdict.json and pr.json from this workflow run's artifact through the API, "
             "size-checked before anything is extracted.")] = None,
    artifact_name: Annotated[str, typer.Option(
        "--artifact-name", help="Name of stage 1's artifact.")] = "fasttrack-verdict",
    artifact_token_env: Annotated[str | None, typer.Option(
        "--artifact-token-env", help="Environment variable holding a token with actions: read for the "
                                     "download (default: --token-env).")] = None,
    stage1_conclusion: Annotated[str | None, typer.Option(
        "--stage1-conclusion", help="workflow_run.conclusion of stage 1: anything but 'success' means there "
                                    "is no verdict to publish (a failing check says so).")] = None,
    head_label: Annotated[str | None, typer.Option(
        "--head-label", help="OWNER:BRANCH of the PR head (from workflow_run), to find the PR whose "
                             "eligible label must go when the artifact cannot name it.")] = None,
    reject_check: Annotated[bool, typer.Option(
        "--reject-check/--no-reject-check",
        help="When no verdict can be published for --head-sha: a failing check run with the reason, and "
             "the eligible label removed (nothing else).")] = True,
    base_url: Annotated[str | None, typer.Option("--base-url", help=_BASE_URL_HELP)] = None,
    token_env: Annotated[str, typer.Option("--token-env", help=_TOKEN_HELP)] = "GITHUB_TOKEN",
    summary_file: Annotated[Path | None, typer.Option(
        "--summary-file", help="Append the report here (pass $GITHUB_STEP_SUMMARY).")] = None,
    report_url: Annotated[str | None, typer.Option(
        "--report-url", help="Where the full report is (the workflow run holding the artifact).")] = None,
    check_name: Annotated[str, typer.Option("--check-name", help="Name of the check run.")] = "fasttrack",
    check_run: Annotated[bool, typer.Option(
        "--check-run/--no-check-run",
        help="Create a check run (needs an App installation token: the fasttrack App's).")] = True,
    comment: Annotated[bool, typer.Option(
        "--comment/--no-comment", help="Create or update the sticky comment.")] = True,
    labels: Annotated[bool, typer.Option(
        "--labels/--no-labels", help="Set fast-track: eligible / blocked.")] = True,
    comment_author: Annotated[str | None, typer.Option(
        "--comment-author",
        help="Login whose marker comment is ours (the App's bot login with an App token; default: "
             "github-actions[bot] in Actions, else the token's user).")] = None,
    guard: Annotated[list[str] | None, typer.Option("--guard", help=_GUARD_HELP)] = None,
    max_bytes: Annotated[int, typer.Option(
        "--max-bytes", min=1024, help="Size cap for the verdict.")] = 8 << 20,
) -> None:
    """Publish a verdict on its PR: check run + annotations, sticky comment, labels, step summary.

    The verdict is treated as hostile: size- and depth-capped, schema-checked, pass/fail recomputed from
    its findings, and it must name this PR's head commit (and --head-sha, when given). Otherwise no verdict
    is published and the exit code is 2; with --head-sha, a failing check run says why and the eligible
    label is removed.
    """
    from fasttrack.github.artifact import (
        PrMeta,
        RejectedVerdict,
        load_meta,
        load_verdict,
        meta_from_bytes,
        verdict_from_bytes,
    )
    from fasttrack.github.client import connect, github_errors, split_repo, token_from_env
    from fasttrack.github.download import fetch_artifact
    from fasttrack.github.publish import (
        DEFAULT_GUARDS,
        PublishOptions,
        publish,
        publish_rejection,
        refuse_inconsistent,
        write_rejection_summary,
    )
    from fasttrack.sanitize import log_line

    split_repo(repo)
    if head_sha is not None and not _is_sha(head_sha):
        raise InputError(f"{head_sha!r} is not a full commit SHA", field="--head-sha",
                         fix="pass github.event.workflow_run.head_sha")
    in_actions = os.environ.get("GITHUB_ACTIONS") == "true"
    author = comment_author or ("github-actions[bot]" if in_actions else None)
    source = str(verdict) if verdict is not None else f"artifact {artifact_name!r} of run {artifact_run_id}"
    claimed: int | None = pr
    m: PrMeta | None = None

    def options(pr_number: int | None) -> PublishOptions:
        return PublishOptions(repo=repo, pr=pr_number, head_sha=head_sha, meta=None, check_name=check_name,
                              report_url=report_url, summary_file=summary_file, check_run=check_run,
                              comment=comment, labels=labels, comment_author=author,
                              guards=DEFAULT_GUARDS + tuple(guard or ()), token_env=token_env, source=source)

    try:
        if stage1_conclusion is not None and stage1_conclusion != "success":
            raise RejectedVerdict(f"stage 1 (fasttrack verify) concluded {stage1_conclusion!r}, so there is "
                                  "no verdict to publish", path="workflow_run", field="conclusion",
                                  fix="see stage 1's log; a PR that renames or breaks it is never eligible")
        if artifact_run_id is not None:
            dl = connect(token_from_env(artifact_token_env or token_env), base_url)
            blobs = fetch_artifact(dl, repo, artifact_run_id, head_sha, artifact_name, max_bytes)
            m = meta_from_bytes(blobs["pr.json"], f"{source}: pr.json")
            claimed = pr if pr is not None else m.pr
            v = verdict_from_bytes(blobs["verdict.json"], f"{source}: verdict.json", max_bytes)
        elif verdict is not None:
            m = load_meta(meta) if meta is not None else None
            if pr is None and m is not None:
                claimed = m.pr
            v = load_verdict(verdict, max_bytes=max_bytes)
        else:
            raise InputError("nothing to publish", field="--verdict",
                             fix="pass --verdict FILE or --artifact-run-id RUN_ID")
        if claimed is None:
            raise RejectedVerdict("no PR number: neither --pr nor the artifact's pr.json names one",
                                  path=source, field="pr")
        refuse_inconsistent(v, source)
        token = token_from_env(token_env)
        gh = connect(token, base_url)

        def me() -> str:
            with github_errors("finding the token's user (pass --comment-author to skip this)", token_env):
                return str(gh.me().login)

        opts = replace(options(claimed), meta=m)
        result = publish(gh, v, opts, me=me)
    except Exception as exc:  # fail closed on anything, then re-raise (exit 2; 3 for a bug)
        # A rejected artifact or GitHub refusing a step (InputError), or a bug in fasttrack: either way no
        # verdict was published for this head, so the previous push's eligible label must not survive.
        reason = (exc.render() if isinstance(exc, InputError)
                  else f"internal error in fasttrack ({type(exc).__name__}); no verdict was published")
        if summary_file is not None:
            write_rejection_summary(summary_file, reason)
        if reject_check and head_sha is not None:
            try:
                gh = connect(token_from_env(token_env), base_url)
                done = publish_rejection(gh, options(claimed), reason, head_label=head_label)
                typer.echo(log_line(done.line(claimed)))
            except Exception as again:  # stderr keeps one line: the error itself
                why = again.render() if isinstance(again, InputError) else type(again).__name__
                typer.echo(log_line(f"fasttrack: could not post the failing check: {why}"))
        raise
    typer.echo(log_line(result.line(claimed)))


@github_app.command("pr-files", epilog=PR_FILES_EPILOG)
def pr_files_command(
    repo: Annotated[str, typer.Option("--github-repo", help="OWNER/NAME of the GitHub repository.")],
    pr: Annotated[int, typer.Option("--pr", min=1, help="PR number.")],
    base_url: Annotated[str | None, typer.Option("--base-url", help=_BASE_URL_HELP)] = None,
    token_env: Annotated[str, typer.Option("--token-env", help=_TOKEN_HELP)] = "GITHUB_TOKEN",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the JSON here instead of stdout.")] = None,
    changes: Annotated[bool, typer.Option(
        "--changes", help="Print the change set the pipeline builds from the list (path, status, line "
                          "counts) instead of GitHub's raw entries.")] = False,
) -> None:
    """Fetch a PR's file list (all pages) as JSON, the input of `fasttrack.changes.file_list`."""
    from fasttrack.changes.file_list import changes_from_file_list
    from fasttrack.github.client import connect, token_from_env
    from fasttrack.github.files import fetch_pr_files
    from fasttrack.sanitize import log_line

    gh = connect(token_from_env(token_env), base_url)
    entries = fetch_pr_files(gh, repo, pr, token_env)
    payload: object = entries
    if changes:
        payload = [{"status": c.status.value, "path": c.path, "old_path": c.old_path, "binary": c.binary,
                    "added_lines": c.added_lines, "removed_lines": c.removed_lines}
                   for c in changes_from_file_list(entries, source=f"{repo}#{pr} files")]
    text = json.dumps(payload, indent=2) + "\n"
    if output is None:
        from fasttrack.render.output import stdout_document

        typer.echo(stdout_document(text, "json"), nl=False)
    else:
        from fasttrack.render.output import write_report

        write_report(output, text)
        typer.echo(log_line(f"fasttrack: {len(entries)} files of {repo}#{pr} written to {output}"), err=True)


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdefABCDEF" for c in text)
