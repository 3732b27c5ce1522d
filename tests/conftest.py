"""Shared test fixtures: small git repositories and an isolated fasttrack cache.

    def test_x(make_repo):
        repo = make_repo({"vllm/models/kimi_k3/a.py": "x = 1\n"})      # the base commit
        head = repo.commit({"vllm/models/kimi_k3/a.py": "x = 2\n",      # modify
                            "setup.py": None,                           # delete
                            "vllm/models/kimi_k3/link": Symlink("../../v1/x.py"),
                            "tool.sh": Executable("echo hi\n"),
                            "vendor/lib": Gitlink("1" * 40)})            # a submodule entry

The helper types live in tests/git_helpers.py (`from git_helpers import GitRepo, Symlink, ...`).
`isolated_cache` points fasttrack's cache ($FASTTRACK_CACHE_DIR) at a temporary directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from git_helpers import FileSpec, GitRepo


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., GitRepo]:
    """make_repo(files, name="repo") -> a GitRepo whose first commit holds `files`."""

    def make(files: Mapping[str, FileSpec], name: str = "repo") -> GitRepo:
        path = tmp_path / name
        path.mkdir()
        repo = GitRepo(path)
        repo.git("init", "-q", "-b", "main")
        repo.git("config", "core.symlinks", "true")
        repo.commit(files, message="base")
        return repo

    return make


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """fasttrack's cache ($FASTTRACK_CACHE_DIR) in a temporary directory."""
    cache = tmp_path / "fasttrack-cache"
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(cache))
    return cache
