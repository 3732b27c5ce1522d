"""Helpers for the integration tests on the real vLLM tree: the base repository and synthetic PRs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

VLLM_VERSION = "0.33.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
POLICY = REPO_ROOT / "policies" / "vllm.toml"

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "fasttrack tests", "GIT_AUTHOR_EMAIL": "tests@fasttrack.invalid",
    "GIT_COMMITTER_NAME": "fasttrack tests", "GIT_COMMITTER_EMAIL": "tests@fasttrack.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}

# Repository files the wheel lacks, for the build-file PR.
STAND_INS = {
    "setup.py": "from setuptools import setup\n\nsetup()\n",
    "requirements/cuda.txt": "torch==2.9.0\n",
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.26)\n",
}


@dataclass
class VllmRepo:
    """The base repository and a way to commit synthetic PRs on top of it."""

    path: Path
    base: str = ""
    setup_seconds: dict[str, float] = field(default_factory=dict)

    def git(self, *args: str) -> str:
        proc = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True,
                              env={**os.environ, **_GIT_ENV}, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def read(self, rel: str) -> str:
        return (self.path / rel).read_text()

    def pr(self, *, write: Mapping[str, str] | None = None, append: Mapping[str, str] | None = None,
           delete: tuple[str, ...] = (), rename: Mapping[str, str] | None = None,
           symlink: Mapping[str, str] | None = None) -> str:
        """Commit a PR on top of the base (the working tree is back at the base afterwards); its sha."""
        self.git("checkout", "-q", "--detach", self.base)
        try:
            for rel, text in (write or {}).items():
                p = self.path / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)
            for rel, text in (append or {}).items():
                p = self.path / rel
                p.write_text(p.read_text() + text)
            for rel in delete:
                (self.path / rel).unlink()
            for old, new in (rename or {}).items():
                self.git("mv", old, new)
            for rel, target in (symlink or {}).items():
                os.symlink(target, self.path / rel)
            self.git("add", "-A")
            self.git("commit", "-q", "--no-verify", "-m", "synthetic PR")
            return self.git("rev-parse", "HEAD").strip()
        finally:
            self.git("checkout", "-q", "-f", "--detach", self.base)
            self.git("clean", "-q", "-fd")
