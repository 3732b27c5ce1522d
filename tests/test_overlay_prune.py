"""The engine overlay cache (fasttrack.pipeline.overlay) is shared by every fasttrack process of a user:
one run's pruning must never remove an overlay another run is reading (seen as FT113 "vllm/__init__.py
missing" while several runs of verify went on side by side). An overlay made or reused in the last minutes
is kept, however many newer ones there are; only older ones beyond the newest MAX_OVERLAYS go."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fasttrack.pipeline import overlay


def _engine(tmp_path: Path) -> Path:
    eng = tmp_path / "engine"
    (eng / "vllm").mkdir(parents=True)
    (eng / "vllm" / "__init__.py").write_text("")
    return eng


def _files(tmp_path: Path, i: int) -> dict[str, Path]:
    src = tmp_path / f"src{i}.py"
    src.write_text(f"X = {i}\n")
    return {"vllm/models/m/x.py": src}


def test_an_overlay_in_use_survives_newer_runs_pruning(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    eng = _engine(tmp_path)
    in_use = overlay.overlay_tree(eng, _files(tmp_path, 0))
    for i in range(1, overlay.MAX_OVERLAYS + 3):  # other runs, side by side, each with its own contribution
        overlay.overlay_tree(eng, _files(tmp_path, i))
    assert (in_use / "vllm" / "__init__.py").is_file()


def test_old_overlays_beyond_the_newest_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(overlay, "MAX_OVERLAYS", 2)
    eng = _engine(tmp_path)
    made = [overlay.overlay_tree(eng, _files(tmp_path, i)) for i in range(4)]
    hour_ago = time.time() - 3600
    for i, p in enumerate(made):
        os.utime(p, (hour_ago + i, hour_ago + i))
    newest = overlay.overlay_tree(eng, _files(tmp_path, 9))
    kept = sorted(p.name for p in newest.parent.iterdir() if not p.name.startswith("."))
    assert kept == sorted([newest.name, made[3].name])  # the newest two; the old ones went


def test_a_reused_overlay_counts_as_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    eng = _engine(tmp_path)
    first = overlay.overlay_tree(eng, _files(tmp_path, 0))
    os.utime(first, (time.time() - 3600, time.time() - 3600))
    assert overlay.overlay_tree(eng, _files(tmp_path, 0)) == first
    assert time.time() - first.stat().st_mtime < 60
