"""Session fixtures for the integration tests on the real vLLM 0.33.0 tree (marker `vllm_tree`).

`vllm_tree` is the extracted wheel (``python -m fasttrack.engine_tree 0.33.0``; downloaded and cached on first
use, ~336 MB). `vllm_repo` copies its ``vllm/`` into a temporary git repository as the base commit, with small
stand-ins for the repository files the wheel lacks (setup.py, requirements/cuda.txt, CMakeLists.txt); each
test then commits a synthetic PR on top of the base and runs `fasttrack verify` on the range.

Measured on the 2-core development VM: copying the 3,231 files takes 1.6 s and the base commit (`git add -A` +
commit) 3.0 s when the machine is quiet (3.0 s and 5.1 s with other jobs running), once per session.
fasttrack's cache ($FASTTRACK_CACHE_DIR: materialised trees and graphs) points at a session temporary
directory, so every PR head is judged cold.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_repo_support import STAND_INS, VLLM_VERSION, VllmRepo

from fasttrack.engine_tree import EngineTreeError, ensure_tree


@pytest.fixture(scope="session")
def vllm_tree() -> Path:
    """The real vLLM 0.33.0 tree (the directory holding vllm/), downloaded and extracted on first use."""
    try:
        return ensure_tree(VLLM_VERSION)
    except EngineTreeError as exc:
        pytest.fail(f"the vLLM {VLLM_VERSION} tree is not available: {exc} "
                    f"(run `python -m fasttrack.engine_tree {VLLM_VERSION}` with network access)")


@pytest.fixture(scope="session")
def vllm_repo(vllm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmRepo]:
    root = tmp_path_factory.mktemp("vllm-repo")
    repo = VllmRepo(root / "vllm-checkout")
    t0 = time.perf_counter()
    shutil.copytree(vllm_tree / "vllm", repo.path / "vllm")
    for rel, text in STAND_INS.items():
        (repo.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.path / rel).write_text(text)
    t1 = time.perf_counter()
    repo.git("init", "-q", "-b", "main")
    repo.git("config", "core.symlinks", "true")
    repo.git("add", "-A")
    repo.git("commit", "-q", "--no-verify", "-m", "vLLM 0.33.0 (base)")
    repo.base = repo.git("rev-parse", "HEAD").strip()
    repo.setup_seconds = {"copy": t1 - t0, "commit": time.perf_counter() - t1}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FASTTRACK_CACHE_DIR", str(root / "fasttrack-cache"))
        mp.setenv("FASTTRACK_TRACE", "0")  # the effect trace on this tree has its own test (test_trace_vllm)
        yield repo
