"""A PR's file list from GitHub (paginated, 100 a page), as raw entries or as the pipeline's Changes."""

from __future__ import annotations

from typing import Any

from fasttrack.changes.model import Change
from fasttrack.github.client import clock_of, github_errors, split_repo

FILE_KEYS = ("filename", "status", "previous_filename", "patch", "additions", "deletions", "changes", "sha")


def fetch_pr_files(gh: Any, repo: str, pr: int, token_env: str = "GITHUB_TOKEN") -> list[dict[str, Any]]:
    """`GET /repos/{repo}/pulls/{pr}/files`, every page, trimmed to the fields the pipeline reads.

    GitHub lists at most 3000 files; a PR with more is reported by an InputError rather than cut short.
    """
    from fasttrack.errors import InputError

    owner, name = split_repo(repo)
    with github_errors(f"reading PR #{pr} of {repo}", token_env, clock_of(gh)):
        pull = gh.pull_request(owner, name, pr)
    if pull is None:
        raise InputError(f"PR #{pr} does not exist in {repo}", field="--pr")
    with github_errors(f"listing the files of PR #{pr}", token_env, clock_of(gh)):
        entries = [{k: v for k, v in f.as_dict().items() if k in FILE_KEYS} for f in pull.files()]
    total = pull.as_dict().get("changed_files")
    if isinstance(total, int) and total > len(entries):
        raise InputError(f"GitHub lists only {len(entries)} of PR #{pr}'s {total} files", field="--pr",
                         fix="use the git range (fasttrack verify --base ... --head ...) for a PR this large")
    return entries


def pr_changes(gh: Any, repo: str, pr: int, token_env: str = "GITHUB_TOKEN") -> tuple[Change, ...]:
    """The PR's change set for `fasttrack verify`, via `fasttrack.changes.file_list`."""
    from fasttrack.changes.file_list import changes_from_file_list

    return changes_from_file_list(fetch_pr_files(gh, repo, pr, token_env), source=f"{repo}#{pr} files")
