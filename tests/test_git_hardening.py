"""Issue 15 item 5: no file in a PR (and no repository setting) changes how fasttrack's git sees the PR.

Every case is a real repository in a temporary directory: the PR's `.gitattributes` (at the root or inside
the model directory), the repository's own `info/attributes`, `core.fsmonitor`, an external diff driver in
the environment; each must leave the change set exactly what the objects hold."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import GitRepo

from fasttrack.changes import git as fgit
from fasttrack.changes.git import WORKTREE, changes_between, diff_trees, resolve_revision

pytestmark = pytest.mark.usefixtures("isolated_cache")

MakeRepo = Callable[..., GitRepo]
K3 = "vllm/models/kimi_k3"
SO = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\ncode\n"
BASE = {f"{K3}/__init__.py": "", f"{K3}/model.py": "x = 1\n"}


def _changes(repo: GitRepo, base: str = "HEAD~1", head: str = "HEAD") -> dict[str, fgit.Change]:
    return {c.path: c for c in changes_between(repo.path, base, head)}


@pytest.mark.parametrize("where", [".gitattributes", f"{K3}/.gitattributes"])
def test_pr_gitattributes_cannot_make_a_binary_look_like_text(make_repo: MakeRepo, where: str) -> None:
    repo = make_repo(BASE)
    repo.commit({where: "*.so diff\n*.so text\n", f"{K3}/fast.so": SO})
    got = _changes(repo)
    assert got[f"{K3}/fast.so"].binary  # as git sees the bytes, not as the PR says
    assert got[f"{K3}/fast.so"].hunks == ()


def test_pr_gitattributes_cannot_hide_python_hunks(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/.gitattributes": "*.py -diff\n", f"{K3}/model.py": "x = 2\n"})
    change = _changes(repo)[f"{K3}/model.py"]
    assert not change.binary
    assert [a for h in change.hunks for a in h.added] == [(1, "x = 2")]


def test_repository_info_attributes_are_ignored(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    info = Path(repo.git("rev-parse", "--git-path", "info").strip())
    info = info if info.is_absolute() else repo.path / info
    info.mkdir(parents=True, exist_ok=True)
    (info / "attributes").write_text("* binary\n")
    change = _changes(repo)[f"{K3}/model.py"]
    assert not change.binary and change.hunks


def test_honest_binary_and_text_are_unchanged(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({f"{K3}/fast.so": SO, f"{K3}/model.py": "x = 2\n"})
    got = _changes(repo)
    assert got[f"{K3}/fast.so"].binary
    assert not got[f"{K3}/model.py"].binary


def test_worktree_blob_is_the_bytes_on_disk_whatever_gitattributes_say(make_repo: MakeRepo) -> None:
    repo = make_repo({**BASE, ".gitattributes": "*.py text eol=lf ident\n"})
    (repo.path / K3 / "model.py").write_bytes(b"x = 2\r\ny = '$Id: hidden $'\r\n")
    head = resolve_revision(repo.path, WORKTREE, "--head")
    blob = fgit.read_blob(repo.path, head.tree, f"{K3}/model.py")
    assert blob == b"x = 2\r\ny = '$Id: hidden $'\r\n"


def test_fsmonitor_and_hooks_of_the_repository_never_run(make_repo: MakeRepo, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    repo = make_repo(BASE)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    repo.git("config", "core.fsmonitor", str(hook))
    (repo.path / K3 / "new.py").write_text("y = 1\n")
    assert f"{K3}/new.py" in {c.path for c in changes_between(repo.path, "HEAD", WORKTREE)}
    fgit.checkout_holds_tree(repo.path, resolve_revision(repo.path, "HEAD", "--head").tree)
    assert not marker.exists()


def test_external_diff_from_the_environment_never_runs(make_repo: MakeRepo, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    tool = tmp_path / "ext.sh"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(tool))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "diff.external")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(tool))
    repo = make_repo(BASE)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    b = resolve_revision(repo.path, "HEAD~1", "--base")
    h = resolve_revision(repo.path, "HEAD", "--head")
    assert diff_trees(repo.path, b.tree, h.tree)[0].hunks
    assert not marker.exists()


def test_every_git_command_goes_through_one_function() -> None:
    """No module of fasttrack spawns git except `fasttrack.changes.git._spawn_git` (which hardens it)."""
    root = Path(fgit.__file__).resolve().parent.parent
    spawners: list[str] = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for sub in ast.walk(node):  # an argv list that starts with "git"
                    if isinstance(sub, ast.List) and sub.elts and isinstance(sub.elts[0], ast.Constant) \
                            and sub.elts[0].value == "git":
                        spawners.append(f"{path.relative_to(root).as_posix()}:{node.name}")
    assert sorted(set(spawners)) == ["changes/git.py:_spawn_git"], spawners


def test_hardening_flags_are_on_every_command(monkeypatch: pytest.MonkeyPatch, make_repo: MakeRepo) -> None:
    seen: list[list[str]] = []
    real = fgit.subprocess.run

    def spy(argv: list[str], **kw: object) -> object:
        if argv and argv[0] == "git":
            seen.append(list(argv))
            env = kw.get("env")
            assert isinstance(env, dict) and env.get("GIT_ATTR_NOSYSTEM") == "1"
            assert "GIT_EXTERNAL_DIFF" not in env
        return real(argv, **kw)  # type: ignore[call-overload]

    repo = make_repo(BASE)
    repo.commit({f"{K3}/model.py": "x = 2\n"})
    monkeypatch.setattr(fgit.subprocess, "run", spy)
    changes_between(repo.path, "HEAD~1", "HEAD")
    fgit.materialize_tree(repo.path, "HEAD")
    assert seen
    for argv in seen:
        joined = " ".join(argv)
        for flag in ("core.attributesFile=", "core.fsmonitor=false", "core.hooksPath=/dev/null",
                     "diff.external="):
            assert flag in joined, (flag, argv)
    assert os.environ.get("GIT_ATTR_NOSYSTEM") is None  # the process's own environment is untouched


def test_no_command_asks_git_for_filters_or_textconv() -> None:
    """`cat-file --filters`/`--textconv` and `diff --textconv` would run drivers the PR's attributes name."""
    root = Path(fgit.__file__).resolve().parent.parent
    asked = [f"{p.relative_to(root).as_posix()}:{node.lineno}"
             for p in root.rglob("*.py") for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and node.value in ("--filters", "--textconv", "--ext-diff")]
    assert asked == []
    assert {"--no-textconv", "--no-ext-diff"} <= set(fgit._DIFF_FLAGS)
