"""The contribution change set: every file of a contribution directory as a Change (added, or modified when
it replaces an engine file, with git -U0 style hunks), and the engine tree it lands in."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from fasttrack.cache import cache_root
from fasttrack.changes.git import (
    run_git,
)
from fasttrack.changes.model import Change, Hunk
from fasttrack.errors import InputError, from_os_error
from fasttrack.pipeline.options import ENGINE_TREE_ENV, MAX_TEXT_BYTES, VerifyOptions
from fasttrack.policy import Policy
from fasttrack.safe_read import NotRegular, read_regular
from fasttrack.sanitize import path_text
from fasttrack.verdict import ChangeStatus

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", ".hypothesis"}


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:8000]


def _all_added(text: str) -> tuple[Hunk, ...]:
    lines = text.splitlines()
    if not lines:
        return ()
    return (Hunk(added=tuple(enumerate(lines, start=1)), new_start=1, new_count=len(lines)),)


def _diff_hunks(old: str, new: str) -> tuple[Hunk, ...]:
    """Hunks (no context) between two texts, as git -U0 would give them."""
    a, b = old.splitlines(), new.splitlines()
    hunks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        hunks.append(Hunk(removed=tuple((i + 1, a[i]) for i in range(i1, i2)),
                          added=tuple((j + 1, b[j]) for j in range(j1, j2)),
                          old_start=i1 + 1 if i2 > i1 else i1, old_count=i2 - i1,
                          new_start=j1 + 1 if j2 > j1 else j1, new_count=j2 - j1))
    return tuple(hunks)



def contribution_files(root: Path, contrib: Path) -> list[Path]:
    """The contribution's files: what git would track (tracked + untracked, not ignored), else a walk."""
    proc = run_git(root, "ls-files", "-z", "-co", "--exclude-standard", "--", str(contrib), check=False)
    if proc.returncode == 0:
        files = {root / os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}
        return sorted(p for p in files if os.path.lexists(p))
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(contrib):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        out.extend(Path(dirpath) / f for f in filenames if not f.endswith((".pyc", ".pyo")))
    return sorted(out)


def file_change(path: Path, rel: str, engine_file: Path | None) -> Change:
    """One contribution file as a Change (added, or modified when it replaces an engine file)."""
    st = path.lstat()
    if path.is_symlink():
        return Change(status=ChangeStatus.ADDED, path=rel, new_mode="120000",
                      symlink_target=os.readlink(path), added_lines=1, removed_lines=0)
    mode = "100755" if st.st_mode & 0o111 else "100644"
    try:
        data = read_regular(path, MAX_TEXT_BYTES)  # None: too large to be judged as text
    except NotRegular as exc:
        raise InputError(f"a {exc.kind} in the contribution", path=path_text(str(path)), field="DIR",
                         fix="a contribution holds regular files and symlinks only: remove it") from None
    except OSError as exc:
        raise from_os_error(exc, what="contribution file", field="DIR", path=path_text(str(path))) from None
    binary = data is None or _is_binary(data)
    text = "" if data is None or binary else data.decode("utf-8", "replace")
    old = _engine_bytes(engine_file) if engine_file is not None else None
    if engine_file is not None and old is not None:
        old_mode = "100755" if engine_file.stat().st_mode & 0o111 else "100644"
        if binary or _is_binary(old):
            return Change(status=ChangeStatus.MODIFIED, path=rel, old_mode=old_mode, new_mode=mode,
                          binary=True)
        hunks = _diff_hunks(old.decode("utf-8", "replace"), text)
        return Change(status=ChangeStatus.MODIFIED, path=rel, old_mode=old_mode, new_mode=mode, hunks=hunks,
                      added_lines=sum(len(h.added) for h in hunks),
                      removed_lines=sum(len(h.removed) for h in hunks))
    if binary:
        return Change(status=ChangeStatus.ADDED, path=rel, new_mode=mode, binary=True)
    hunks = _all_added(text)
    return Change(status=ChangeStatus.ADDED, path=rel, new_mode=mode, hunks=hunks,
                  added_lines=sum(len(h.added) for h in hunks), removed_lines=0)


def _engine_bytes(path: Path) -> bytes | None:
    """The bytes of an engine file a contribution file replaces (None: absent, not a regular file, or over
    MAX_TEXT_BYTES, which counts as binary)."""
    try:
        data = read_regular(path, MAX_TEXT_BYTES)
    except (OSError, NotRegular):
        return None
    return b"\0" if data is None else data


def engine_text(path: Path) -> str | None:
    """The text of an engine file a contribution file replaces (None when it is not a readable text file)."""
    data = _engine_bytes(path)
    return None if data is None or _is_binary(data) else data.decode("utf-8", "replace")


def engine_tree_for(policy: Policy, opts: VerifyOptions) -> Path | None:
    """The engine's source tree to lay a contribution over, if one is at hand."""
    if opts.engine_tree is not None:
        if not (opts.engine_tree / policy.blast_radius.root_package).is_dir():
            raise InputError(f"no {policy.blast_radius.root_package}/ package in the engine tree",
                             path=opts.engine_tree, field="--engine-tree",
                             fix="pass the directory that holds the engine's package (e.g. .../vllm-0.33.0)")
        return opts.engine_tree
    env = os.environ.get(ENGINE_TREE_ENV)
    default = cache_root() / f"{policy.engine}-{policy.engine_version}"
    for candidate in ([Path(env)] if env else []) + [default]:
        if (candidate / policy.blast_radius.root_package).is_dir():
            return candidate
    return None

