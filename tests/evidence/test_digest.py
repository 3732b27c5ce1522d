"""The contribution content digest: stable across histories, mtimes and order; any edit changes it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fasttrack.errors import InputError
from fasttrack.evidence.digest import compare_listings, contribution_digest, digest_of_listing

FILES = {
    "fasttrack.toml": b"schema_version = 1\n",
    "kernel.py": b"def fused(x):\n    return x * 2\n",
    "tests/test_kernel.py": b"def test_ok():\n    assert True\n",
    "data/weights.bin": bytes(range(256)),
}


def write_tree(root: Path, files: dict[str, bytes], order: list[str] | None = None) -> Path:
    for rel in order or list(files):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(files[rel])
    return root


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env, timeout=60)


def test_same_content_same_digest_regardless_of_order_and_mtime(tmp_path: Path) -> None:
    a = write_tree(tmp_path / "a", FILES)
    b = write_tree(tmp_path / "b", FILES, order=sorted(FILES, reverse=True))
    for i, p in enumerate(sorted(b.rglob("*"))):
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    os.chmod(b / "kernel.py", 0o755)
    da, db = contribution_digest(a), contribution_digest(b)
    assert da.sha256 == db.sha256
    assert da.files == db.files
    assert set(da.files) == set(FILES)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_same_content_in_two_git_histories(tmp_path: Path) -> None:
    # History 1: one commit. History 2: unrelated commits, a rebase-like rewrite, the files added piecemeal.
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    for r in (r1, r2):
        r.mkdir()
        git(r, "init", "-q")
    write_tree(r1 / "kernels" / "demo", FILES)
    git(r1, "add", "-A")
    git(r1, "commit", "-q", "-m", "all at once")
    (r2 / "README").write_text("unrelated\n")
    git(r2, "add", "-A")
    git(r2, "commit", "-q", "-m", "unrelated")
    for rel in sorted(FILES):
        write_tree(r2 / "kernels" / "demo", {rel: FILES[rel]})
        git(r2, "add", "-A")
        git(r2, "commit", "-q", "-m", f"add {rel}")
    (r2 / "README").write_text("unrelated, changed on main\n")
    git(r2, "commit", "-q", "-am", "unrelated change")
    one, two = contribution_digest(r1 / "kernels" / "demo"), contribution_digest(r2 / "kernels" / "demo")
    assert one.sha256 == two.sha256


def test_one_byte_changes_it_and_is_listed(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    before = contribution_digest(root)
    data = bytearray(FILES["data/weights.bin"])
    data[100] ^= 1
    (root / "data/weights.bin").write_bytes(bytes(data))
    after = contribution_digest(root)
    assert after.sha256 != before.sha256
    delta = compare_listings(before.files, after.files)
    assert delta.changed == ("data/weights.bin",) and not delta.added and not delta.removed


def test_added_removed_and_renamed_files_change_it(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    base = contribution_digest(root)
    (root / "extra.py").write_text("x = 1\n")
    added = contribution_digest(root)
    assert added.sha256 != base.sha256
    assert compare_listings(base.files, added.files).added == ("extra.py",)
    (root / "extra.py").unlink()
    assert contribution_digest(root).sha256 == base.sha256
    (root / "kernel.py").rename(root / "kernel2.py")
    renamed = contribution_digest(root)
    assert renamed.sha256 != base.sha256
    delta = compare_listings(base.files, renamed.files)
    assert delta.added == ("kernel2.py",) and delta.removed == ("kernel.py",)
    assert "added: kernel2.py" in delta.describe() and "removed: kernel.py" in delta.describe()


def test_empty_file_and_empty_dir(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    base = contribution_digest(root).sha256
    (root / "emptydir").mkdir()
    assert contribution_digest(root).sha256 == base  # directories are not content
    (root / "emptydir" / "empty.py").write_bytes(b"")
    assert contribution_digest(root).sha256 != base


def test_caches_and_evidence_subdir_are_excluded_but_stray_pyc_is_not(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    base = contribution_digest(root).sha256
    for cache in ("__pycache__/kernel.cpython-311.pyc", "tests/__pycache__/x.pyc", ".pytest_cache/v/x",
                  ".mypy_cache/x", "evidence/statement.json"):
        p = root / cache
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"cache")
    assert contribution_digest(root).sha256 == base
    (root / "tests" / "evidence").mkdir()
    (root / "tests" / "evidence" / "x.py").write_text("# a nested evidence/ dir is code\n")
    nested = contribution_digest(root).sha256
    assert nested != base
    (root / "kernel_impl.pyc").write_bytes(b"\x00compiled")  # importable without source: it is code
    assert contribution_digest(root).sha256 != nested


def test_symlink_hashed_by_target_not_followed(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    outside = tmp_path / "outside.py"
    outside.write_text("secret = 1\n")
    os.symlink(outside, root / "link.py")
    first = contribution_digest(root)
    outside.write_text("secret = 2\n")  # the link's target content is not the contribution's
    assert contribution_digest(root).sha256 == first.sha256
    (root / "link.py").unlink()
    os.symlink(tmp_path / "elsewhere.py", root / "link.py")
    assert contribution_digest(root).sha256 != first.sha256
    os.symlink(root / "data", root / "datalink")  # a link to a directory is not descended
    assert "datalink" in contribution_digest(root).files


def test_listing_digest_matches_directory_digest(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "c", FILES)
    d = contribution_digest(root)
    assert digest_of_listing(d.files) == d.sha256
    assert digest_of_listing({}) != d.sha256
    # The line format is unambiguous: moving bytes between a path and its hash changes the digest.
    zero, one = "0" * 64, "1" * 64
    assert digest_of_listing({"a": zero, "b": one}) != digest_of_listing({"a": one, "b": zero})


def test_digest_matches_the_documented_formula(tmp_path: Path) -> None:
    import hashlib

    root = write_tree(tmp_path / "c", {"b.py": b"b", "a/x.py": b"x"})
    want = hashlib.sha256(
        b"fasttrack-content-digest-v2\n"
        + b"a/x.py\0" + hashlib.sha256(b"file\0x").hexdigest().encode() + b"\n"
        + b"b.py\0" + hashlib.sha256(b"file\0b").hexdigest().encode() + b"\n"
    ).hexdigest()
    assert contribution_digest(root).sha256 == want


def test_missing_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="contribution directory not found"):
        contribution_digest(tmp_path / "nope")
