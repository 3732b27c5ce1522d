"""The change set from a GitHub pull request's file list (`GET /repos/{o}/{r}/pulls/{n}/files`).

Each entry is a dict with `filename`, `status` (added, removed, modified, renamed, copied, changed,
unchanged), `previous_filename` for renames and copies, and `patch` (the unified hunks; GitHub leaves it out
for binary files and very large diffs). The file list carries no file modes and no symlink targets, so a
change built from it is weaker than one from git: `changed` (a mode or type change GitHub does not detail)
becomes TYPE_CHANGED with unknown modes, and a missing patch is treated as binary (unreviewable) unless the
file is empty and has a text suffix (an empty `__init__.py`), rather than silently passing the hook checks.
Prefer the git range when a checkout is at hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fasttrack.changes.git import parse_hunks
from fasttrack.changes.model import Change
from fasttrack.domain import ChangeStatus
from fasttrack.errors import InputError, from_validation_error

TEXT_SUFFIXES = frozenset({".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".yaml", ".yml", ".json", ".cfg",
                           ".ini", ".cu", ".cuh", ".c", ".cc", ".cpp", ".h", ".hpp", ".sh", ".cmake", ""})
_STATUS = {
    "added": ChangeStatus.ADDED,
    "removed": ChangeStatus.DELETED,
    "modified": ChangeStatus.MODIFIED,
    "renamed": ChangeStatus.RENAMED,
    "copied": ChangeStatus.COPIED,
    "changed": ChangeStatus.TYPE_CHANGED,
}


class PullFile(BaseModel):
    """One entry of a PR's file list (only the fields used here; GitHub sends more, which are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    filename: str = Field(min_length=1)
    status: Literal["added", "removed", "modified", "renamed", "copied", "changed", "unchanged"]
    previous_filename: str | None = None
    patch: str | None = None
    additions: int = Field(default=0, ge=0)
    deletions: int = Field(default=0, ge=0)


def change_from_pull_file(entry: PullFile) -> Change | None:
    """One Change for one file-list entry (None for `unchanged`)."""
    if entry.status == "unchanged":
        return None
    status = _STATUS[entry.status]
    old_path = entry.previous_filename if status in (ChangeStatus.RENAMED, ChangeStatus.COPIED) else None
    hunks = parse_hunks([line.encode() for line in entry.patch.split("\n")]) if entry.patch else ()
    has_lines = entry.additions + entry.deletions > 0
    # GitHub sends no patch for binary files, for very large diffs and for empty files; only the last is
    # harmless, and only an empty file with a text suffix is taken for one.
    text_name = PurePosixPath(entry.filename).suffix in TEXT_SUFFIXES
    binary = entry.patch is None and entry.status != "removed" and (has_lines or not text_name)
    added = sum(len(h.added) for h in hunks) if hunks else entry.additions
    removed = sum(len(h.removed) for h in hunks) if hunks else entry.deletions
    return Change(status=status, path=entry.filename, old_path=old_path, binary=binary, hunks=hunks,
                  added_lines=None if binary else added, removed_lines=None if binary else removed)


def changes_from_file_list(files: Iterable[Mapping[str, Any]], source: str = "pull request files") -> tuple[
        Change, ...]:
    """The change set of a PR from its file list; a malformed entry is an InputError naming its index."""
    changes: list[Change] = []
    for i, raw in enumerate(files):
        try:
            entry = PullFile.model_validate(raw)
        except ValidationError as exc:
            err = from_validation_error(exc, source, "pull request file entry")
            raise InputError(err.message, path=source, field=f"[{i}].{err.field}",
                             fix="pass the list GitHub returns for GET /pulls/{n}/files") from None
        change = change_from_pull_file(entry)
        if change is not None:
            changes.append(change)
    return tuple(changes)
