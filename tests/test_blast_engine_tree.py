"""fasttrack.engine_tree: extract vllm/**/*.py from a (fake, cached) wheel, atomically and idempotently."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fasttrack import engine_tree
from fasttrack.engine_tree import MARKER, EngineTreeError, ensure_tree, main


def fake_wheel(cache: Path, version: str = "9.9.9") -> Path:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    path = wheels / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/models/kimi_k3/model.py", "X = 1\n")
        zf.writestr("vllm/_C.abi3.so", b"\x7fELF")
        zf.writestr("vllm/config.json", "{}")
        zf.writestr("vllm-9.9.9.dist-info/METADATA", "Name: vllm\n")
        zf.writestr("../escape.py", "bad = 1\n")
    return path


def test_extracts_only_python_sources_and_reuses_the_tree(isolated_cache: Path) -> None:
    fake_wheel(isolated_cache)
    tree = ensure_tree("9.9.9")
    assert tree == isolated_cache / "vllm-9.9.9"
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    assert files == [MARKER, "vllm/__init__.py", "vllm/models/kimi_k3/model.py"]
    assert not (isolated_cache / "escape.py").exists()
    marker = (tree / MARKER).stat().st_mtime_ns
    assert ensure_tree("9.9.9") == tree
    assert (tree / MARKER).stat().st_mtime_ns == marker  # reused, not extracted again


def test_an_unfinished_tree_is_replaced(isolated_cache: Path) -> None:
    fake_wheel(isolated_cache)
    half = isolated_cache / "vllm-9.9.9" / "vllm"
    half.mkdir(parents=True)
    (half / "stale.py").write_text("")
    tree = ensure_tree("9.9.9")
    assert not (tree / "vllm/stale.py").exists() and (tree / MARKER).is_file()
    assert not [p for p in isolated_cache.iterdir() if p.name.startswith(".vllm-")]  # no temp dirs left


def test_cli_prints_the_path(isolated_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_wheel(isolated_cache)
    assert main(["9.9.9"]) == 0
    assert capsys.readouterr().out.strip() == str(isolated_cache / "vllm-9.9.9")
    assert main([]) == 2
    assert main(["not a version"]) == 2
    assert "bad vLLM version" in capsys.readouterr().err


def test_download_failure_is_a_clear_error(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        err = "ERROR: No matching distribution found for vllm==8.8.8"
        return subprocess.CompletedProcess(cmd, 1, "", err)

    monkeypatch.setattr(engine_tree.subprocess, "run", fake_run)
    with pytest.raises(EngineTreeError, match="No matching distribution"):
        ensure_tree("8.8.8")
    assert calls and calls[0][1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in calls[0] and ":all:" in calls[0] and "vllm==8.8.8" in calls[0]


def test_a_broken_wheel_is_a_clear_error(isolated_cache: Path) -> None:
    wheels = isolated_cache / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "vllm-7.7.7-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"not a zip")
    with pytest.raises(EngineTreeError):
        engine_tree.extract_tree(wheels / "vllm-7.7.7-cp38-abi3-manylinux_2_28_x86_64.whl",
                                 isolated_cache / "vllm-7.7.7")
    assert not (isolated_cache / "vllm-7.7.7").exists()
