"""Git repositories for tests: build one from a dict of files, commit heads on top of it.

Values: str (text file), bytes (raw file), Symlink(target), Executable(text), Gitlink(sha), None (delete).
The `make_repo` fixture (tests/conftest.py) builds a GitRepo in a temporary directory. Import the helper
types from here (`from git_helpers import Symlink`), not from conftest: several conftest modules exist.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Symlink:
    target: str


@dataclass(frozen=True)
class Executable:
    text: str


@dataclass(frozen=True)
class Gitlink:
    sha: str


FileSpec = str | bytes | Symlink | Executable | Gitlink | None

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "fasttrack tests", "GIT_AUTHOR_EMAIL": "tests@fasttrack.invalid",
    "GIT_COMMITTER_NAME": "fasttrack tests", "GIT_COMMITTER_EMAIL": "tests@fasttrack.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


class GitRepo:
    """A throw-away git repository with helpers to write files and commit."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str) -> str:
        proc = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True,
                              env={**os.environ, **_GIT_ENV}, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def write(self, files: Mapping[str, FileSpec]) -> None:
        """Write (or delete, for None) files in the working tree."""
        for rel, spec in files.items():
            path = self.path / rel
            if spec is None:
                if path.is_symlink() or path.is_file():
                    path.unlink()
                else:
                    self.git("rm", "-q", "--cached", "--ignore-unmatch", rel)
                continue
            if isinstance(spec, Gitlink):
                # An empty directory, as for a submodule that is not checked out; the index entry is
                # written by commit() after `git add -A` (which would otherwise drop it).
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or path.is_file():
                path.unlink()
            if isinstance(spec, Symlink):
                os.symlink(spec.target, path)
            elif isinstance(spec, Executable):
                path.write_text(spec.text)
                path.chmod(0o755)
            elif isinstance(spec, bytes):
                path.write_bytes(spec)
            else:
                path.write_text(spec)
                path.chmod(0o644)

    def commit(self, files: Mapping[str, FileSpec] | None = None, message: str = "change") -> str:
        """Write `files`, stage everything and commit; returns the new commit's sha."""
        if files:
            self.write(files)
        self.git("add", "-A")
        for rel, spec in (files or {}).items():
            if isinstance(spec, Gitlink):
                self.git("update-index", "--add", "--cacheinfo", f"160000,{spec.sha},{rel}")
        self.git("commit", "-q", "--allow-empty", "--no-verify", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()


def k3_manifest(name: str = "kimi_k3") -> str:
    """A minimal kimi_k3 contribution manifest (fasttrack.toml) for tests that build a contribution tree."""
    return TOY_K3_MANIFEST.replace('name = "kimi_k3"', f'name = "{name}"', 1)


TOY_K3_MANIFEST = """schema_version = 1
[contribution]
name = "kimi_k3"
model = "kimi_k3"
target_path = "vllm/models/kimi_k3/nvidia/fast"
[envelope]
hardware = [{ name = "NVIDIA H200", compute_capability = "9.0" }]
tp = [1]
batch = { min = 1, max = 64 }
context = { min = 1, max = 4096 }
dtypes = ["bfloat16"]
cuda_graph = "full"
[fallback]
metric = "k3_fallback_total"
stock_path = "k3.stock:forward"
guard = "k3.guard:decide"
[evidence]
kernel_tests = ["tests/test_layer.py"]
"""
