"""The change set from git (every status, modes, symlinks, binaries, submodules), tree materialisation, the
working tree as a revision, and the GitHub file-list source."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import Executable, Gitlink, GitRepo, Symlink

from fasttrack.changes.file_list import changes_from_file_list
from fasttrack.changes.git import (
    WORKTREE,
    changes_between,
    checkout_holds_tree,
    materialize_revision,
    materialize_tree,
    parse_hunks,
    resolve_revision,
    unquote_c_path,
)
from fasttrack.changes.model import Change
from fasttrack.errors import InputError
from fasttrack.verdict import ChangeStatus

pytestmark = pytest.mark.usefixtures("isolated_cache")

MakeRepo = Callable[..., GitRepo]
BASE = {
    "vllm/models/kimi_k3/model.py": "import torch\n\n\ndef f(x):\n    return x\n",
    "vllm/models/kimi_k3/ops.py": "A = 1\nB = 2\nC = 3\n",
    "vllm/model_executor/layers/linear.py": "".join(f"line {i}\n" for i in range(40)),
    "vllm/v1/sample/sampler.py": "def sample():\n    pass\n",
    "tool.sh": "echo hi\n",
}


def by_path(changes: tuple[Change, ...]) -> dict[str, Change]:
    return {c.path: c for c in changes}


def test_added_modified_deleted_with_hunk_line_numbers(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({"vllm/models/kimi_k3/ops.py": "A = 1\nB = 22\nC = 3\nD = 4\n",
                 "vllm/models/kimi_k3/new.py": "x = 1\ny = 2\n",
                 "vllm/v1/sample/sampler.py": None})
    ch = by_path(changes_between(repo.path, "HEAD~1", "HEAD"))
    assert set(ch) == {"vllm/models/kimi_k3/ops.py", "vllm/models/kimi_k3/new.py",
                       "vllm/v1/sample/sampler.py"}

    mod = ch["vllm/models/kimi_k3/ops.py"]
    assert mod.status is ChangeStatus.MODIFIED
    assert (mod.added_lines, mod.removed_lines) == (2, 1)
    assert [h.removed for h in mod.hunks] == [((2, "B = 2"),), ()]
    assert [h.added for h in mod.hunks] == [((2, "B = 22"),), ((4, "D = 4"),)]

    new = ch["vllm/models/kimi_k3/new.py"]
    assert new.status is ChangeStatus.ADDED and new.old_mode is None and new.new_mode == "100644"
    assert new.hunks[0].added == ((1, "x = 1"), (2, "y = 2"))

    gone = ch["vllm/v1/sample/sampler.py"]
    assert gone.status is ChangeStatus.DELETED and gone.new_mode is None
    assert gone.hunks[0].removed == ((1, "def sample():"), (2, "    pass"))


def test_rename_across_zones_keeps_both_sides(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.git("mv", "vllm/model_executor/layers/linear.py", "vllm/models/kimi_k3/linear.py")
    repo.commit()
    (c,) = changes_between(repo.path, "HEAD~1", "HEAD")
    assert c.status is ChangeStatus.RENAMED
    assert c.old_path == "vllm/model_executor/layers/linear.py"
    assert c.path == "vllm/models/kimi_k3/linear.py"
    assert c.paths() == ("vllm/model_executor/layers/linear.py", "vllm/models/kimi_k3/linear.py")


def test_copy_of_an_unchanged_file_is_found(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    text = (repo.path / "vllm/model_executor/layers/linear.py").read_text()
    repo.commit({"vllm/models/kimi_k3/my_linear.py": text})
    (c,) = changes_between(repo.path, "HEAD~1", "HEAD")
    assert c.status is ChangeStatus.COPIED
    assert c.old_path == "vllm/model_executor/layers/linear.py"


def test_symlinks_type_and_mode_changes(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({"vllm/models/kimi_k3/sampler.py": Symlink("../../v1/sample/sampler.py"),
                 "vllm/models/kimi_k3/ops.py": Symlink("/etc/passwd"),
                 "tool.sh": Executable("echo hi\n")})
    ch = by_path(changes_between(repo.path, "HEAD~1", "HEAD"))
    link = ch["vllm/models/kimi_k3/sampler.py"]
    assert link.status is ChangeStatus.ADDED and link.is_symlink
    assert link.symlink_target == "../../v1/sample/sampler.py"
    typed = ch["vllm/models/kimi_k3/ops.py"]
    assert typed.status is ChangeStatus.TYPE_CHANGED
    assert (typed.old_mode, typed.new_mode, typed.symlink_target) == ("100644", "120000", "/etc/passwd")
    mode = ch["tool.sh"]
    assert mode.status is ChangeStatus.MODE_CHANGED
    assert (mode.old_mode, mode.new_mode) == ("100644", "100755")


def test_binary_files_have_no_hunks(make_repo: MakeRepo) -> None:
    repo = make_repo({**BASE, "vllm/models/kimi_k3/blob.bin": b"\x00\x01\x02"})
    repo.commit({"vllm/models/kimi_k3/blob.bin": b"\x00\x01\x03",
                 "vllm/models/kimi_k3/kernel.cubin": bytes(range(256))})
    ch = by_path(changes_between(repo.path, "HEAD~1", "HEAD"))
    for path in ("vllm/models/kimi_k3/blob.bin", "vllm/models/kimi_k3/kernel.cubin"):
        assert ch[path].binary and ch[path].hunks == () and ch[path].added_lines is None


def test_submodule_gitlink(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    repo.commit({"vllm/models/kimi_k3/vendor": Gitlink("1" * 40)})
    (c,) = changes_between(repo.path, "HEAD~1", "HEAD")
    assert c.status is ChangeStatus.ADDED and c.is_submodule and c.new_mode == "160000"
    assert not c.binary
    repo.commit({"vllm/models/kimi_k3/vendor": Gitlink("2" * 40)})
    (c,) = changes_between(repo.path, "HEAD~1", "HEAD")
    assert c.status is ChangeStatus.MODIFIED and c.is_submodule


def test_odd_path_names(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    names = ["vllm/models/kimi_k3/with space.py", "vllm/models/kimi_k3/ünï.py",
             'vllm/models/kimi_k3/q"t\tx.py']
    repo.commit({n: "x = 1\n" for n in names})
    ch = by_path(changes_between(repo.path, "HEAD~1", "HEAD"))
    assert set(ch) == set(names)
    for n in names:
        assert ch[n].hunks[0].added == ((1, "x = 1"),), n


def test_unquote_c_path() -> None:
    assert unquote_c_path(b'"a\\tb\\"c\\\\d"') == 'a\tb"c\\d'
    assert unquote_c_path(b'"\\303\\274.py"') == "ü.py"
    assert unquote_c_path(b"plain.py") == "plain.py"


def test_parse_hunks_with_context_lines() -> None:
    lines = [b"@@ -3,4 +3,5 @@ def f():", b" a", b"-b", b"+B", b"+C", b" d", b" e",
             b"\\ No newline at end of file"]
    (h,) = parse_hunks(lines)
    assert h.removed == ((4, "b"),)
    assert h.added == ((4, "B"), (5, "C"))
    assert (h.old_start, h.old_count, h.new_start, h.new_count) == (3, 4, 3, 5)


def test_missing_revision_names_the_option(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    with pytest.raises(InputError) as err:
        changes_between(repo.path, "no-such-branch", "HEAD")
    assert err.value.field == "--base" and "no-such-branch" in err.value.message
    with pytest.raises(InputError) as err:
        changes_between(repo.path, "HEAD", "deadbeef" * 5)
    assert err.value.field == "--head"
    with pytest.raises(InputError) as err:
        resolve_revision(repo.path, "--output=x", "--base")
    assert err.value.field == "--base"


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        changes_between(tmp_path, "HEAD~1", "HEAD")
    assert err.value.field == "--repo" and "not a git repository" in err.value.message
    with pytest.raises(InputError) as err:
        changes_between(tmp_path / "absent", "HEAD~1", "HEAD")
    assert "does not exist" in err.value.message


def test_materialize_tree_is_cached_by_tree_and_drops_outside_links(make_repo: MakeRepo,
                                                                    isolated_cache: Path) -> None:
    repo = make_repo(BASE)
    repo.commit({"vllm/models/kimi_k3/in.py": Symlink("ops.py"),
                 "vllm/models/kimi_k3/out.py": Symlink("../../../../etc/passwd"),
                 "vllm/models/kimi_k3/abs.py": Symlink("/etc/passwd"),
                 "vllm/models/kimi_k3/dot": Symlink("."),
                 "vllm/models/kimi_k3/escape.py": Symlink("dot/../../../../.."),
                 "tool.sh": Executable("echo hi\n"),
                 "vllm/models/kimi_k3/vendor": Gitlink("1" * 40)})
    tree = repo.git("rev-parse", "HEAD^{tree}").strip()
    d = materialize_tree(repo.path, "HEAD")
    assert d == isolated_cache / "trees" / tree
    assert (d / "vllm/models/kimi_k3/model.py").read_text() == BASE["vllm/models/kimi_k3/model.py"]
    assert os.access(d / "tool.sh", os.X_OK)
    assert (d / "vllm/models/kimi_k3/in.py").is_symlink()
    for name in ("out.py", "abs.py", "escape.py"):
        assert not os.path.lexists(d / "vllm/models/kimi_k3" / name), name
    assert (d / "vllm/models/kimi_k3/vendor").is_dir()
    # Reused, not rewritten: a marker survives a second call; no temporary directories are left behind.
    (d / "marker").write_text("x")
    assert materialize_tree(repo.path, repo.head()) == d and (d / "marker").exists()
    assert [p.name for p in (isolated_cache / "trees").iterdir()] == [tree]


def _tree_from_blobs(repo: GitRepo, files: dict[str, bytes]) -> str:
    """A commit whose tree holds exactly these bytes (hashed with --no-filters: no attribute applies)."""
    for rel, data in files.items():
        path = repo.path / "blobs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        oid = repo.git("hash-object", "-w", "--no-filters", str(path)).strip()
        repo.git("update-index", "--add", "--cacheinfo", f"100644,{oid},{rel}")
    tree = repo.git("write-tree").strip()
    return repo.git("commit-tree", tree, "-p", "HEAD", "-m", "attributes").strip()


def test_materialised_files_are_the_blobs_whatever_gitattributes_say(make_repo: MakeRepo,
                                                                      isolated_cache: Path) -> None:
    """A PR's .gitattributes asks for CRLF conversion, $Id$ expansion, UTF-16 re-encoding and a smudge
    filter that the repository's own config defines (and which would leave a marker); the user's config
    asks for autocrlf and has a post-checkout hook. None of it applies: every file is its blob, byte for
    byte, no filter or hook runs, and export-ignore hides nothing."""
    repo = make_repo(BASE)
    marker = repo.path.parent / "SMUDGED"
    repo.git("config", "filter.evil.smudge", f"sh -c 'touch {marker}; tr a-z A-Z'")
    repo.git("config", "filter.evil.required", "true")
    repo.git("config", "core.autocrlf", "true")
    hook = repo.path / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}.hook\n")
    hook.chmod(0o755)
    files = {
        ".gitattributes": b"*.py text eol=crlf ident\nenc.py working-tree-encoding=UTF-16\n"
                          b"evil.py filter=evil\nhidden.py export-ignore\n",
        "vllm/models/kimi_k3/a.py": b"# $Id$\nimport torch\nX = 1\n",
        "vllm/models/kimi_k3/enc.py": b"Y = 2\n",
        "vllm/models/kimi_k3/evil.py": b"import os\nos.environ['A'] = '1'\n",
        "vllm/models/kimi_k3/hidden.py": b"Z = 3\n",
        "vllm/models/kimi_k3/crlf.py": b"W = 4\r\n",
    }
    head = _tree_from_blobs(repo, files)
    d = materialize_tree(repo.path, head)
    for rel, data in files.items():
        assert (d / rel).read_bytes() == data, rel
    assert not marker.exists() and not Path(f"{marker}.hook").exists()
    # the same bytes the old blob-by-blob reader produced: the graph cache may key this tree by its sha
    assert (d / "vllm/models/kimi_k3/model.py").read_bytes() == BASE["vllm/models/kimi_k3/model.py"].encode()


def test_materialise_refuses_unsafe_paths(make_repo: MakeRepo, isolated_cache: Path) -> None:
    """A hand-made tree with a `..` entry (git itself refuses to check it out) is an input error, and
    nothing is left in the cache."""
    repo = make_repo(BASE)
    blob = repo.git("rev-parse", "HEAD:tool.sh").strip()
    raw = b"100644 ..\0" + bytes.fromhex(blob)
    proc = subprocess.run(["git", "-C", str(repo.path), "hash-object", "-w", "-t", "tree", "--literally",
                           "--stdin"], input=raw, capture_output=True, check=True)
    tree = proc.stdout.decode().strip()
    with pytest.raises(InputError) as err:
        materialize_tree(repo.path, tree)
    assert err.value.field == "--head" and "unsafe path" in err.value.message
    assert list((isolated_cache / "trees").iterdir()) == []


def test_a_checkout_at_the_head_is_analysed_in_place(make_repo: MakeRepo, isolated_cache: Path) -> None:
    """CI checks out the PR head: when the checkout holds the head's tree byte for byte and nothing else
    (ignored __pycache__ aside), it is the head directory and nothing is written to the cache."""
    repo = make_repo(BASE)
    head = repo.commit({"vllm/models/kimi_k3/new.py": "Y = 2\n"})
    (repo.path / "vllm/models/kimi_k3/__pycache__").mkdir()
    (repo.path / "vllm/models/kimi_k3/__pycache__/new.cpython-311.pyc").write_bytes(b"\0")
    rev = resolve_revision(repo.path, head, "--head")
    assert checkout_holds_tree(repo.path, rev.tree)
    assert materialize_revision(repo.path, rev, reuse_checkout=True) == repo.path
    assert not (isolated_cache / "trees").exists()
    # without the option (and for any other revision) the tree is materialised as before
    assert materialize_revision(repo.path, rev) == isolated_cache / "trees" / rev.tree


@pytest.mark.parametrize("spoil", ["untracked", "ignored", "pycache-py", "edited", "staged", "crlf",
                                   "symlink", "other"])
def test_a_checkout_that_differs_from_the_head_is_not_reused(make_repo: MakeRepo, isolated_cache: Path,
                                                              spoil: str) -> None:
    """Anything the copy would not hold, or hold differently, sends verify to the materialised copy: an
    untracked or ignored file (grimp would see it), an edit, a staged file, bytes converted on checkout
    (autocrlf: git calls the file clean, its bytes are not the blob's), a symlink, another revision."""
    repo = make_repo({**BASE, ".gitignore": "*.log\n"})
    head = repo.head()
    if spoil == "untracked":
        (repo.path / "vllm/models/kimi_k3/draft.py").write_text("import os\n")
    elif spoil == "ignored":
        (repo.path / "vllm/notes.log").write_text("x\n")
    elif spoil == "pycache-py":  # only bytecode may hide in __pycache__
        (repo.path / "vllm/__pycache__").mkdir()
        (repo.path / "vllm/__pycache__/sitecustomize.py").write_text("import os\n")
    elif spoil == "edited":
        (repo.path / "vllm/models/kimi_k3/ops.py").write_text("A = 9\n")
    elif spoil == "staged":
        (repo.path / "vllm/models/kimi_k3/staged.py").write_text("S = 1\n")
        repo.git("add", "vllm/models/kimi_k3/staged.py")
    elif spoil == "crlf":
        repo.git("config", "core.autocrlf", "true")
        (repo.path / "vllm/models/kimi_k3/ops.py").unlink()
        repo.git("checkout", "--", "vllm/models/kimi_k3/ops.py")
        assert b"\r\n" in (repo.path / "vllm/models/kimi_k3/ops.py").read_bytes()
        assert repo.git("status", "--porcelain") == ""
    elif spoil == "symlink":
        head = repo.commit({"vllm/models/kimi_k3/link.py": Symlink("ops.py")})
    else:
        repo.commit({"vllm/models/kimi_k3/ops.py": "A = 2\n"})  # the checkout moves on; `head` stays
    rev = resolve_revision(repo.path, head, "--head")
    assert not checkout_holds_tree(repo.path, rev.tree)
    assert materialize_revision(repo.path, rev, reuse_checkout=True) == isolated_cache / "trees" / rev.tree


def test_worktree_head_includes_untracked_files_and_leaves_the_index_alone(make_repo: MakeRepo) -> None:
    repo = make_repo(BASE)
    index = repo.path / ".git" / "index"
    before = index.read_bytes()
    (repo.path / "vllm/models/kimi_k3/draft.py").write_text("y = 1\n")
    (repo.path / "vllm/models/kimi_k3/ops.py").write_text("A = 0\n")
    (repo.path / ".gitignore").write_text("*.log\n")
    (repo.path / "noise.log").write_text("ignored\n")
    ch = by_path(changes_between(repo.path, "HEAD", WORKTREE))
    assert set(ch) == {"vllm/models/kimi_k3/draft.py", "vllm/models/kimi_k3/ops.py", ".gitignore"}
    assert ch["vllm/models/kimi_k3/draft.py"].status is ChangeStatus.ADDED
    assert index.read_bytes() == before
    assert materialize_tree(repo.path, WORKTREE) == repo.path


def test_changes_from_github_file_list() -> None:
    files: list[dict[str, object]] = [
        {"filename": "vllm/models/kimi_k3/a.py", "status": "modified", "additions": 1, "deletions": 1,
         "patch": "@@ -1,3 +1,3 @@\n x\n-y\n+Y\n z"},
        {"filename": "vllm/models/kimi_k3/b.py", "status": "renamed",
         "previous_filename": "vllm/model_executor/layers/b.py", "additions": 0, "deletions": 0},
        {"filename": "vllm/models/kimi_k3/k.cubin", "status": "added", "additions": 0, "deletions": 0},
        {"filename": "vllm/models/kimi_k3/big.py", "status": "added", "additions": 9000, "deletions": 0},
        {"filename": "vllm/models/kimi_k3/__init__.py", "status": "added", "additions": 0, "deletions": 0},
        {"filename": "setup.py", "status": "removed", "additions": 0, "deletions": 3,
         "patch": "@@ -1,3 +0,0 @@\n-a\n-b\n-c"},
        {"filename": "x.py", "status": "unchanged"},
    ]
    ch = by_path(changes_from_file_list(files))
    assert set(ch) == {"vllm/models/kimi_k3/a.py", "vllm/models/kimi_k3/b.py", "vllm/models/kimi_k3/k.cubin",
                       "vllm/models/kimi_k3/big.py", "vllm/models/kimi_k3/__init__.py", "setup.py"}
    a = ch["vllm/models/kimi_k3/a.py"]
    assert a.hunks[0].removed == ((2, "y"),) and a.hunks[0].added == ((2, "Y"),)
    assert ch["vllm/models/kimi_k3/b.py"].old_path == "vllm/model_executor/layers/b.py"
    assert ch["vllm/models/kimi_k3/b.py"].status is ChangeStatus.RENAMED
    assert ch["vllm/models/kimi_k3/k.cubin"].binary  # no patch, not a text suffix: taken for binary
    assert ch["vllm/models/kimi_k3/big.py"].binary  # lines but no patch: cannot be checked
    assert not ch["vllm/models/kimi_k3/__init__.py"].binary  # an empty text file
    assert ch["setup.py"].status is ChangeStatus.DELETED and ch["setup.py"].removed_lines == 3


def test_github_file_list_rejects_malformed_entries() -> None:
    with pytest.raises(InputError) as err:
        changes_from_file_list([{"filename": "a.py", "status": "modified"},
                                {"filename": "b.py", "status": "x"}])
    assert err.value.field is not None and err.value.field.startswith("[1].status")
