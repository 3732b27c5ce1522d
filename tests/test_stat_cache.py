"""The checkout's blob ids remembered by stat data (fasttrack/changes/stat_cache.py): a warm run does not
read the files again, and an edit that keeps the size and the mtime is still caught (its ctime changed)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.changes import git as git_mod
from fasttrack.changes import stat_cache
from fasttrack.changes.git import checkout_holds_tree

pytestmark = pytest.mark.usefixtures("isolated_cache")


def counting(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []
    real = git_mod._blob_id

    def spy(path: bytes, fmt: str) -> str | None:
        calls.append(path)
        return real(path, fmt)

    monkeypatch.setattr(git_mod, "_blob_id", spy)
    return calls


def test_a_warm_check_reads_no_file_and_an_edit_is_still_caught(make_repo: Callable[..., GitRepo],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stat_cache, "RACY_NS", 0)  # the files were just written: trust them at once
    repo = make_repo({"vllm/a.py": "x = 1\n", "vllm/b.py": "y = 2\n"})
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    calls = counting(monkeypatch)
    assert checkout_holds_tree(repo.path, tree) and len(calls) == 2
    calls.clear()
    assert checkout_holds_tree(repo.path, tree) and calls == []  # warm: stat data only

    target = repo.path / "vllm/a.py"
    st = os.stat(target)
    time.sleep(0.01)
    target.write_text("x = 9\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime: only ctime tells
    assert not checkout_holds_tree(repo.path, tree)
    assert calls == [os.fsencode(target)]


def test_racily_clean_files_are_never_remembered(make_repo: Callable[..., GitRepo],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo({"vllm/a.py": "x = 1\n"})
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    calls = counting(monkeypatch)
    assert checkout_holds_tree(repo.path, tree)
    assert checkout_holds_tree(repo.path, tree)
    assert len(calls) == 2  # written just now: within RACY_NS, hashed both times


def test_a_corrupt_record_is_ignored(make_repo: Callable[..., GitRepo], monkeypatch: pytest.MonkeyPatch,
                                     isolated_cache: Path) -> None:
    monkeypatch.setattr(stat_cache, "RACY_NS", 0)
    repo = make_repo({"vllm/a.py": "x = 1\n"})
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    assert checkout_holds_tree(repo.path, tree)
    for record in (isolated_cache / "checkouts").iterdir():
        record.write_bytes(b"\x00garbage")
    calls = counting(monkeypatch)
    assert checkout_holds_tree(repo.path, tree) and len(calls) == 1
